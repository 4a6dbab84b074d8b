// Random numbers on the GPU: the CUDA random_kernel against cuRAND's own curand_init + curand4 /
// curand_uniform4 / curand_normal4 (bit for bit), and against the CPU kernel (tensor/philox.h) for
// the same (seed, offset): bit-identical for uniform, bernoulli and randint in every dtype, normals
// within the error of the GPU's fast __sincosf. Graph capture of the generator is tested with the
// CUDA-graph work.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ember/cuda_kernels/random/random.cuh"
#include "ember/kernel_interface/random.h"
#include "ember/tensor/philox.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/runtime/stream.h"
#include "ember/tensor/tensor.h"

namespace {

using ember::Device;
using ember::DeviceType;
using ember::DType;
using ember::RandomKind;
using ember::Tensor;

constexpr uint64_t kSeed = 0x9e3779b97f4a7c15ull;

ember::RandomParams params(RandomKind kind, double a, double b, uint64_t offset) {
  ember::RandomParams p;
  p.kind = kind;
  p.a = a;
  p.b = b;
  p.seed = kSeed;
  p.offset = offset;
  return p;
}

void fill(const Tensor& t, const ember::RandomParams& p) {
  ember::random_kernel().get(t.device().type, t.dtype())(t, p);
}

// The bytes of a contiguous tensor, read back from the GPU after its stream has finished (copied
// with cudaMemcpy so this test depends on no copy kernel).
std::vector<unsigned char> host_bytes(const Tensor& t) {
  std::vector<unsigned char> bytes(t.nbytes());
  if (t.is_cuda()) {
    ember::current_stream(t.device()).synchronize();
    EMBER_CUDA_CHECK(cudaMemcpy(bytes.data(), t.data_ptr(), bytes.size(), cudaMemcpyDeviceToHost));
  } else {
    std::memcpy(bytes.data(), t.data_ptr(), bytes.size());
  }
  return bytes;
}

template <typename T>
std::vector<T> host_values(const Tensor& t) {
  const std::vector<unsigned char> bytes = host_bytes(t);
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// First index where two byte images of `element_size`-byte elements differ, or -1.
int64_t first_difference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b,
                         size_t element_size) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i += element_size)
    if (std::memcmp(&a[i], &b[i], element_size) != 0) return int64_t(i / element_size);
  return -1;
}

const int64_t kSizes[] = {1, 3, 4, 5, 1000, 4097, (int64_t(1) << 20) + 3};
const uint64_t kOffsets[] = {0, 4, 7, uint64_t(1) << 40, (uint64_t(1) << 63) + 12};

}  // namespace

