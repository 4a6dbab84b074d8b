// SyncBatchNorm on CUDA with one GPU. A "mirror" process group of two ranks, whose peer holds a
// copy of this rank's batch (all_gather duplicates, all_reduce doubles), drives the synchronized
// path through the CUDA kernels: its results must be batch_norm's over the batch concatenated with
// itself (float32 / bfloat16, NCHW / channels_last, the plain, ReLU and add+ReLU tails), and a
// forward + backward must capture into a CUDA graph. With NCCL, a one-rank group (the plain op)
// matches BatchNorm2d. The cross-process path is tested under MPI in tests/distributed.
// Skips without a GPU.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/distributed/sync_batch_norm.h"
#include "ember/ember.h"
#include "support/compare.h"

using namespace ember;

namespace {

// Two ranks holding the same data, in one process.
class MirrorGroup : public distributed::ProcessGroup {
 public:
  MirrorGroup() : ProcessGroup(0, 2) {}
  std::string backend() const override { return "mirror"; }
  void all_reduce(Tensor& t, distributed::ReduceOp op) override {
    EMBER_CHECK(op == distributed::ReduceOp::sum, "MirrorGroup: only sum");
    mul_(t, 2.0);
  }
  void broadcast(Tensor&, int) override {}
  void all_gather(Tensor& out, const Tensor& in) override {
    out.narrow(0, 0, in.numel()).copy_(in);
    out.narrow(0, in.numel(), in.numel()).copy_(in);
  }
  void reduce_scatter(Tensor&, const Tensor&, distributed::ReduceOp) override {
    EMBER_THROW(not_supported, "MirrorGroup: reduce_scatter");
  }
  void barrier() override {}
};

using ember::testing::rel_err;

Tensor leaf(const Tensor& t) { return t.detach().clone().set_requires_grad(true); }

}  // namespace

TEST_CASE(
    "sync_batch_norm on CUDA through a mirror group equals batch_norm over the doubled batch" *
    doctest::skip(!cuda::is_available())) {
  const Device dev = Device::cuda();
  auto group = std::make_shared<MirrorGroup>();
  const int64_t N = 3, C = 7;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (MemoryFormat format : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      for (int tail = 0; tail < 3; ++tail) {  // none, relu, add_relu
        const int bf16 = dtype == DType::bf16,
                  channels_last = format == MemoryFormat::channels_last;
        CAPTURE(bf16);
        CAPTURE(channels_last);
        CAPTURE(tail);
        const double tol = dtype == DType::f32 ? 1e-4 : 5e-2;
        manual_seed(17);
        auto opts = TensorOptions().with_device(dev);
        Tensor x = (randn({N, C, 5, 6}, opts) * 3.0 + 1.0).to(dtype).contiguous(format);
        Tensor res = randn({N, C, 5, 6}, opts).to(dtype).contiguous(format);
        Tensor g = randn({N, C, 5, 6}, opts).to(dtype);
        Tensor w = leaf(1.0 + 0.3 * randn({C}, opts)), b = leaf(randn({C}, opts));
        Tensor wr = leaf(w), br = leaf(b);
        Tensor rm = zeros({C}, opts), rv = ones({C}, opts), rm_ref = zeros({C}, opts),
               rv_ref = ones({C}, opts);
        Tensor xs = leaf(x), rs = leaf(res);
        Tensor x2 = leaf(cat({x, x}, 0).contiguous(format)),
               r2 = leaf(cat({res, res}, 0).contiguous(format));
        Tensor ys = distributed::sync_batch_norm(xs, tail == 2 ? rs : Tensor(), w, b, rm, rv,
                                                 tail > 0, 0.1, 1e-5, group);
        Tensor yr = tail == 0   ? batch_norm(x2, wr, br, rm_ref, rv_ref, true)
                    : tail == 1 ? batch_norm_relu(x2, wr, br, rm_ref, rv_ref, true)
                                : batch_norm_add_relu(x2, r2, wr, br, rm_ref, rv_ref, true);
        CHECK(ys.is_contiguous(format));
        sum(ys.to(DType::f32) * g.to(DType::f32)).backward();
        sum(yr.to(DType::f32) * cat({g, g}, 0).to(DType::f32)).backward();
        CHECK(rel_err(ys, yr.narrow(0, 0, N)) < tol);
        CHECK(rel_err(xs.grad(), x2.grad().narrow(0, 0, N)) < tol);
        if (tail == 2) CHECK(rel_err(rs.grad(), r2.grad().narrow(0, 0, N)) < tol);
        // Local weight / bias sums: the mirrored rank contributes the same again.
        CHECK(rel_err(w.grad() * 2.0, wr.grad()) < tol);
        CHECK(rel_err(b.grad() * 2.0, br.grad()) < tol);
        CHECK(rel_err(rm, rm_ref) < tol);
        CHECK(rel_err(rv, rv_ref) < tol);
      }
    }
  }
}

