// Data parallel over the MPI backend (run with mpiexec -n 2 by ctest): collectives, and DDP at
// batch B/2 per rank matching one process at batch B after K steps.
#include <doctest/doctest.h>

#include "ember/distributed/ddp.h"
#include "ember/ember.h"

using namespace ember;
using distributed::DDPOptions;
using distributed::distributed_sample_indices;
using distributed::DistributedDataParallel;
using distributed::init_process_group;
using distributed::InitOptions;
using distributed::ProcessGroup;

namespace {
std::shared_ptr<ProcessGroup> group() {
  static std::shared_ptr<ProcessGroup> pg = [] {
    InitOptions options;  // designated initializers would leave the other members unnamed (-Wextra)
    options.backend = "mpi";
    return init_process_group(options);
  }();
  return pg;
}

// A two-layer MLP as a plain Module (weights seeded identically on every rank).
struct Mlp : nn::Module {
  Tensor w1, b1, w2, b2, unused;
  explicit Mlp(uint64_t seed, bool with_unused = false) : nn::Module("Mlp") {
    Generator gen(Device::cpu(), seed);
    w1 = register_parameter("w1", randn({16, 8}, TensorOptions(DType::f64), &gen) * 0.3);
    b1 = register_parameter("b1", zeros({16}, TensorOptions(DType::f64)));
    w2 = register_parameter("w2", randn({3, 16}, TensorOptions(DType::f64), &gen) * 0.3);
    b2 = register_parameter("b2", zeros({3}, TensorOptions(DType::f64)));
    if (with_unused) unused = register_parameter("unused", ones({2}, TensorOptions(DType::f64)));
  }
  Tensor forward(const Tensor& x) { return linear(tanh(linear(x, w1, b1)), w2, b2); }
};

void sgd(nn::Module& m, double lr) {
  autograd::NoGradGuard ng;
  for (Tensor& p : m.parameters()) {
    if (!p.grad().defined()) continue;
    sub_(p, p.grad(), lr);
    p.mutable_grad().zero_();
  }
}
}  // namespace

TEST_CASE("MPI collectives") {
  auto pg = group();
  REQUIRE(pg->world_size() >= 2);
  const int r = pg->rank(), w = pg->world_size();
  Tensor t = full({4}, double(r + 1), TensorOptions(DType::f64));
  pg->all_reduce(t, distributed::ReduceOp::sum);
  CHECK(t.to_vector()[0] == w * (w + 1) / 2.0);
  Tensor a = full({3}, double(r), TensorOptions(DType::f32));
  pg->all_reduce(a, distributed::ReduceOp::avg);
  CHECK(a.to_vector()[2] == doctest::Approx((w - 1) / 2.0));
  Tensor m = full({1}, double(r), TensorOptions(DType::f32));
  pg->all_reduce(m, distributed::ReduceOp::max);
  CHECK(m.item() == w - 1);
  Tensor b = full({2}, double(r * 10), TensorOptions(DType::i64));
  pg->broadcast(b, 1);
  CHECK(b.to_vector()[0] == 10);
  Tensor g = empty({2 * w}, TensorOptions(DType::f32));
  pg->all_gather(g, full({2}, double(r), TensorOptions(DType::f32)));
  CHECK(g.to_vector()[2 * (w - 1)] == w - 1);
  Tensor in = arange(double(2 * w), TensorOptions(DType::f32)),
         out = empty({2}, TensorOptions(DType::f32));
  pg->reduce_scatter(out, in, distributed::ReduceOp::sum);
  CHECK(out.to_vector()[0] == 2.0 * r * w);
  pg->barrier();
  Tensor strided = ones({4, 2}).t();  // not contiguous: an error, not a silent wrong result
  CHECK_THROWS_AS(pg->all_reduce(strided, distributed::ReduceOp::sum), Error);
  // A channels_last tensor (a channels_last model's weights) is dense: elementwise collectives
  // take it as it lies in memory; all_gather (whose order matters) still refuses it.
  Tensor cl = (arange(24.0, TensorOptions(DType::f32)).reshape({1, 2, 3, 4}) * double(r + 1))
                  .contiguous(MemoryFormat::channels_last);
  REQUIRE_FALSE(cl.is_contiguous());
  pg->broadcast(cl, 0);
  CHECK(cl.to_vector() == arange(24.0, TensorOptions(DType::f32)).to_vector());
  pg->all_reduce(cl, distributed::ReduceOp::sum);
  CHECK(cl.to_vector()[23] == 23.0 * w);
  Tensor gathered =
      empty({w, 2, 3, 4}, TensorOptions(DType::f32)).contiguous(MemoryFormat::channels_last);
  CHECK_THROWS_AS(pg->all_gather(gathered, cl), Error);
}

