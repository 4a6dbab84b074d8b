// CUDA tests of the long-row kernels of cuda_kernels/softmax/ (cluster.cu, ring.cu,
// cross_entropy.cu): the cluster_rows softmax algorithm (a thread-block cluster per row, sm_90)
// forced in both directions on row lengths at and around its segment boundaries (8192 values a
// block forward, 4096 backward) and limits (65536 / 32768), vector and scalar paths, -inf masks,
// large values and maxima in the last segment; the block_tma_ring forward (a block per SM, rows
// streamed through a shared-memory ring of 16 KiB chunks, sm_90) forced on rows around its chunk
// boundaries and limit (32768), with enough rows per block that the ring wraps several times, and
// on the same masks and values; which algorithm the heuristic picks for 32768-value rows; and the
// cross-entropy backward's row tiles (1024 vectors a tile) on class counts around the tile size,
// with ignored rows, weights, label smoothing and misaligned logits. Parity with the CPU reference
// in fp64 on the same rounded inputs. Skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ember/ops/softmax.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "support/compare.h"
#include "support/gpu_parity.h"

using namespace ember;

namespace {

const Device kGpu = Device::cuda();
constexpr const char* kCluster = "cluster_rows";
constexpr const char* kRing = "block_tma_ring";

// f32: the suite's parity tolerance (1e-4); the gradient check allows 4x that (row sums of
// 20000-65536 products in fp32 against fp64).
double tolerance(DType d) { return ember::testing::parity_tolerance(d); }

using ember::testing::gpu_randn;
// Parity of f on the GPU (under forced settings) with the CPU fp64 reference.
using ember::testing::check_gpu_parity;

// Whether `name` applies to softmax rows of `cols` values in `direction` (false where the
// direction has no algorithm of that name).
bool applies(const std::string& name, dispatch::Direction direction, const Tensor& x, int64_t rows,
             int64_t cols) {
  SoftmaxProblem probe;
  probe.direction = direction;
  probe.input = x;
  probe.output = x;
  probe.outer = rows;
  probe.dim_size = cols;
  auto& slot = softmax_slot(direction, DeviceType::CUDA);
  const int index = slot.find(name);
  if (index < 0) return false;
  const auto& algo = slot.get<SoftmaxProblem>(index);
  return !algo.applies || algo.applies(probe);
}

bool has_clusters() { return cuda::device_properties(0).major >= 9; }

// `name` forced in each direction where it applies to rows of input x (the other direction left
// to the cache).
dispatch::AlgoSettings forced_settings(const char* name, const Tensor& x, int64_t rows,
                                       int64_t cols) {
  dispatch::AlgoSettings s = dispatch::current_algo_settings();
  for (dispatch::Direction d : {dispatch::Direction::forward, dispatch::Direction::backward})
    if (applies(name, d, x, rows, cols))
      s.force(std::string("softmax.") + dispatch::direction_name(d), name);
  return s;
}
dispatch::AlgoSettings cluster_settings(const Tensor& x, int64_t rows, int64_t cols) {
  return forced_settings(kCluster, x, rows, cols);
}

}  // namespace

TEST_CASE("softmax cluster_rows: where it applies" * doctest::skip(!cuda::is_available())) {
  if (!has_clusters()) return;
  using dispatch::Direction;
  Tensor x = empty({1 << 17}, DType::f32, kGpu);
  CHECK_FALSE(applies(kCluster, Direction::forward, x, 4, 1024));  // the warp kernel's rows
  CHECK(applies(kCluster, Direction::forward, x, 4, 1025));
  CHECK(applies(kCluster, Direction::forward, x, 2, 65536));  // 8 blocks of 8192
  CHECK_FALSE(applies(kCluster, Direction::forward, x, 1, 65537));
  CHECK(applies(kCluster, Direction::backward, x, 4, 32768));  // 8 blocks of 4096
  CHECK_FALSE(applies(kCluster, Direction::backward, x, 3, 32769));
  Tensor d = empty({1 << 16}, DType::f64, kGpu);
  CHECK_FALSE(applies(kCluster, Direction::forward, d, 4, 4096));
}

