// CUDA tests of the long-row kernels of cuda_kernels/softmax.cu: the cluster_rows softmax
// algorithm (a thread-block cluster per row, sm_90) forced in both directions on row lengths at
// and around its segment boundaries (8192 values a block forward, 4096 backward) and limits
// (65536 / 32768), vector and scalar paths, -inf masks, large values and maxima in the last
// segment; which algorithm the heuristic picks for 32768-value rows; and the cross-entropy
// backward's row tiles (1024 vectors a tile) on class counts around the tile size, with ignored
// rows, weights, label smoothing and misaligned logits. Parity with the CPU reference in fp64 on
// the same rounded inputs. Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ops/softmax.h"
#include "support/compare.h"
#include "support/gpu_parity.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda();
constexpr const char* kCluster = "cluster_rows";

// f32: the suite's parity tolerance (1e-4); the gradient check allows 4x that (row sums of
// 20000-65536 products in fp32 against fp64).
double tolerance(DType d) { return ember::testing::parity_tolerance(d); }

using ember::testing::gpu_randn;
// Parity of f on the GPU (under forced settings) with the CPU fp64 reference.
using ember::testing::check_gpu_parity;

// Whether `name` applies to softmax rows of `cols` values in `direction`.
bool applies(const std::string& name, dispatch::Direction direction, const Tensor& x,
             int64_t rows, int64_t cols) {
  SoftmaxProblem probe;
  probe.direction = direction;
  probe.input = x;
  probe.output = x;
  probe.outer = rows;
  probe.dim_size = cols;
  auto& slot = softmax_slot(direction, DeviceType::CUDA);
  const auto& algo = slot.get<SoftmaxProblem>(slot.find(name));
  return !algo.applies || algo.applies(probe);
}

bool has_clusters() { return cuda::device_properties(0).major >= 9; }

// cluster_rows forced in each direction where it applies (the other direction left to the cache).
dispatch::AlgoSettings cluster_settings(const Tensor& x, int64_t rows, int64_t cols) {
  dispatch::AlgoSettings s = dispatch::current_algo_settings();
  for (dispatch::Direction d : {dispatch::Direction::forward, dispatch::Direction::backward})
    if (applies(kCluster, d, x, rows, cols))
      s.force(std::string("softmax.") + dispatch::direction_name(d), kCluster);
  return s;
}

}  // namespace

TEST_CASE("softmax cluster_rows: where it applies" * doctest::skip(!cuda::is_available())) {
  if (!has_clusters()) return;
  using dispatch::Direction;
  Tensor x = empty({1 << 17}, DType::f32, kGpu);
  CHECK_FALSE(applies(kCluster, Direction::forward, x, 4, 1024));  // the warp kernel's rows
  CHECK(applies(kCluster, Direction::forward, x, 4, 1025));
  CHECK(applies(kCluster, Direction::forward, x, 2, 65536));     // 8 blocks of 8192
  CHECK_FALSE(applies(kCluster, Direction::forward, x, 1, 65537));
  CHECK(applies(kCluster, Direction::backward, x, 4, 32768));    // 8 blocks of 4096
  CHECK_FALSE(applies(kCluster, Direction::backward, x, 3, 32769));
  Tensor d = empty({1 << 16}, DType::f64, kGpu);
  CHECK_FALSE(applies(kCluster, Direction::forward, d, 4, 4096));
}

TEST_CASE("softmax cluster_rows: the heuristic takes it for f32 rows of many long rows" *
          doctest::skip(!cuda::is_available())) {
  if (!has_clusters()) return;
  auto pick = [](int64_t rows, int64_t cols, dispatch::Direction direction,
                 DType dtype = DType::f32) {
    SoftmaxProblem p;
    p.direction = direction;
    p.input = empty({rows * cols}, dtype, kGpu);
    p.output = p.input;
    p.grad_output = p.input;
    p.outer = rows;
    p.dim_size = cols;
    dispatch::AlgoModeGuard heuristic(dispatch::AlgoMode::heuristic);
    return softmax_choose(p).name;
  };
  // Where it measured fastest: f32 rows longer than 8192 (see its heuristic_cost).
  CHECK(pick(8192, 32768, dispatch::Direction::backward) == kCluster);
  CHECK(pick(8192, 32768, dispatch::Direction::forward) == kCluster);
  CHECK(pick(8192, 32768, dispatch::Direction::forward, DType::bf16) == "block_smem");
  CHECK(pick(8192, 32768, dispatch::Direction::backward, DType::bf16) != kCluster);
  CHECK(pick(4096, 8192, dispatch::Direction::forward) == "block_smem");
  CHECK(pick(2, 32768, dispatch::Direction::forward) == "multi_block");  // fewer rows than SMs
}

