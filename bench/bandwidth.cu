// What the memory system of this GPU gives a streaming kernel, by mix of reads and writes: the
// ceilings behind issue 5's "% of copy bandwidth" rows. A kernel here moves 16-byte vectors with
// every access coalesced: each thread reads R vectors and writes W (from R read planes and W
// written planes of `units` vectors each), so R:W sets the mix -- copy (1:1), read-only, write-only
// and the mixes of the pooling rows' passes. A "pair" times two such kernels back to back, the way
// a forward and its backward alternate in bench_pool's fwd+bwd loops (the backward's dirty lines
// are written back during the next forward). Prints JSON lines: bench, shape, us, GBps (bytes
// moved over time: reads plus writes).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "timing.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench_bandwidth: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Plane j of the reads is src[j * units, (j + 1) * units), of the writes dst[...] likewise.
template <int R, int W, bool kStreamingStores>
__global__ void __launch_bounds__(256)
    mix_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t units,
               uint32_t seed) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += step) {
    uint4 acc = make_uint4(seed, uint32_t(u), 0u, 0u);
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const uint4 v = src[j * units + u];
      acc.x ^= v.x;
      acc.y ^= v.y;
      acc.z ^= v.z;
      acc.w ^= v.w;
    }
    if constexpr (W == 0) {
      // Read-only: a store no input triggers keeps the loads alive.
      if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u && acc.z == 1u) dst[0] = acc;
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        if constexpr (kStreamingStores) {
          __stcs(dst + j * units + u, acc);  // evict-first: L2 does not keep the dirty line
        } else {
          dst[j * units + u] = acc;
        }
      }
    }
  }
}

struct Mix {
  const char* name;
  void (*launch)(const uint4*, uint4*, int64_t, int, cudaStream_t);
  int reads, writes;
};

template <int R, int W, bool kStreamingStores = false>
void launch_mix(const uint4* src, uint4* dst, int64_t units, int blocks, cudaStream_t s) {
  mix_kernel<R, W, kStreamingStores><<<blocks, 256, 0, s>>>(src, dst, units, 0x1234u);
}

// Microseconds per call of f on the current stream (bench/timing.h: the median of 15 means of 20
// back-to-back calls, after warm-up).
template <typename F>
double median_us(F&& f) {
  return 1e3 * ember::bench::time_ms(f, 20, 15, 5);
}

void emit(const std::string& shape, double us, double bytes) {
  std::printf(
      "{\"bench\":\"bandwidth\",\"impl\":\"cuda\",\"shape\":\"%s\",\"us\":%.2f,\"GBps\":%.1f}\n",
      shape.c_str(), us, bytes / (us * 1e3));
  std::fflush(stdout);
}

}  // namespace

int main() {
  using namespace ember;
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"bandwidth\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  const Device gpu = Device::cuda();
  // 2048 threads per SM, grid-stride loops.
  const int blocks = std::max(cuda::device_properties(gpu.index).sm_count, 1) * 8;
  const cudaStream_t s = static_cast<cudaStream_t>(current_stream(gpu).handle);
  const int64_t max_bytes = int64_t(1) << 30;  // 1 GiB each way covers every mix below
  const Tensor src_buffer =
      full({max_bytes}, 0x5a, TensorOptions(DType::u8).with_device(gpu));  // not zeros
  Tensor dst_buffer = zeros({max_bytes}, TensorOptions(DType::u8).with_device(gpu));
  const uint4* src = static_cast<const uint4*>(src_buffer.data_ptr());
  uint4* dst = static_cast<uint4*>(dst_buffer.data_ptr());

  const Mix copy{"copy", launch_mix<1, 1>, 1, 1}, read{"read", launch_mix<1, 0>, 1, 0},
      write{"write", launch_mix<0, 1>, 0, 1},
      write_cs{"write (streaming stores)", launch_mix<0, 1, true>, 0, 1},
      // Max pooling 3x3 s2, bf16 256x64x112x112: forward reads x (411 MB) and writes y (103 MB)
      // and taps (51 MB with 8-bit taps, 26 with 4-bit): 16:6 and 16:5 (411:154 and 411:129);
      // backward the other way round.
      fwd_taps8{"read16_write6", launch_mix<16, 6>, 16, 6},
      bwd_taps8{"read6_write16", launch_mix<6, 16>, 6, 16},
      fwd_taps4{"read16_write5", launch_mix<16, 5>, 16, 5},
      bwd_taps4{"read5_write16", launch_mix<5, 16>, 5, 16},
      fwd_taps8_cs{"read16_write6 (streaming stores)", launch_mix<16, 6, true>, 16, 6},
      bwd_taps8_cs{"read6_write16 (streaming stores)", launch_mix<6, 16, true>, 6, 16};
  auto units_of = [](const Mix& m, double mb) {  // mb: the larger side's megabytes
    return int64_t(mb * 1e6 / 16 / std::max(m.reads, m.writes));
  };
  auto bytes_of = [](const Mix& m, int64_t units) {
    return 16.0 * double(units) * (m.reads + m.writes);
  };
  // One kernel of `m` alone.
  auto single = [&](const Mix& m, double mb) {
    const int64_t units = units_of(m, mb);
    const double us = median_us([&] { m.launch(src, dst, units, blocks, s); });
    emit(std::string(m.name) + " " + std::to_string(int(mb)) + " MB", us, bytes_of(m, units));
  };
  for (double mb : {51.4, 205.5, 411.0}) {
    single(copy, mb);
    single(read, mb);
    single(write, mb);
  }
  single(write_cs, 51.4);
  for (double mb : {51.4, 411.0, 1073.0}) {  // the runtime's device-to-device copy
    const size_t bytes = size_t(mb * 1e6) / 2 & ~size_t(15);
    const double us = median_us(
        [&] { check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "memcpy"); });
    emit("cudaMemcpyAsync " + std::to_string(int(mb)) + " MB read+write", us, 2.0 * double(bytes));
  }
  for (const Mix* m : {&fwd_taps8, &bwd_taps8, &fwd_taps4, &bwd_taps4}) single(*m, 411.0);

  // Pairs: a forward-like and a backward-like kernel alternating, timed per iteration (both).
  auto pair = [&](const char* name, const Mix& f, const Mix& b, double mb) {
    const int64_t fu = units_of(f, mb), bu = units_of(b, mb);
    const double us = median_us([&] {
      f.launch(src, dst, fu, blocks, s);
      b.launch(src, dst, bu, blocks, s);
    });
    emit(name, us, bytes_of(f, fu) + bytes_of(b, bu));
  };
  pair("pair: read 51 MB, write 51 MB (global average pool 256x2048x7x7 bf16 fwd+bwd)", read, write,
       51.4);
  pair("pair: read 51 MB, write 51 MB with streaming stores", read, write_cs, 51.4);
  pair("pair: 16:6 then 6:16 over 411 MB (max pool 3x3s2 256x64x112x112 bf16 fwd+bwd, 8-bit taps)",
       fwd_taps8, bwd_taps8, 411.0);
  pair("pair: 16:5 then 5:16 over 411 MB (the same with 4-bit taps)", fwd_taps4, bwd_taps4, 411.0);
  pair("pair: 16:6 then 6:16 over 411 MB, streaming stores in both", fwd_taps8_cs, bwd_taps8_cs,
       411.0);
  pair("pair: 16:6 then 6:16 over 411 MB, streaming stores in the second", fwd_taps8, bwd_taps8_cs,
       411.0);
  check(cudaGetLastError(), "launch");
  return 0;
}
