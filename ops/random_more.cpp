// Issue 34's random ops (declared in ops/elementwise_more.h): the exponential, geometric, cauchy
// and log-normal in-place fills (random_kernel kinds), normal with tensor mean / std (a standard
// normal fill, then mean + std * z so that autograd reaches mean and std), poisson
// (poisson_kernel) and multinomial (without replacement: PyTorch's exponential race, the top k
// of probs / Exponential(1); with replacement: multinomial_kernel's search of each row's CDF).
#include <cmath>

#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/random.h"
#include "ember/kernel_interface/random_samplers.h"
#include "ember/ops/ops.h"
#include "ember/ops/random_internal.h"
#include "ember/tensor/tensor_iter.h"

namespace ember {

namespace {

Generator& pick(Generator* gen, Device d) { return gen ? *gen : default_generator(d); }

Generator& checked_generator(const char* op, Generator* gen, const Tensor& t) {
  Generator& g = pick(gen, t.device());
  EMBER_CHECK(g.device().type == t.device().type, op, ": a generator for ", g.device().str(),
              " cannot draw for a tensor on ", t.device().str(),
              "; pass a generator of the tensor's device");
  return g;
}

// Checks what the distribution fills need, then the shared fill (ops/random_internal.h).
Tensor& fill_kind(const char* op, Tensor& t, RandomKind kind, double a, double b, Generator* gen) {
  EMBER_CHECK(t.defined(), op, ": argument 'self' is an undefined tensor");
  EMBER_CHECK(is_floating(t.dtype()), op, ": the tensor of shape ", t.shape_str(), " has dtype ",
              dtype_name(t.dtype()), " but ", op,
              " fills floating tensors only; create it with a floating dtype");
  if (t.numel() == 0) return t;
  Generator& g = checked_generator(op, gen, t);
  fill_random_kind(t, kind, a, b, g);
  return t;
}

}  // namespace

Tensor& exponential_(Tensor& t, double lambd, Generator* gen) {
  EMBER_CHECK(lambd > 0, "exponential_: lambd must be positive, got ", lambd);
  return fill_kind("exponential_", t, RandomKind::exponential, lambd, 0, gen);
}
Tensor& geometric_(Tensor& t, double p, Generator* gen) {
  EMBER_CHECK(p > 0 && p < 1, "geometric_: p must be in (0, 1), got ", p);
  return fill_kind("geometric_", t, RandomKind::geometric, p, 0, gen);
}
Tensor& cauchy_(Tensor& t, double median, double sigma, Generator* gen) {
  EMBER_CHECK(sigma > 0, "cauchy_: sigma must be positive, got ", sigma);
  return fill_kind("cauchy_", t, RandomKind::cauchy, median, sigma, gen);
}
Tensor& log_normal_(Tensor& t, double mean, double std, Generator* gen) {
  EMBER_CHECK(std > 0, "log_normal_: std must be positive, got ", std);
  return fill_kind("log_normal_", t, RandomKind::log_normal, mean, std, gen);
}

// ---- normal with tensor parameters ----
namespace {
Tensor normal_impl(const Tensor& mean, const Tensor& std, Generator* gen) {
  EMBER_CHECK(mean.defined(), "normal: argument 'mean' is an undefined tensor");
  EMBER_CHECK(std.defined(), "normal: argument 'std' is an undefined tensor");
  EMBER_CHECK(is_floating(mean.dtype()) && is_floating(std.dtype()), "normal: mean (",
              dtype_name(mean.dtype()), ", shape ", mean.shape_str(), ") and std (",
              dtype_name(std.dtype()), ", shape ", std.shape_str(), ") must be floating tensors");
  EMBER_CHECK(mean.device() == std.device(), "normal: mean is on ", mean.device().str(),
              " but std on ", std.device().str(), "; move one with .to(device)");
  const Shape shape = broadcast_shapes("normal", {mean.sizes(), std.sizes()});
  if (std.numel() > 0) {
    autograd::NoGradGuard ng;
    const double smallest = min(std).item();
    EMBER_CHECK(smallest >= 0, "normal: std (shape ", std.shape_str(),
                ") must be non-negative, but its smallest value is ", smallest);
  }
  Tensor z = randn(
      shape, TensorOptions(promote_types(mean.dtype(), std.dtype())).with_device(mean.device()),
      gen);
  return add(mean, mul(std, z));
}
Tensor full_like_device(double v, const Tensor& like) {
  return full({}, v, TensorOptions(like.dtype()).with_device(like.device()));
}
}  // namespace

Tensor normal(const Tensor& mean, const Tensor& std, Generator* gen) {
  return normal_impl(mean, std, gen);
}
Tensor normal(const Tensor& mean, double std, Generator* gen) {
  EMBER_CHECK(mean.defined(), "normal: argument 'mean' is an undefined tensor");
  EMBER_CHECK(std >= 0, "normal: std must be non-negative, got ", std);
  return normal_impl(mean, full_like_device(std, mean), gen);
}
Tensor normal(double mean, const Tensor& std, Generator* gen) {
  EMBER_CHECK(std.defined(), "normal: argument 'std' is an undefined tensor");
  return normal_impl(full_like_device(mean, std), std, gen);
}

// ---- poisson ----
Tensor poisson(const Tensor& rates, Generator* gen) {
  EMBER_CHECK(rates.defined(), "poisson: argument 'input' is an undefined tensor");
  EMBER_CHECK(is_floating(rates.dtype()), "poisson: the rates of shape ", rates.shape_str(),
              " have dtype ", dtype_name(rates.dtype()),
              "; poisson takes floating rates (convert with .to(kFloat))");
  const DType compute = rates.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor r;
  {
    autograd::NoGradGuard ng;
    r = rates.to(compute).contiguous();
  }
  Tensor out = empty(rates.sizes(), compute, rates.device());
  if (out.numel() > 0) {
    Generator& g = checked_generator("poisson", gen, rates);
    const PhiloxState s = g.reserve(random_samplers::kPoissonOffsetIncrement);
    poisson_kernel().get(out.device().type, compute)(out, r, s);
  }
  return compute == rates.dtype() ? out : out.to(rates.dtype());
}

// ---- multinomial ----
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  EMBER_CHECK(probs.defined(), "multinomial: argument 'input' is an undefined tensor");
  EMBER_CHECK(probs.dim() == 1 || probs.dim() == 2,
              "multinomial: 'input' (probabilities) must be "
              "1-D or 2-D, got shape ",
              probs.shape_str());
  EMBER_CHECK(is_floating(probs.dtype()), "multinomial: 'input' (shape ", probs.shape_str(),
              ") has dtype ", dtype_name(probs.dtype()), "; probabilities must be floating");
  EMBER_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got ", num_samples);
  const int64_t categories = probs.size(-1);
  EMBER_CHECK(categories > 0, "multinomial: 'input' of shape ", probs.shape_str(),
              " has no categories");
  EMBER_CHECK(replacement || num_samples <= categories, "multinomial: cannot draw ", num_samples,
              " samples without replacement from ", categories, " categories (input shape ",
              probs.shape_str(), "); pass replacement=true or draw fewer");
  autograd::NoGradGuard ng;
  const DType compute = probs.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor p2 = (probs.dim() == 1 ? probs.unsqueeze(0) : probs).to(compute).contiguous();
  {
    // One host sync for all the distribution checks, as PyTorch's CPU checks.
    const Tensor bad = logical_or(lt(p2, 0.0), logical_not(isfinite(p2)));
    EMBER_CHECK(!any(bad).item(), "multinomial: 'input' (shape ", probs.shape_str(),
                ") must hold finite, non-negative probabilities");
    const Tensor row_sums = sum(p2, {1});
    EMBER_CHECK(min(row_sums).item() > 0, "multinomial: a row of 'input' (shape ",
                probs.shape_str(), ") sums to 0; every row needs a positive probability");
    if (!replacement) {
      const double fewest = min(count_nonzero(p2, {1})).item();
      EMBER_CHECK(fewest >= double(num_samples), "multinomial: cannot draw ", num_samples,
                  " distinct samples without replacement from a row with only ", fewest,
                  " nonzero probabilities (input shape ", probs.shape_str(), ")");
    }
  }
  Tensor out;
  if (!replacement) {
    Tensor q = empty(p2.sizes(), compute, p2.device());
    exponential_(q, 1.0, gen);
    const Tensor keys = div(p2, q);
    out = num_samples == 1 ? argmax(keys, 1, true) : std::get<1>(topk(keys, num_samples, 1));
  } else {
    Tensor cdf = cumsum(p2, 1);
    cdf = div(cdf, cdf.narrow(1, categories - 1, 1)).contiguous();  // last column exactly 1
    out = empty({p2.size(0), num_samples}, DType::i64, p2.device());
    Generator& g = checked_generator("multinomial", gen, probs);
    multinomial_kernel().get(p2.device().type, compute)(out, cdf, g.reserve(4));
  }
  return probs.dim() == 1 ? out.squeeze(0) : out;
}

// ---- Tensor methods ----
Tensor& Tensor::exponential_(double lambd, Generator* generator) {
  return ::ember::exponential_(*this, lambd, generator);
}
Tensor& Tensor::geometric_(double p, Generator* generator) {
  return ::ember::geometric_(*this, p, generator);
}
Tensor& Tensor::cauchy_(double median, double sigma, Generator* generator) {
  return ::ember::cauchy_(*this, median, sigma, generator);
}
Tensor& Tensor::log_normal_(double mean, double std, Generator* generator) {
  return ::ember::log_normal_(*this, mean, std, generator);
}
Tensor Tensor::multinomial(int64_t num_samples, bool replacement, Generator* generator) const {
  return ::ember::multinomial(*this, num_samples, replacement, generator);
}

}  // namespace ember