TEST_CASE("softmax cluster_rows: parity at the segment boundaries, both directions" *
          doctest::skip(!cuda::is_available())) {
  if (!has_clusters()) return;
  // 8191 / 8192 / 8193: one forward block, exactly one, two; 4095 .. 4097 the same backward;
  // 32760 (whole vectors, a short last one for bf16 rows of 8-value vectors); 32768 / 32769:
  // the backward limit and one past it (forward only); 49999: odd (scalar path); 65536: 8
  // forward blocks.
  for (int64_t cols : {1025, 4095, 4096, 4097, 8191, 8192, 8193, 12289, 32760, 32768, 32769,
                       49999, 65536}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      if (dtype == DType::f16 && cols != 8193 && cols != 32768) continue;
      for (bool log : {false, true}) {
        const int64_t rows = 3;
        Tensor x = gpu_randn({rows, cols}, dtype, 4);
        CAPTURE(cols);
        CAPTURE(dtype_name(dtype));
        CAPTURE(log);
        const double tol = tolerance(dtype);
        auto f = [log](const Tensor& t) { return log ? log_softmax(t, 1) : softmax(t, 1); };
        check_gpu_parity(f, x, tol, cluster_settings(x, rows, cols));
        // A dense view one element in: misaligned rows, the scalar path.
        check_gpu_parity([log, cols](const Tensor& t) {
          Tensor v = t.flatten().narrow(0, 1, t.numel() - cols).view({t.size(0) - 1, cols});
          return log ? log_softmax(v, 1) : softmax(v, 1);
        }, x, tol, cluster_settings(x, rows - 1, cols));
      }
    }
  }
}

TEST_CASE("softmax cluster_rows: -inf masks, large values, maxima in the last segment, 3-D" *
          doctest::skip(!cuda::is_available())) {
  if (!has_clusters()) return;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t cols : {20000, 32768}) {
      const int64_t rows = 4;
      CAPTURE(dtype_name(dtype));
      CAPTURE(cols);
      std::vector<double> v(size_t(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          double& e = v[size_t(r * cols + c)];
          e = std::sin(0.37 * double(c) + double(r));
          if (r == 0) e += 8.0 * double(c) / double(cols);             // max moves to the end
          if (r == 1 && c % 16 >= 3 && c % 16 < 13) e = -INFINITY;     // masked inside vectors
          if (r == 2 && c < cols - 5) e = -INFINITY;                   // only the last 5 finite
          if (r == 3) e = 3000.0 + 2.0 * e;                            // large values
        }
      }
      Tensor x = from_vector(v, {rows, cols}).to(kGpu, dtype);
      const double tol = tolerance(dtype);
      check_gpu_parity([](const Tensor& t) { return softmax(t, 1); }, x, tol,
                   cluster_settings(x, rows, cols));
      check_gpu_parity([](const Tensor& t) { return log_softmax(t, -1); }, x.narrow(0, 3, 1), tol,
                   cluster_settings(x, 1, cols));
    }
  }
  // Last dim of a 3-D tensor: 6 rows of 16384.
  Tensor x3 = gpu_randn({2, 3, 16384}, DType::bf16, 3);
  check_gpu_parity([](const Tensor& t) { return softmax(t, 2); }, x3, tolerance(DType::bf16),
               cluster_settings(x3, 6, 16384));
}

TEST_CASE("cross_entropy: backward row tiles around the tile size, options, misaligned logits" *
          doctest::skip(!cuda::is_available())) {
  // A tile is 1024 16-byte vectors: 4096 f32 / 8192 bf16 classes. 4096 and 8192 are whole tiles,
  // 4100 / 8200 one vector into the next, 32768 several whole tiles.
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t classes : {4096, 4100, 8192, 8200, 32768}) {
      const int64_t n = 5;
      for (int variant = 0; variant < 3; ++variant) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(classes);
        CAPTURE(variant);
        Tensor x = gpu_randn({n + 1, classes}, dtype, 3);
        Tensor t = randint(0, classes, {n});
        t.narrow(0, 2, 1).fill_(-100);  // an ignored row
        Tensor w = rand({classes}) + 0.5;
        auto loss = [&](const Tensor& in) {
          CrossEntropyOptions o;
          if (variant == 1) o.with_weight(w.to(in.device())).with_reduction(LossReduction::none);
          if (variant == 2) o.with_label_smoothing(0.2).with_reduction(LossReduction::sum);
          return cross_entropy(in, t.to(in.device()), o);
        };
        const dispatch::AlgoSettings settings = dispatch::current_algo_settings();
        check_gpu_parity([&](const Tensor& in) { return loss(in.narrow(0, 0, n)); }, x,
                     tolerance(dtype), settings);
        // Rows starting one element in: the per-element paths.
        check_gpu_parity([&](const Tensor& in) {
          return loss(in.flatten().narrow(0, 1, n * classes).view({n, classes}));
        }, x, tolerance(dtype), settings);
      }
    }
  }
}
