// Tensor creation: empty/zeros/ones/full/arange, from host data, and random tensors drawn from the
// Philox generators (rand, randn, randint, bernoulli, randperm, uniform_, normal_).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/random.h"
#include "ember/ops/ops.h"
#include "ember/ops/random_internal.h"

namespace ember {

namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& sizes, const TensorOptions& o) {
  return finish(empty(sizes, o.dtype, o.device, o.memory_format), o);
}
Tensor full(const Shape& sizes, double value, const TensorOptions& o) {
  checked_numel(sizes, "full");
  Tensor t = empty(sizes, o.dtype, o.device, o.memory_format);
  t.fill_(value);
  return finish(t, o);
}
Tensor zeros(const Shape& sizes, const TensorOptions& o) {
  checked_numel(sizes, "zeros");  // so that an error names the op called
  return full(sizes, 0.0, o);
}
Tensor ones(const Shape& sizes, const TensorOptions& o) {
  checked_numel(sizes, "ones");
  return full(sizes, 1.0, o);
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0.0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1.0); }
Tensor full_like(const Tensor& t, double value) {
  Tensor r = empty_like(t);
  r.fill_(value);
  return r;
}
Tensor scalar_tensor(double value, const TensorOptions& o) { return full({}, value, o); }

Tensor from_data(const void* data, DType data_dtype, const Shape& sizes, const TensorOptions& o) {
  Tensor host = empty(sizes, data_dtype, Device::cpu());
  if (host.nbytes() > 0) std::memcpy(host.data_ptr(), data, host.nbytes());
  Tensor r = (o.dtype == data_dtype && o.device.is_cpu()) ? host : host.to(o.device, o.dtype);
  if (o.memory_format != MemoryFormat::contiguous) r = r.contiguous(o.memory_format);
  return finish(r, o);
}

Tensor from_vector(const std::vector<double>& values, const Shape& sizes, const TensorOptions& o) {
  const int64_t n = checked_numel(sizes, "from_vector");
  EMBER_CHECK(int64_t(values.size()) == n, "from_vector: ", values.size(),
              " values do not fill shape ", shape_str(sizes), " (", n, " elements)");
  return from_data(values.data(), DType::f64, sizes, o);
}

Tensor arange(double start, double end, double step, const TensorOptions& o) {
  EMBER_CHECK(step != 0, "arange: step must be nonzero");
  EMBER_CHECK((end - start) / step >= 0, "arange: the range [", start, ", ", end,
              ") is empty or has the wrong sign for step ", step);
  const double count = std::ceil((end - start) / step);
  EMBER_CHECK(std::isfinite(start) && std::isfinite(end) && count <= double(kMaxNumel),
              "arange: the range [", start, ", ", end, ") with step ", step, " has ", count,
              " elements, over the limit of 2^48 elements per tensor (or is not finite)");
  const int64_t n = int64_t(count);
  // Filled in a tensor, not a std::vector, so that running out of memory is an ember::Error.
  Tensor v = empty({n}, DType::f64, Device::cpu());
  double* p = static_cast<double*>(v.data_ptr());
  for (int64_t i = 0; i < n; ++i) p[i] = start + double(i) * step;
  return from_data(p, DType::f64, {n}, o);
}
Tensor arange(double end, const TensorOptions& o) { return arange(0, end, 1, o); }

// ---- random ----
void fill_random_kind(Tensor& t, RandomKind kind, double a, double b, Generator& g) {
  RandomParams p{g.reserve(4)};
  p.kind = kind;
  p.a = a;
  p.b = b;
  if (t.is_contiguous()) {
    random_kernel().get(t.device().type, t.dtype())(t, p);
  } else {
    Tensor dense = empty(t.sizes(), t.dtype(), t.device());
    random_kernel().get(t.device().type, t.dtype())(dense, p);
    autograd::NoGradGuard ng;
    t.copy_(dense);
  }
  t.bump_version();
}

namespace {
Generator& pick(Generator* gen, Device d) { return gen ? *gen : default_generator(d); }

void fill_random(Tensor& t, RandomKind kind, double a, double b, Generator* gen) {
  EMBER_CHECK(t.defined(), "random: undefined tensor");
  if (t.numel() == 0) return;
  Generator& g = pick(gen, t.device());
  EMBER_CHECK(g.device().type == t.device().type, "random: a generator for ", g.device().str(),
              " cannot fill a tensor on ", t.device().str());
  fill_random_kind(t, kind, a, b, g);
}
}  // namespace

Tensor rand(const Shape& sizes, const TensorOptions& o, Generator* gen) {
  EMBER_CHECK(is_floating(o.dtype), "rand: needs a floating dtype, got ", dtype_name(o.dtype));
  checked_numel(sizes, "rand");
  Tensor t = empty(sizes, o.dtype, o.device, o.memory_format);
  fill_random(t, RandomKind::uniform, 0, 1, gen);
  return finish(t, o);
}
Tensor randn(const Shape& sizes, const TensorOptions& o, Generator* gen) {
  EMBER_CHECK(is_floating(o.dtype), "randn: needs a floating dtype, got ", dtype_name(o.dtype));
  checked_numel(sizes, "randn");
  Tensor t = empty(sizes, o.dtype, o.device, o.memory_format);
  fill_random(t, RandomKind::normal, 0, 1, gen);
  return finish(t, o);
}
Tensor randint(int64_t low, int64_t high, const Shape& sizes, const TensorOptions& o,
               Generator* gen) {
  EMBER_CHECK(high > low, "randint: high (", high, ") must be greater than low (", low, ")");
  EMBER_CHECK(high - low <= (int64_t(1) << 32), "randint: the range [", low, ", ", high,
              ") is wider than 2^32, which the Philox mapping does not cover; split the range");
  checked_numel(sizes, "randint");
  Tensor t = empty(sizes, o.dtype, o.device, o.memory_format);
  fill_random(t, RandomKind::randint, double(low), double(high), gen);
  return t;
}
Tensor bernoulli(const Tensor& like, double p, Generator* gen) {
  EMBER_CHECK(p >= 0 && p <= 1, "bernoulli: p must be in [0, 1], got ", p);
  Tensor t = empty(like.sizes(), like.dtype(), like.device());
  fill_random(t, RandomKind::bernoulli, p, 0, gen);
  return t;
}
Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  autograd::NoGradGuard ng;
  fill_random(t, RandomKind::uniform, low, high, gen);
  return t;
}
Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  autograd::NoGradGuard ng;
  fill_random(t, RandomKind::normal, mean, std, gen);
  return t;
}

Tensor randperm(int64_t n, const TensorOptions& o, Generator* gen) {
  EMBER_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  // Sort 32-bit random keys drawn on the CPU generator (deterministic per seed); ties by index.
  Generator& g = gen ? *gen : default_generator(Device::cpu());
  Tensor keys = empty({n}, DType::i64, Device::cpu());
  fill_random(keys, RandomKind::randint, 0, double(int64_t(1) << 32), &g);
  const int64_t* k = static_cast<const int64_t*>(keys.data_ptr());
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [k](int64_t a, int64_t b) { return k[a] < k[b]; });
  return from_data(idx.data(), DType::i64, {n}, TensorOptions(o.dtype).with_device(o.device));
}

}  // namespace ember
