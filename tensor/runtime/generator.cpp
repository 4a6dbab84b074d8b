// Generator: the (seed, offset) state of the counter-based Philox generator of one device, the
// per-device default generators, and the device-side offset that CUDA graph capture uses.
//
// Graph offsets. A captured random kernel cannot take its offset from the host at replay time, so
// while capturing, reserve() hands out offsets relative to a uint64 kept in device memory (the
// "device base"), and the capture records the total increment one replay consumes. Before every
// replay, begin_replay() sets the base (stream-ordered) to the host offset and advances the host
// offset by that increment: a replay draws exactly where the same step run eagerly would, so N
// replayed steps draw the same numbers as N eager steps, and eager draws between replays (or
// replays of several graphs) never reuse each other's numbers.
//
// The base is created (cudaMalloc of 8 bytes, set with a one-thread kernel, then a stream sync)
// outside any capture, because its initial value must not be recorded into a graph: by
// capture_begin() when called before capture starts, else by the generator's first draw outside a
// capture (training loops warm up eagerly before capturing). capture_begin() during a capture
// with no base yet throws, saying to call it before cudaStreamBeginCapture.
#include "ember/tensor/runtime/generator.h"

#include <memory>
#include <vector>

#include "ember/tensor/error.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/stream.h"

#if defined(EMBER_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/philox_offset.h"
#endif

namespace ember {
namespace {

#if defined(EMBER_WITH_CUDA)
cudaStream_t current_cuda_stream(Device device) {
  return static_cast<cudaStream_t>(current_stream(device).handle);
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Creates the device base of a CUDA generator when it does not exist yet and the current stream
// is not capturing. Returns whether the base exists afterwards. The caller holds the mutex.
bool ensure_device_base(Device device, uint64_t*& base) {
  if (base != nullptr) return true;
  DeviceGuard device_guard(device);
  cudaStream_t stream = current_cuda_stream(device);
  if (stream_is_capturing(stream)) return false;
  void* memory = nullptr;
  // One-time setup of 8 long-lived bytes, outside any capture; not from the caching allocator,
  // whose blocks may belong to a graph's private pool.
  EMBER_CUDA_CHECK(cudaMalloc(&memory, sizeof(uint64_t)));
  base = static_cast<uint64_t*>(memory);
  cuda::philox_offset_set(base, 0, stream);  // set again before every replay
  // A graph may later be replayed on another stream: make sure the value has landed.
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
  return true;
}
#endif

}  // namespace

Generator::Generator(Device device, uint64_t seed) : device_(device), seed_(seed) {
  if (device.is_cuda()) cuda::check_device(device);
}

Generator::~Generator() {
#if defined(EMBER_WITH_CUDA)
  // Destructors must not throw: a failure to free 8 bytes at teardown is ignored.
  if (device_offset_ != nullptr) (void)cudaFree(device_offset_);
#endif
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  EMBER_CHECK(!capturing_, "Generator::manual_seed: the generator of ", device_.str(),
              " is inside a capture (capture_begin without capture_end); reseed before "
              "capturing or after capture_end");
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  EMBER_CHECK(!capturing_, "Generator::set_offset: the generator of ", device_.str(),
              " is inside a capture; set the offset before capture_begin or after capture_end");
  offset_ = offset;
}

PhiloxState Generator::reserve(uint64_t increment) {
  std::lock_guard<std::mutex> lock(mutex_);
  PhiloxState params;
  params.seed = seed_;
  if (capturing_) {
    params.offset = capture_increment_;
    params.device_offset = device_offset_;
    capture_increment_ += increment;
    return params;
  }
#if defined(EMBER_WITH_CUDA)
  // Created at the first eager draw so that a later capture_begin issued after the stream began
  // capturing finds it (see the file comment); a no-op from then on.
  if (device_.is_cuda() && device_offset_ == nullptr) ensure_device_base(device_, device_offset_);
#endif
  params.offset = offset_;
  offset_ += increment;
  return params;
}

void Generator::capture_begin() {
  std::lock_guard<std::mutex> lock(mutex_);
  EMBER_CHECK_STATUS(device_.is_cuda(), not_supported,
                     "Generator::capture_begin: the generator of ", device_.str(),
                     " cannot capture; only CUDA generators take part in graphs");
  EMBER_CHECK(!capturing_, "Generator::capture_begin: the generator of ", device_.str(),
              " is already capturing; call capture_end first");
#if defined(EMBER_WITH_CUDA)
  EMBER_CHECK(ensure_device_base(device_, device_offset_),
              "Generator::capture_begin: the generator of ", device_.str(),
              " has no device offset yet and the current stream is already capturing, where it "
              "cannot be created; call capture_begin before cudaStreamBeginCapture, or draw from "
              "this generator once before capturing");
#endif
  capture_increment_ = 0;
  capturing_ = true;
}

uint64_t Generator::capture_end() {
  std::lock_guard<std::mutex> lock(mutex_);
  EMBER_CHECK(capturing_, "Generator::capture_end: the generator of ", device_.str(),
              " is not capturing; call capture_begin first");
  capturing_ = false;
  const uint64_t increment = capture_increment_;
  capture_increment_ = 0;
  return increment;
}

void Generator::begin_replay(uint64_t increment) {
  if (increment == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  EMBER_CHECK(!capturing_, "Generator::begin_replay: the generator of ", device_.str(),
              " is capturing; replay graphs outside a capture");
#if defined(EMBER_WITH_CUDA)
  EMBER_CHECK(device_offset_ != nullptr, "Generator::begin_replay: the generator of ",
              device_.str(),
              " has no device offset; only a graph captured from this generator can be replayed");
  DeviceGuard device_guard(device_);
  cudaStream_t stream = current_cuda_stream(device_);
  EMBER_CHECK(!stream_is_capturing(stream), "Generator::begin_replay: the current stream of ",
              device_.str(), " is capturing; replay graphs outside a capture");
  cuda::philox_offset_set(device_offset_, offset_, stream);
#endif
  offset_ += increment;
}

Generator& default_generator(Device device) {
  if (device.is_cpu()) {
    // Never destroyed: generators may be used by other static destructors.
    static Generator* cpu_generator = new Generator(Device::cpu());
    return *cpu_generator;
  }
  cuda::check_device(device);
  static std::mutex mutex;
  static auto* cuda_generators = new std::vector<std::unique_ptr<Generator>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (cuda_generators->empty()) cuda_generators->resize(size_t(cuda::device_count()));
  std::unique_ptr<Generator>& generator = cuda_generators->at(size_t(device.index));
  if (!generator) generator = std::make_unique<Generator>(device);
  return *generator;
}

void manual_seed(uint64_t seed) {
  default_generator(Device::cpu()).manual_seed(seed);
  const int gpus = cuda::device_count();
  for (int i = 0; i < gpus; ++i) default_generator(Device::cuda(i)).manual_seed(seed);
}

}  // namespace ember
