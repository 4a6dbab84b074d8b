// CPU GEMM lab (issue 38): the 1024^3 float32 matmul through ember::matmul against OpenBLAS's own
// cblas_sgemm on the same buffers and thread count, and the LSTM row (128 -> 256, T = 50,
// batch 32, forward + backward). Prints one JSON line per measurement: the minimum over `reps`
// repetitions (the machine is shared; the minimum is the least disturbed run).
// Not part of the CMake build (bench/*.cpp only): build it against a CPU build directory with
//   g++ -O2 -std=c++20 -I$BUILD/include -I/usr/include/eigen3 \
//       -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/lab/cpu_gemm_rnn.cpp \
//       -L$BUILD -lember -lopenblas -Wl,-rpath,$BUILD -o /tmp/cpu_gemm_rnn
// and run /tmp/cpu_gemm_rnn [threads] [reps]. Define NO_POOL to build against a library without
// set_num_threads (the numbers are then those of its default thread count).
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ember/ember.h"
#ifndef NO_POOL
#include "ember/tensor/parallel.h"
#endif

using namespace ember;

namespace {

template <typename F>
double min_ms(F&& f, int reps) {
  f();  // warm-up: first-touch pages, algorithm cache, OpenBLAS's threads
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
#ifndef NO_POOL
  set_num_threads(threads);
#endif
  openblas_set_num_threads(threads);

  const int64_t n = 1024;
  const Tensor a = randn({n, n}), b = randn({n, n});
  Tensor c = empty({n, n});
  const double flops = 2.0 * double(n) * n * n;
  std::vector<float> cc(size_t(n * n));
  auto ember_matmul = [&] { c = matmul(a, b); };
  auto openblas_sgemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f,
                a.data<float>(), int(n), b.data<float>(), int(n), 0.0f, cc.data(), int(n));
  };
  // Interleaved, so that a burst of load on the shared machine hits both alike.
  double ember_ms = 1e30, blas_ms = 1e30;
  for (int i = 0; i < reps; ++i) {
    ember_ms = std::min(ember_ms, min_ms(ember_matmul, 1));
    blas_ms = std::min(blas_ms, min_ms(openblas_sgemm, 1));
  }
  std::printf(
      "{\"bench\":\"matmul_1024_f32\",\"threads\":%d,\"ember_gflops\":%.1f,"
      "\"openblas_gflops\":%.1f,\"ratio\":%.3f}\n",
      threads, flops / ember_ms / 1e6, flops / blas_ms / 1e6, blas_ms / ember_ms);

  nn::LSTM lstm(nn::LSTMOptions(128, 256));
  const Tensor x = randn({50, 32, 128}), gy = randn({50, 32, 256});
  const double lstm_ms = min_ms(
      [&] {
        lstm->zero_grad();
        RnnResult r = lstm->forward(x);
        r.output.backward(gy);
      },
      reps);
  std::printf("{\"bench\":\"lstm_128_256_T50_B32_fwdbwd\",\"threads\":%d,\"ms\":%.1f}\n", threads,
              lstm_ms);
  return 0;
}