TEST_CASE("softmax block_tma_ring: where it applies" * doctest::skip(!cuda::is_available())) {
  if (!has_clusters()) return;
  using dispatch::Direction;
  Tensor x = empty({1 << 17}, DType::f32, kGpu);
  CHECK_FALSE(applies(kRing, Direction::forward, x, 4, 1024));   // the warp kernel's rows
  CHECK(applies(kRing, Direction::forward, x, 4, 1028));         // whole f32 vectors
  CHECK(applies(kRing, Direction::forward, x, 4, 32768));        // 8 chunks of 1024 vectors
  CHECK_FALSE(applies(kRing, Direction::forward, x, 3, 32772));  // over 32 values a thread
  CHECK_FALSE(applies(kRing, Direction::forward, x, 3, 32769));  // not whole vectors
  CHECK_FALSE(applies(kRing, Direction::forward, x.narrow(0, 1, 4 * 4096), 4, 4096));  // unaligned
  CHECK_FALSE(applies(kRing, Direction::backward, x, 4, 32768));  // forward only
  Tensor h = empty({1 << 17}, DType::bf16, kGpu);
  CHECK_FALSE(applies(kRing, Direction::forward, h, 4, 1028));  // 8-value vectors
  CHECK(applies(kRing, Direction::forward, h, 4, 1032));
  CHECK(applies(kRing, Direction::forward, h, 4, 32768));
  Tensor d = empty({1 << 16}, DType::f64, kGpu);
  CHECK_FALSE(applies(kRing, Direction::forward, d, 4, 4096));
}

TEST_CASE("softmax long rows: the heuristic's picks for many long rows" *
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
  // cluster_rows where its heuristic puts it first: the f32 backward of rows over 8192 values, and
  // the f32 forward of rows the ring does not take (see their heuristic_cost).
  CHECK(pick(8192, 32768, dispatch::Direction::backward) == kCluster);
  CHECK(pick(8192, 32772, dispatch::Direction::forward) == kCluster);
  CHECK(pick(8192, 32769, dispatch::Direction::forward) == kCluster);
  CHECK(pick(8192, 32768, dispatch::Direction::backward, DType::bf16) != kCluster);
  // block_tma_ring: the forward of rows of 8193 to 32768 values in whole vectors, any dtype.
  CHECK(pick(8192, 32768, dispatch::Direction::forward) == kRing);
  CHECK(pick(8192, 32768, dispatch::Direction::forward, DType::bf16) == kRing);
  CHECK(pick(4096, 20000, dispatch::Direction::forward, DType::bf16) == kRing);
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
  for (int64_t cols :
       {1025, 4095, 4096, 4097, 8191, 8192, 8193, 12289, 32760, 32768, 32769, 49999, 65536}) {
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
        check_gpu_parity(
            [log, cols](const Tensor& t) {
              Tensor v = t.flatten().narrow(0, 1, t.numel() - cols).view({t.size(0) - 1, cols});
              return log ? log_softmax(v, 1) : softmax(v, 1);
            },
            x, tol, cluster_settings(x, rows - 1, cols));
      }
    }
  }
}

TEST_CASE("softmax cluster_rows, block_tma_ring: -inf masks, large values, maxima at the end, 3-D" *
          doctest::skip(!cuda::is_available())) {
  if (!has_clusters()) return;
  for (const char* algo : {kCluster, kRing}) {
    CAPTURE(algo);
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
            if (r == 0) e += 8.0 * double(c) / double(cols);          // max moves to the end
            if (r == 1 && c % 16 >= 3 && c % 16 < 13) e = -INFINITY;  // masked inside vectors
            if (r == 2 && c < cols - 5) e = -INFINITY;                // only the last 5 finite
            if (r == 3) e = 3000.0 + 2.0 * e;                         // large values
          }
        }
        Tensor x = from_vector(v, {rows, cols}).to(kGpu, dtype);
        const double tol = tolerance(dtype);
        check_gpu_parity([](const Tensor& t) { return softmax(t, 1); }, x, tol,
                         forced_settings(algo, x, rows, cols));
        // Row 3 alone: whole aligned rows, so the ring applies too.
        Tensor last = x.narrow(0, 3, 1);
        check_gpu_parity([](const Tensor& t) { return log_softmax(t, -1); }, last, tol,
                         forced_settings(algo, last, 1, cols));
      }
    }
    // Last dim of a 3-D tensor: 6 rows of 16384.
    Tensor x3 = gpu_randn({2, 3, 16384}, DType::bf16, 3);
    check_gpu_parity([](const Tensor& t) { return softmax(t, 2); }, x3, tolerance(DType::bf16),
                     forced_settings(algo, x3, 6, 16384));
  }
}