TEST_CASE("sync_batch_norm forward + backward can be captured as a CUDA graph" *
          doctest::skip(!cuda::is_available())) {
  const Device dev = Device::cuda();
  Stream s = new_stream(dev);
  StreamGuard sg(s);
  auto group = std::make_shared<MirrorGroup>();
  auto opts = TensorOptions().with_device(dev);
  manual_seed(5);
  Tensor x = leaf(randn({4, 5, 3, 3}, opts) + 2.0), g = randn({4, 5, 3, 3}, opts);
  Tensor w = leaf(ones({5}, opts)), b = leaf(zeros({5}, opts));
  Tensor rm = zeros({5}, opts), rv = ones({5}, opts);
  auto step = [&] {
    Tensor y = distributed::sync_batch_norm(x, Tensor(), w, b, rm, rv, true, 0.1, 1e-5, group);
    sum(y * g).backward();
    autograd::NoGradGuard ng;
    Tensor dx = x.grad().clone();
    for (Tensor* t : {&x, &w, &b}) t->mutable_grad().zero_();
    return std::vector<Tensor>{y.detach(), dx};
  };
  const std::vector<Tensor> eager = step();
  step();
  s.synchronize();
  cuda::MemPoolId pool = cuda::new_mem_pool_id();
  cudaGraph_t graph = nullptr;
  std::vector<Tensor> captured;
  {
    cuda::MemPoolScope scope(dev.index, pool);
    REQUIRE(cudaStreamBeginCapture(cudaStream_t(s.handle), cudaStreamCaptureModeThreadLocal) ==
            cudaSuccess);
    captured = step();
    REQUIRE(cudaStreamEndCapture(cudaStream_t(s.handle), &graph) == cudaSuccess);
  }
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, cudaStream_t(s.handle)) == cudaSuccess);
  s.synchronize();
  // Training-mode outputs do not depend on the running statistics the replays keep updating.
  CHECK(max_abs_diff(captured[0], eager[0]) < 1e-5);
  CHECK(max_abs_diff(captured[1], eager[1]) < 1e-5);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("SyncBatchNorm over a one-rank NCCL group equals BatchNorm2d" *
          doctest::skip(!cuda::is_available() || !distributed::nccl_available())) {
  distributed::InitOptions io;
  io.backend = "nccl";
  io.rank = 0;
  io.world_size = 1;
  auto group = distributed::init_process_group(io);
  const Device dev = Device::cuda();
  nn::SyncBatchNorm sync(nn::BatchNormOptions(6), group);
  nn::BatchNorm2d ref{nn::BatchNormOptions(6)};
  sync->to(dev);
  ref->to(dev);
  manual_seed(8);
  Tensor x = randn({4, 6, 5, 5}, TensorOptions().with_device(dev));
  CHECK(max_abs_diff(sync->forward_relu(x), ref->forward_relu(x)) < 1e-6);
  CHECK(max_abs_diff(sync->running_var, ref->running_var) < 1e-6);
}
