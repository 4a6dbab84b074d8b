// SyncBatchNorm over the MPI backend (run with mpiexec -n 2 by ctest): ranks holding parts of a
// batch (of unequal sizes) give the outputs, input / residual gradients, summed weight and bias
// gradients and running statistics of one BatchNorm2d over the whole batch, in fp64 to 1e-10; and
// a converted model under DDP at batch B/2 per rank trains like one process at batch B.
#include <doctest/doctest.h>

#include "ember/distributed/ddp.h"
#include "ember/distributed/sync_batch_norm.h"
#include "ember/ember.h"

using namespace ember;
using distributed::DistributedDataParallel;
using distributed::init_process_group;
using distributed::InitOptions;
using distributed::ProcessGroup;

namespace {

constexpr double kTol = 1e-10;

std::shared_ptr<ProcessGroup> group() {
  static std::shared_ptr<ProcessGroup> pg = [] {
    InitOptions options;
    options.backend = "mpi";
    return init_process_group(options);
  }();
  return pg;
}

TensorOptions f64() { return TensorOptions(DType::f64); }

// Rank r holds rows [offset(r), offset(r) + 2 + r) of the whole batch: sizes differ per rank.
int64_t rows_of(int r) { return 2 + r; }
int64_t offset_of(int r) {
  int64_t o = 0;
  for (int k = 0; k < r; ++k) o += rows_of(k);
  return o;
}

// A leaf copy of rows [start, start + n) of t in `format`.
Tensor leaf_rows(const Tensor& t, int64_t start, int64_t n, MemoryFormat format) {
  Tensor r = t.narrow(0, start, n).contiguous(format).clone(format);
  r.requires_grad_();
  return r;
}

Tensor summed_over_ranks(const Tensor& t) {
  Tensor s = t.clone();
  group()->all_reduce(s, distributed::ReduceOp::sum);
  return s;
}

enum class Tail { none, relu, add_relu };

Tensor run_tail(nn::BatchNormImplBase& bn, Tail tail, const Tensor& x, const Tensor& residual) {
  switch (tail) {
    case Tail::none:
      return bn.forward(x);
    case Tail::relu:
      return bn.forward_relu(x);
    case Tail::add_relu:
      return bn.forward_add_relu(x, residual);
  }
  return Tensor();
}

}  // namespace

TEST_CASE("SyncBatchNorm over ranks equals BatchNorm2d over the whole batch") {
  auto pg = group();
  REQUIRE(pg->world_size() >= 2);
  const int r = pg->rank();
  const int64_t B = offset_of(pg->world_size()), C = 3, off = offset_of(r), n = rows_of(r);
  for (Tail tail : {Tail::none, Tail::relu, Tail::add_relu}) {
    for (MemoryFormat format : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const int tail_id = int(tail), channels_last = format == MemoryFormat::channels_last;
      CAPTURE(tail_id);
      CAPTURE(channels_last);
      nn::SyncBatchNorm sync(nn::BatchNormOptions(C), pg);
      nn::BatchNorm2d ref{nn::BatchNormOptions(C)};
      sync->to(DType::f64);
      ref->to(DType::f64);
      Generator gen(Device::cpu(), 42);  // the same data on every rank
      {
        autograd::NoGradGuard ng;
        Tensor w = 1.0 + 0.2 * randn({C}, f64(), &gen), b = randn({C}, f64(), &gen);
        sync->weight.copy_(w);
        ref->weight.copy_(w);
        sync->bias.copy_(b);
        ref->bias.copy_(b);
      }
      for (int step = 0; step < 2; ++step) {
        CAPTURE(step);
        // An offset and scale per channel, so a wrong mean or variance shows.
        Tensor x = randn({B, C, 4, 5}, f64(), &gen) * 2.0 + 0.5;
        Tensor res = randn({B, C, 4, 5}, f64(), &gen), g = randn({B, C, 4, 5}, f64(), &gen);
        Tensor xs = leaf_rows(x, off, n, format), rs = leaf_rows(res, off, n, format);
        Tensor xr = leaf_rows(x, 0, B, format), rr = leaf_rows(res, 0, B, format);
        sync->zero_grad();
        ref->zero_grad();
        Tensor ys = run_tail(*sync, tail, xs, rs), yr = run_tail(*ref, tail, xr, rr);
        sum(ys * g.narrow(0, off, n)).backward();
        sum(yr * g).backward();
        CHECK(max_abs_diff(ys, yr.narrow(0, off, n)) < kTol);
        CHECK(max_abs_diff(xs.grad(), xr.grad().narrow(0, off, n)) < kTol);
        if (tail == Tail::add_relu)
          CHECK(max_abs_diff(rs.grad(), rr.grad().narrow(0, off, n)) < kTol);
        // Weight and bias gradients are each rank's own sums (DDP averages them), adding up to
        // the whole batch's.
        CHECK(max_abs_diff(summed_over_ranks(sync->weight.grad()), ref->weight.grad()) < kTol);
        CHECK(max_abs_diff(summed_over_ranks(sync->bias.grad()), ref->bias.grad()) < kTol);
        CHECK(max_abs_diff(sync->running_mean, ref->running_mean) < kTol);
        CHECK(max_abs_diff(sync->running_var, ref->running_var) < kTol);
        CHECK(sync->num_batches_tracked.item() == ref->num_batches_tracked.item());
      }
      // Eval normalizes with the (synchronized) running statistics, locally.
      sync->eval();
      ref->eval();
      Tensor x = randn({B, C, 4, 5}, f64(), &gen);
      autograd::NoGradGuard ng;
      CHECK(max_abs_diff(sync->forward(x.narrow(0, off, n)), ref->forward(x).narrow(0, off, n)) <
            kTol);
    }
  }
}