TEST_CASE("softmax block_tma_ring: parity around the chunk boundaries, the ring wrapping" *
          doctest::skip(!cuda::is_available())) {
  if (!has_clusters()) return;
  const int64_t sms = cuda::device_properties(0).sm_count;
  struct Case {
    int64_t cols, rows;
  };
  // A chunk is 1024 16-byte vectors (4096 f32 / 8192 16-bit values) and a row takes up to 8 of
  // a ring of 14 (H100/H200). 1032: one partial chunk; 4096 / 4104: one whole chunk, and (f32)
  // one vector into a second; 8200: 3 f32 / 2 16-bit chunks, the last of 2 / 1 vectors; 20000: 5
  // f32 chunks, the last partial; 32760 / 32768: the limit. 3 rows: fewer than SMs, a row per
  // block; the longer cases give every block 4 to 20 rows (16 to 40 chunks), so each slot's
  // barrier goes through several phases and rows straddle the ring's end (f32: 14 slots, 8 a
  // row). Those run softmax in f32 and bf16 and log_softmax in f32 (the CPU reference is slow).
  for (Case c : {Case{1032, 3}, Case{4096, 3}, Case{4104, 20 * sms + 7}, Case{8200, 3},
                 Case{8200, 10 * sms + 1}, Case{20000, 6 * sms + 3}, Case{32760, 3}, Case{32768, 3},
                 Case{32768, 4 * sms + 3}}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      if (dtype == DType::f16 && c.cols != 32768) continue;
      for (bool log : {false, true}) {
        const bool many_rows = c.rows > 3;
        if (many_rows && (dtype == DType::f16 || (log && dtype != DType::f32))) continue;
        Tensor x = gpu_randn({c.rows, c.cols}, dtype, 4);
        CAPTURE(c.cols);
        CAPTURE(c.rows);
        CAPTURE(dtype_name(dtype));
        CAPTURE(log);
        REQUIRE(applies(kRing, dispatch::Direction::forward, x, c.rows, c.cols));
        auto f = [log](const Tensor& t) { return log ? log_softmax(t, 1) : softmax(t, 1); };
        check_gpu_parity(f, x, tolerance(dtype), forced_settings(kRing, x, c.rows, c.cols));
      }
    }
  }
  // A row of only -inf gives NaN everywhere (as in PyTorch), in softmax and log_softmax; the next
  // row, with one finite value, gives 1 there (0 in log_softmax) and 0 (-inf) elsewhere.
  const int64_t cols = 16384;
  std::vector<double> v(size_t(2 * cols), -INFINITY);
  v[size_t(cols + 7)] = 2.5;
  for (DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    Tensor x = from_vector(v, {2, cols}).to(kGpu, dtype);
    dispatch::AlgoSettingsGuard guard(forced_settings(kRing, x, 2, cols));
    const std::vector<double> y = softmax(x, 1).to_vector();
    const std::vector<double> ly = log_softmax(x, 1).to_vector();
    int64_t wrong = 0;
    for (int64_t c = 0; c < cols; ++c) {
      wrong += !std::isnan(y[size_t(c)]) || !std::isnan(ly[size_t(c)]);
      const bool hot = c == 7;
      wrong += y[size_t(cols + c)] != (hot ? 1.0 : 0.0);
      wrong += ly[size_t(cols + c)] != (hot ? 0.0 : -INFINITY);
    }
    CHECK(wrong == 0);
  }
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
        check_gpu_parity(
            [&](const Tensor& in) {
              return loss(in.flatten().narrow(0, 1, n * classes).view({n, classes}));
            },
            x, tolerance(dtype), settings);
      }
    }
  }
}