TEST_CASE("DDP at batch B/2 per rank equals one process at batch B") {
  auto pg = group();
  const int r = pg->rank(), w = pg->world_size();
  const int64_t B = 8 * w;
  // Every rank uses a different seed for its replica: DDP must broadcast rank 0's weights.
  auto model = std::make_shared<Mlp>(100 + uint64_t(r));
  DistributedDataParallel ddp(model, pg);
  Mlp reference(100);  // rank 0's initial weights, trained on the whole batch locally
  Generator data(Device::cpu(), 7);
  for (int step = 0; step < 5; ++step) {
    Tensor x = randn({B, 8}, TensorOptions(DType::f64), &data);
    Tensor y = randn({B, 3}, TensorOptions(DType::f64), &data);
    Tensor xs = x.narrow(0, r * (B / w), B / w), ys = y.narrow(0, r * (B / w), B / w);
    mean(square(model->forward(xs) - ys)).backward();
    sgd(*model, 0.1);
    mean(square(reference.forward(x) - y)).backward();
    sgd(reference, 0.1);
  }
  auto mine = model->named_parameters(), ref = reference.named_parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    CAPTURE(mine[i].first);
    CHECK(max_abs_diff(mine[i].second, ref[i].second) < 1e-12);
  }
  CHECK(ddp.stats().iterations == 5);
  CHECK(ddp.stats().buckets_reduced >= 5);
}

TEST_CASE("no_sync accumulates locally, then one synchronized backward averages the sum") {
  auto pg = group();
  const int r = pg->rank();
  auto model = std::make_shared<Mlp>(3);
  DistributedDataParallel ddp(model, pg);
  Tensor x = full({2, 8}, 0.1 * (r + 1), TensorOptions(DType::f64)),
         y = zeros({2, 3}, TensorOptions(DType::f64));
  {
    DistributedDataParallel::NoSyncGuard guard(ddp);
    mean(square(model->forward(x) - y)).backward();
  }
  const uint64_t before = ddp.stats().buckets_reduced;
  mean(square(model->forward(x) - y)).backward();
  CHECK(ddp.stats().buckets_reduced > before);
  // After the synchronized step every rank holds the same gradient.
  Tensor g = model->w2.grad().clone();
  Tensor g0 = g.clone();
  pg->broadcast(g0, 0);
  CHECK(max_abs_diff(g, g0) == 0);
}

TEST_CASE("a parameter without a gradient is an error naming it, unless allowed") {
  auto pg = group();
  auto model = std::make_shared<Mlp>(5, true);
  DistributedDataParallel ddp(model, pg);
  Tensor x = ones({2, 8}, TensorOptions(DType::f64));
  try {
    mean(model->forward(x)).backward();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("unused") != std::string::npos);
  }
  auto model2 = std::make_shared<Mlp>(5, true);
  DDPOptions opts;
  opts.find_unused_parameters = true;
  DistributedDataParallel ddp2(model2, pg, opts);
  mean(model2->forward(x)).backward();
  CHECK(model2->unused.grad().defined());
}