TEST_CASE("SyncBatchNorm: 2-D input, a rank with one row, and the state_dict of BatchNorm2d") {
  auto pg = group();
  const int r = pg->rank(), w = pg->world_size();
  const int64_t C = 4;
  nn::SyncBatchNorm sync(nn::BatchNormOptions(C), pg);
  nn::BatchNorm1d ref{nn::BatchNormOptions(C)};
  sync->to(DType::f64);
  ref->to(DType::f64);
  auto names = [](const nn::NamedTensors& nt) {
    std::vector<std::string> out;
    for (const auto& [name, t] : nt) out.push_back(name);
    return out;
  };
  CHECK(names(sync->state_dict()) == names(nn::BatchNorm2d(C)->state_dict()));
  // Rank 0 holds one row (a per-rank variance of 0), the others two each.
  Generator gen(Device::cpu(), 3);
  const int64_t B = 1 + 2 * (w - 1), off = r == 0 ? 0 : 1 + 2 * (r - 1), n = r == 0 ? 1 : 2;
  Tensor x = randn({B, C}, f64(), &gen) + 1.0, g = randn({B, C}, f64(), &gen);
  Tensor xs = leaf_rows(x, off, n, MemoryFormat::contiguous),
         xr = leaf_rows(x, 0, B, MemoryFormat::contiguous);
  Tensor ys = sync->forward(xs), yr = ref->forward(xr);
  sum(ys * g.narrow(0, off, n)).backward();
  sum(yr * g).backward();
  CHECK(max_abs_diff(ys, yr.narrow(0, off, n)) < kTol);
  CHECK(max_abs_diff(xs.grad(), xr.grad().narrow(0, off, n)) < kTol);
  CHECK(max_abs_diff(summed_over_ranks(sync->weight.grad()), ref->weight.grad()) < kTol);
  CHECK(max_abs_diff(sync->running_var, ref->running_var) < kTol);
  CHECK_THROWS_AS(sync->forward(ones({2, C + 1}, f64())),
                  Error);  // wrong channel count, before any collective
}

TEST_CASE(
    "convert_sync_batchnorm under DDP at batch B/2 per rank trains like one process at batch B") {
  auto pg = group();
  const int r = pg->rank(), w = pg->world_size();
  const int64_t B = 4 * w;
  auto make_model = [] {
    manual_seed(11);  // the same initial weights for the replica and the reference
    nn::Sequential m(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1).bias(false)),
                     nn::BatchNorm2d(4), nn::ReLU(),
                     nn::Conv2d(nn::Conv2dOptions(4, 3, 3).padding(1)), nn::BatchNorm2d(3));
    m->to(DType::f64);
    return m;
  };
  nn::Sequential model = make_model(), reference = make_model();
  CHECK(nn::convert_sync_batchnorm(*model, pg) == 2);
  DistributedDataParallel ddp(model.ptr(), pg);
  Generator data(Device::cpu(), 5);
  auto sgd = [](nn::Module& m) {
    autograd::NoGradGuard ng;
    for (Tensor& p : m.parameters()) {
      sub_(p, p.grad(), 0.1);
      p.mutable_grad().zero_();
    }
  };
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({B, 2, 6, 6}, f64(), &data), t = randn({B, 3, 6, 6}, f64(), &data);
    Tensor xs = x.narrow(0, r * (B / w), B / w), ts = t.narrow(0, r * (B / w), B / w);
    mean(square(model->forward(xs) - ts)).backward();
    sgd(*model);
    mean(square(reference->forward(x) - t)).backward();
    sgd(*reference);
  }
  auto mine = model->state_dict(), ref = reference->state_dict();
  REQUIRE(mine.size() == ref.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    CAPTURE(mine[i].first);
    CHECK(mine[i].first == ref[i].first);
    CHECK(max_abs_diff(mine[i].second.to(DType::f64), ref[i].second.to(DType::f64)) < kTol);
  }
}
