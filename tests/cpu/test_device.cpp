// Device parsing and printing, the runtime queries every build must answer, the trivial CPU stream,
// the device-error code registry, the CPU allocator (alignment, zero size, failure message) and
// eager replay's direct path.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ember/tensor/device.h"
#include "ember/tensor/error.h"
#include "ember/tensor/runtime/allocator.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/device_errors.h"
#include "ember/tensor/runtime/eager_replay.h"
#include "ember/tensor/runtime/stream.h"
#include "support/errors.h"

using ember::Device;
using ember::DeviceType;
using ember::Status;
using ember::testing::contains;
using ember::testing::error_of;

TEST_CASE("Device parses cpu, cuda and cuda:N and prints them back") {
  struct Row {
    const char* spec;
    DeviceType type;
    int index;
    const char* printed;
  };
  const Row rows[] = {
      {"cpu", DeviceType::CPU, 0, "cpu"},        {"cpu:0", DeviceType::CPU, 0, "cpu"},
      {"cuda", DeviceType::CUDA, 0, "cuda:0"},   {"cuda:0", DeviceType::CUDA, 0, "cuda:0"},
      {"cuda:1", DeviceType::CUDA, 1, "cuda:1"}, {"cuda:15", DeviceType::CUDA, 15, "cuda:15"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.spec);
    const Device device(row.spec);
    CHECK(device.type == row.type);
    CHECK(device.index == row.index);
    CHECK(device.str() == row.printed);
    CHECK(Device(device.str()) == device);
    CHECK(Device(std::string(row.spec)) == device);
  }
  CHECK(Device("cuda:2") == Device::cuda(2));
  CHECK(Device("cuda:1") != Device::cuda(0));
  CHECK(Device("cpu") == Device::cpu());
  CHECK(Device("cpu") != Device::cuda(0));
  CHECK(Device::cuda(3).is_cuda());
  CHECK(Device::cpu().is_cpu());
}

TEST_CASE("Device rejects malformed strings, naming the input and the reason") {
  struct Row {
    const char* spec;
    const char* reason;
  };
  const Row rows[] = {
      {"", "unknown device type"},
      {"gpu", "unknown device type"},
      {"CUDA", "unknown device type"},
      {" cpu", "unknown device type"},
      {"cuda0", "unknown device type"},
      {"cuda:", "missing"},
      {"cuda:-1", "not a non-negative integer"},
      {"cuda:+1", "not a non-negative integer"},
      {"cuda:x", "not a non-negative integer"},
      {"cuda:1x", "not a non-negative integer"},
      {"cuda: 1", "not a non-negative integer"},
      {"cuda:1:2", "not a non-negative integer"},
      {"cuda:99999999999", "too large"},
      {"cpu:1", "only index 0"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.spec);
    const std::string message = error_of([&] { Device device(row.spec); }, Status::bad_param);
    CHECK(contains(message, std::string("\"") + row.spec + "\""));
    CHECK(contains(message, row.reason));
    CHECK(contains(message, "cuda:N"));  // says what would have been accepted
  }
}

TEST_CASE("the CUDA queries agree with the build") {
  CHECK(ember::cuda::device_count() >= 0);
  CHECK(ember::cuda::is_available() ==
        (ember::cuda::built_with_cuda() && ember::cuda::device_count() > 0));
#ifdef EMBER_WITH_CUDA
  CHECK(ember::cuda::built_with_cuda());
#else
  CHECK_FALSE(ember::cuda::built_with_cuda());
  CHECK_FALSE(ember::cuda::is_available());
  CHECK(ember::cuda::device_count() == 0);
  CHECK(
      contains(error_of([] { ember::cuda::current_device(); }, Status::not_supported), "no CUDA"));
  CHECK(contains(error_of([] { ember::cuda::synchronize(); }, Status::not_supported), "no CUDA"));
#endif
  CHECK_NOTHROW(ember::cuda::check_device(Device::cpu()));
  error_of([] { ember::cuda::check_device(Device(DeviceType::CPU, 1)); }, Status::bad_param);

  // The first GPU index past the visible ones: bad_param in a CUDA build (with or without GPUs),
  // not_supported in a build without CUDA. Every CUDA entry point checks it the same way.
  const Device missing = Device::cuda(ember::cuda::device_count());
  const Status expected =
      ember::cuda::built_with_cuda() ? Status::bad_param : Status::not_supported;
  CHECK(contains(error_of([&] { ember::cuda::check_device(missing); }, expected), missing.str()));
  error_of([&] { ember::allocate(16, missing); }, expected);
  error_of([&] { ember::current_stream(missing); }, expected);
  error_of([&] { ember::cuda::memory_stats(missing.index); }, expected);
  error_of([&] { ember::cuda::device_properties(missing.index); }, expected);
  error_of([&] { ember::cuda::MemPoolScope scope(missing.index, 1); }, expected);
  if (!ember::cuda::is_available()) CHECK_NOTHROW(ember::cuda::empty_cache());
}