// A channels_last 4-D weight (dense, not contiguous) and a bias, whose gradients are
// rank-dependent constants, so the averaged gradient is known exactly.
struct ConvLike : nn::Module {
  Tensor weight, bias;
  explicit ConvLike(bool strided_bias = false) : nn::Module("ConvLike") {
    weight = register_parameter(
        "weight",
        ones({2, 3, 2, 2}, TensorOptions(DType::f64)).contiguous(MemoryFormat::channels_last));
    Tensor b = ones({strided_bias ? 4 : 2}, TensorOptions(DType::f64));
    bias = register_parameter("bias", strided_bias ? b.slice(0, 0, 4, 2) : b);
  }
  // d/dweight = c, d/dbias = 2c.
  Tensor forward(double c) { return sum(weight) * c + sum(bias) * (2 * c); }
};

bool all_equal(const Tensor& t, double v) {
  for (double x : t.to_vector())
    if (x != v) return false;
  return true;
}

TEST_CASE("gradients are views of the buckets: accumulated and averaged in place, no copies") {
  auto pg = group();
  const int r = pg->rank(), w = pg->world_size();
  auto model = std::make_shared<ConvLike>();
  REQUIRE_FALSE(model->weight.is_contiguous());
  DistributedDataParallel ddp(model, pg);
  const double c = r + 1, avg = (w + 1) / 2.0;  // this rank's factor, and the mean over ranks
  // The first backward copies each gradient into its bucket, and into the new buckets when they
  // are rebuilt in the order the gradients became ready.
  model->forward(c).backward();
  CHECK(ddp.stats().grads_copied == 2 + 2 * ddp.stats().bucket_rebuilds);
  CHECK(all_equal(model->weight.grad(), avg));
  CHECK(all_equal(model->bias.grad(), 2 * avg));
  // .grad is now the bucket's memory, in the parameter's layout (no relayout in the optimizer).
  CHECK(model->weight.grad().strides() == model->weight.strides());
  const void* weight_slot = model->weight.grad().data_ptr();
  const void* bias_slot = model->bias.grad().data_ptr();
  // Zeroed in place (as optimizer.zero_grad(false) does), then accumulated over a no_sync backward
  // and a synchronized one: nothing is copied and .grad stays the bucket's memory.
  model->zero_grad(false);
  const uint64_t copied = ddp.stats().grads_copied;
  {
    DistributedDataParallel::NoSyncGuard guard(ddp);
    model->forward(c).backward();
  }
  model->forward(c).backward();
  CHECK(ddp.stats().grads_copied == copied);
  CHECK(model->weight.grad().data_ptr() == weight_slot);
  CHECK(model->bias.grad().data_ptr() == bias_slot);
  CHECK(all_equal(model->weight.grad(), 2 * avg));
  CHECK(all_equal(model->bias.grad(), 4 * avg));
  // set_to_none drops the views: the next backward copies the fresh gradients in and rebinds them.
  model->zero_grad(true);
  model->forward(c).backward();
  CHECK(ddp.stats().grads_copied == copied + 2);
  CHECK(all_equal(model->weight.grad(), avg));
  CHECK(all_equal(model->bias.grad(), 2 * avg));
  CHECK(model->weight.grad().data_ptr() == weight_slot);
  CHECK(model->weight.grad().strides() == model->weight.strides());
}

TEST_CASE("a parameter that is not dense is refused, naming it") {
  auto model = std::make_shared<ConvLike>(/*strided_bias=*/true);
  try {
    DistributedDataParallel ddp(model, group());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("'bias'") != std::string::npos);
  }
}

TEST_CASE("distributed sampler splits an epoch evenly and disjointly") {
  const int w = 3;
  std::vector<int> seen(10, 0);
  for (int r = 0; r < w; ++r) {
    auto idx = distributed_sample_indices(10, r, w, 1, 0, true, true);
    CHECK(idx.size() == 3);
    for (int64_t i : idx) seen[size_t(i)]++;
  }
  int total = 0;
  for (int s : seen) {
    CHECK(s <= 1);
    total += s;
  }
  CHECK(total == 9);
  CHECK(distributed_sample_indices(10, 0, w, 1, 0) != distributed_sample_indices(10, 0, w, 1, 1));
  CHECK(distributed_sample_indices(10, 2, w, 1, 0, false).size() == 4);
}
