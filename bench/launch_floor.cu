// The floor under "host cost of one tiny CUDA op": what an empty kernel launch (plus the launch
// check every Ember op does) costs the host on this machine, with no framework around it. Read
// next to bench/foundation.cpp's tiny_op_host figures.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

namespace {
__global__ void empty_kernel(float* p) {
  if (p && threadIdx.x == 1024) p[0] = 0;  // never true: keeps the kernel from being trivial
}

// Host time per call, in bursts of 256 launches (shorter than the launch queue) with the device
// drained between bursts, untimed; with back_to_back, n calls in one loop instead, which once the
// queue is full measures how fast the GPU retires tiny kernels.
template <typename F>
double us_per_call(F f, int n, bool back_to_back = false) {
  for (int i = 0; i < 1000; ++i) f();
  cudaDeviceSynchronize();
  if (back_to_back) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
  }
  constexpr int kBurst = 256;
  double total = 0;
  for (int done = 0; done < n; done += kBurst) {
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) f();
    total +=
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  cudaDeviceSynchronize();
  return total / ((n + kBurst - 1) / kBurst * kBurst);
}
}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("{\"bench\":\"launch_floor\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const int n = 100000;
  double bare = us_per_call([&] { empty_kernel<<<1, 32, 0, s>>>(nullptr); }, n);
  double checked = us_per_call(
      [&] {
        empty_kernel<<<1, 32, 0, s>>>(nullptr);
        (void)cudaGetLastError();
      },
      n);
  std::printf(
      "{\"bench\":\"launch_floor\",\"impl\":\"cuda\",\"shape\":\"empty "
      "kernel\",\"us_per_op\":%.3f}\n",
      bare);
  std::printf(
      "{\"bench\":\"launch_floor\",\"impl\":\"cuda\",\"shape\":\"empty kernel + "
      "cudaGetLastError\",\"us_per_op\":%.3f}\n",
      checked);
  const double queued = us_per_call([&] { empty_kernel<<<1, 32, 0, s>>>(nullptr); }, n, true);
  std::printf(
      "{\"bench\":\"launch_floor\",\"impl\":\"cuda\",\"shape\":\"empty kernel, 100k back to "
      "back\",\"us_per_op\":%.3f}\n",
      queued);
  cudaStreamDestroy(s);
  return 0;
}