TEST_CASE("the CPU stream is trivial and its guards and events do nothing") {
  const Device cpu = Device::cpu();
  const ember::Stream stream = ember::current_stream(cpu);
  CHECK(stream.device == cpu);
  CHECK(stream.handle == nullptr);
  CHECK(stream == ember::default_stream(cpu));
  CHECK(stream == ember::new_stream(cpu));
  CHECK(stream.query());
  CHECK_NOTHROW(stream.synchronize());
  {
    ember::StreamGuard guard(stream);
    CHECK(ember::current_stream(cpu) == stream);
  }
  CHECK(ember::current_stream(cpu) == stream);
  int not_a_stream = 0;
  error_of(
      [&] {
        ember::set_current_stream(ember::Stream{cpu, &not_a_stream});
      },
      Status::bad_param);
  CHECK_NOTHROW(ember::DeviceGuard{cpu});

  ember::Event event;
  CHECK(event.query());
  event.record(stream);
  CHECK(event.handle() == nullptr);
  CHECK(event.query());
  CHECK_NOTHROW(event.synchronize());
  CHECK_NOTHROW(event.wait(stream));
  ember::Event moved(std::move(event));
  CHECK(moved.query());
}

TEST_CASE("device error codes below the registered range are refused") {
  using namespace ember::cuda;
  error_of([] { register_device_error(kDeviceErrorIndexOutOfRange, "again"); }, Status::bad_param);
  error_of([] { register_device_error(kFirstRegisteredDeviceError - 1, "too low"); },
           Status::bad_param);
  error_of([] { register_device_error(kFirstRegisteredDeviceError, ""); }, Status::bad_param);
  CHECK_NOTHROW(register_device_error(kFirstRegisteredDeviceError + 1, "a test error"));
}

TEST_CASE("CPU allocate returns 64-byte aligned, writable memory") {
  const size_t sizes[] = {1, 7, 63, 64, 65, 1000, 4096, size_t(1) << 20, (size_t(3) << 20) + 5};
  for (size_t nbytes : sizes) {
    CAPTURE(nbytes);
    const ember::DataPtr data = ember::allocate(nbytes, Device::cpu());
    REQUIRE(data.ptr != nullptr);
    REQUIRE(bool(data.deleter));
    CHECK(reinterpret_cast<uintptr_t>(data.ptr) % 64 == 0);
    auto* bytes = static_cast<unsigned char*>(data.ptr);
    std::memset(bytes, 0xab, nbytes);
    CHECK(bytes[0] == 0xab);
    CHECK(bytes[nbytes - 1] == 0xab);
    data.deleter(data.ptr);
  }
}

TEST_CASE("CPU allocate of zero bytes owns nothing") {
  const ember::DataPtr data = ember::allocate(0, Device::cpu());
  CHECK(data.ptr == nullptr);
  CHECK_FALSE(bool(data.deleter));
}

TEST_CASE("CPU allocate failure throws alloc_failed naming the bytes asked for") {
  // No machine has this much memory; the second size would overflow the alignment rounding.
  for (size_t nbytes : {SIZE_MAX / 2, SIZE_MAX}) {
    CAPTURE(nbytes);
    const std::string message =
        error_of([&] { ember::allocate(nbytes, Device::cpu()); }, Status::alloc_failed);
    CHECK(contains(message, "CPU out of memory"));
    CHECK(contains(message, std::to_string(nbytes) + " bytes"));
  }
}

TEST_CASE("eager replay runs CPU work directly on every call and records nothing") {
  const ember::cuda::EagerReplayStats before = ember::cuda::eager_replay_stats();
  const int64_t setup_before = ember::cuda::eager_replay_setup_events();
  int runs = 0;
  const std::vector<uint64_t> key = {1, 2, 3};
  for (int i = 0; i < 3; ++i) ember::cuda::eager_replay(Device::cpu(), key, [&] { ++runs; });
  CHECK(runs == 3);
  const ember::cuda::EagerReplayStats after = ember::cuda::eager_replay_stats();
  CHECK(after.direct - before.direct == 3);
  CHECK(after.captures == before.captures);
  CHECK(after.replays == before.replays);
  CHECK(ember::cuda::eager_replay_setup_events() == setup_before);
}