TEST_CASE("CUDA random_kernel returns exactly what cuRAND's device API returns" *
          doctest::skip(!ember::cuda::is_available())) {
  const int64_t groups = (int64_t(1) << 18) + 1;
  const int64_t n = 4 * groups;
  for (uint64_t offset : kOffsets) {
    CAPTURE(offset);
    Tensor bits = ember::empty({n}, DType::i32, Device::cuda(0));
    Tensor uniforms = ember::empty({n}, DType::f32, Device::cuda(0));
    Tensor normals = ember::empty({n}, DType::f32, Device::cuda(0));
    ember::cuda::philox_curand_reference(
        static_cast<uint32_t*>(bits.data_ptr()), static_cast<float*>(uniforms.data_ptr()),
        static_cast<float*>(normals.data_ptr()), groups, kSeed, offset,
        static_cast<cudaStream_t>(ember::current_stream(Device::cuda(0)).handle));
    // randint over [0, 2^32) is the raw value, uniform over [0, 1) the uniform with 1 mapped to 0,
    // normal(0, 1) the normal itself.
    Tensor raw = ember::empty({n}, DType::i64, Device::cuda(0));
    Tensor uniform = ember::empty({n}, DType::f32, Device::cuda(0));
    Tensor normal = ember::empty({n}, DType::f32, Device::cuda(0));
    fill(raw, params(RandomKind::randint, 0, 4294967296.0, offset));
    fill(uniform, params(RandomKind::uniform, 0, 1, offset));
    fill(normal, params(RandomKind::normal, 0, 1, offset));
    const std::vector<uint32_t> ref_bits = host_values<uint32_t>(bits);
    const std::vector<float> ref_uniforms = host_values<float>(uniforms);
    const std::vector<float> ref_normals = host_values<float>(normals);
    const std::vector<int64_t> got_raw = host_values<int64_t>(raw);
    const std::vector<float> got_uniform = host_values<float>(uniform);
    const std::vector<float> got_normal = host_values<float>(normal);
    int64_t mismatches = 0;
    for (size_t i = 0; i < size_t(n); ++i) {
      mismatches += got_raw[i] != int64_t(ref_bits[i]);
      mismatches += got_uniform[i] != ember::philox::to_half_open(ref_uniforms[i]);
      mismatches += got_normal[i] != ref_normals[i];
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("CUDA random_kernel is bit-identical to the CPU kernel for uniform, bernoulli, randint" *
          doctest::skip(!ember::cuda::is_available())) {
  struct Case {
    RandomKind kind;
    DType dtype;
    double a, b;
  };
  const Case cases[] = {
      {RandomKind::uniform, DType::f32, 0, 1},
      {RandomKind::uniform, DType::f32, -3, 5},
      {RandomKind::uniform, DType::f64, -1, 1},
      {RandomKind::uniform, DType::f16, 1, 2},
      {RandomKind::uniform, DType::bf16, -2, 0.5},
      {RandomKind::bernoulli, DType::f32, 0.3, 0},
      {RandomKind::bernoulli, DType::boolean, 0.5, 0},
      {RandomKind::bernoulli, DType::u8, 0.9, 0},
      {RandomKind::randint, DType::i64, -5, 1000},
      {RandomKind::randint, DType::i32, 0, 4294967296.0},
      {RandomKind::randint, DType::u8, 0, 256},
      {RandomKind::randint, DType::f32, -7, 7},
  };
  for (const Case& c : cases) {
    for (int64_t n : kSizes) {
      for (uint64_t offset : kOffsets) {
        const std::string dtype = ember::dtype_name(c.dtype);
        CAPTURE(dtype);
        CAPTURE(int(c.kind));
        CAPTURE(n);
        CAPTURE(offset);
        Tensor on_cpu = ember::empty({n}, c.dtype, Device::cpu());
        Tensor on_gpu = ember::empty({n}, c.dtype, Device::cuda(0));
        fill(on_cpu, params(c.kind, c.a, c.b, offset));
        fill(on_gpu, params(c.kind, c.a, c.b, offset));
        CHECK(first_difference(host_bytes(on_cpu), host_bytes(on_gpu), on_cpu.element_size()) ==
              -1);
      }
    }
  }
}

TEST_CASE("CUDA normals match the CPU within the error of __sincosf" *
          doctest::skip(!ember::cuda::is_available())) {
  // cuRAND's Box-Muller takes sin/cos from the GPU's approximate __sincosf and logf may differ by
  // an ulp, so GPU and CPU normals agree in absolute terms, not relatively: near a zero of sin or
  // cos the relative error is unbounded (about half of all lanes exceed 1e-6 relative). Over 16M
  // standard normals on an H200 the worst error was 2.35e-6 * (|n| + 1); the output is scaled by
  // std, so the bound is err <= 4e-6 * (|value - mean| + std).
  for (int64_t n : kSizes) {
    for (uint64_t offset : kOffsets) {
      CAPTURE(n);
      CAPTURE(offset);
      Tensor on_cpu = ember::empty({n}, DType::f32, Device::cpu());
      Tensor on_gpu = ember::empty({n}, DType::f32, Device::cuda(0));
      fill(on_cpu, params(RandomKind::normal, 0.5, 2, offset));
      fill(on_gpu, params(RandomKind::normal, 0.5, 2, offset));
      const std::vector<float> cpu = host_values<float>(on_cpu);
      const std::vector<float> gpu = host_values<float>(on_gpu);
      double worst = 0;
      for (size_t i = 0; i < cpu.size(); ++i) {
        const double err = std::fabs(double(cpu[i]) - double(gpu[i]));
        worst = std::max(worst, err / (std::fabs(double(cpu[i]) - 0.5) + 2.0));
      }
      CHECK(worst <= 4e-6);
    }
  }
  Tensor on_cpu = ember::empty({4097}, DType::f64, Device::cpu());
  Tensor on_gpu = ember::empty({4097}, DType::f64, Device::cuda(0));
  fill(on_cpu, params(RandomKind::normal, 0, 1, 8));
  fill(on_gpu, params(RandomKind::normal, 0, 1, 8));
  const std::vector<double> cpu = host_values<double>(on_cpu);
  const std::vector<double> gpu = host_values<double>(on_gpu);
  for (size_t i = 0; i < cpu.size(); ++i)
    REQUIRE(std::fabs(cpu[i] - gpu[i]) <= 4e-6 * (std::fabs(cpu[i]) + 1));
}

TEST_CASE("CUDA random_kernel: strided outputs and the device-side offset" *
          doctest::skip(!ember::cuda::is_available())) {
  // A transposed view gets the value of logical element i at logical position i.
  Tensor dense = ember::empty({33, 17}, DType::f32, Device::cuda(0));
  fill(dense, params(RandomKind::uniform, 0, 1, 0));
  Tensor base = ember::empty({17, 33}, DType::f32, Device::cuda(0));
  fill(ember::make_view(base, {33, 17}, {1, 33}, 0), params(RandomKind::uniform, 0, 1, 0));
  const std::vector<float> d = host_values<float>(dense);
  const std::vector<float> t = host_values<float>(base);
  for (int64_t r = 0; r < 33; ++r)
    for (int64_t c = 0; c < 17; ++c) REQUIRE(t[size_t(c * 33 + r)] == d[size_t(r * 17 + c)]);

  // With device_offset set, the kernel draws at offset + *device_offset (what graph replays do).
  const uint64_t base_offset = (uint64_t(1) << 63) + 40;
  Tensor device_base = ember::empty({1}, DType::i64, Device::cuda(0));
  EMBER_CUDA_CHECK(
      cudaMemcpy(device_base.data_ptr(), &base_offset, sizeof base_offset, cudaMemcpyHostToDevice));
  ember::RandomParams relative = params(RandomKind::uniform, 0, 1, 8);
  relative.device_offset = static_cast<const uint64_t*>(device_base.data_ptr());
  Tensor on_gpu = ember::empty({1001}, DType::f32, Device::cuda(0));
  fill(on_gpu, relative);
  Tensor on_cpu = ember::empty({1001}, DType::f32, Device::cpu());
  fill(on_cpu, params(RandomKind::uniform, 0, 1, base_offset + 8));
  CHECK(first_difference(host_bytes(on_cpu), host_bytes(on_gpu), 4) == -1);
}

TEST_CASE("CUDA generator: eager draws advance the host offset; wrong kinds are refused" *
          doctest::skip(!ember::cuda::is_available())) {
  ember::Generator gen(Device::cuda(0), 11);
  const ember::PhiloxState first = gen.reserve();
  CHECK(first.seed == 11);
  CHECK(first.offset == 0);
  CHECK(first.device_offset == nullptr);
  CHECK(gen.reserve().offset == 4);
  CHECK(gen.offset() == 8);
  ember::Generator& default_gpu = ember::default_generator(Device::cuda(0));
  CHECK(&default_gpu == &ember::default_generator(Device::cuda(0)));
  CHECK(default_gpu.device() == Device::cuda(0));
  ember::manual_seed(99);
  CHECK(default_gpu.seed() == 99);
  CHECK(default_gpu.offset() == 0);
  CHECK_THROWS_AS(gen.capture_end(), ember::Error);

  Tensor ints = ember::empty({8}, DType::i64, Device::cuda(0));
  CHECK_THROWS_AS(fill(ints, params(RandomKind::uniform, 0, 1, 0)), ember::Error);
  CHECK_THROWS_AS(fill(ints, params(RandomKind::randint, 0, 1e12, 0)), ember::Error);
}
