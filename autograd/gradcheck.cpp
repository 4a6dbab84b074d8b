// Finite-difference gradient checking (fp64, CPU).
#include "ember/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "ember/autograd/autograd.h"
#include "ember/ops/ops.h"

namespace ember::autograd {

bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps, double atol,
               double rtol, std::string* report) {
  for (const Tensor& t : inputs)
    EMBER_CHECK(!t.defined() || (t.dtype() == DType::f64 && t.device().is_cpu()),
                "gradcheck: inputs must be float64 CPU tensors, got ", dtype_name(t.dtype()),
                " on ", t.device().str());
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) checked.push_back(i);
  EMBER_CHECK(!checked.empty(), "gradcheck: no input requires grad");

  Tensor out = fn(inputs);
  const int64_t n_out = out.numel();
  std::vector<Tensor> grad_inputs;
  for (size_t i : checked) grad_inputs.push_back(inputs[i]);

  // Analytic Jacobian, one output element at a time: J[j] = d out[j] / d inputs.
  std::vector<std::vector<std::vector<double>>> analytic(checked.size());
  for (size_t k = 0; k < checked.size(); ++k)
    analytic[k].assign(size_t(n_out), std::vector<double>(size_t(inputs[checked[k]].numel()), 0.0));
  for (int64_t j = 0; j < n_out; ++j) {
    Tensor onehot = zeros(out.sizes(), TensorOptions(DType::f64));
    static_cast<double*>(onehot.data_ptr())[j] = 1.0;
    Tensor o = fn(inputs);
    std::vector<Tensor> g = grad({o}, grad_inputs, {onehot}, false, false, true);
    for (size_t k = 0; k < checked.size(); ++k) {
      if (!g[k].defined()) continue;
      std::vector<double> v = g[k].to_vector();
      analytic[k][size_t(j)] = v;
    }
  }

  // Numeric Jacobian by central differences, perturbing each input element in place.
  for (size_t k = 0; k < checked.size(); ++k) {
    Tensor x = inputs[checked[k]];
    Tensor flat = x.detach();
    const int64_t n_in = x.numel();
    for (int64_t e = 0; e < n_in; ++e) {
      // Element e in logical order -> storage address through strides.
      int64_t rem = e, off = 0;
      for (int64_t d = x.dim() - 1; d >= 0; --d) {
        off += (rem % x.size(d)) * x.stride(d);
        rem /= x.size(d);
      }
      double* p = static_cast<double*>(flat.data_ptr()) + off;
      const double orig = *p;
      std::vector<double> plus, minus;
      {
        NoGradGuard ng;
        *p = orig + eps;
        plus = fn(inputs).to_vector();
        *p = orig - eps;
        minus = fn(inputs).to_vector();
        *p = orig;
      }
      for (int64_t j = 0; j < n_out; ++j) {
        double num = (plus[size_t(j)] - minus[size_t(j)]) / (2 * eps);
        double ana = analytic[k][size_t(j)][size_t(e)];
        if (!(std::abs(num - ana) <= atol + rtol * std::abs(num))) {
          if (report) {
            std::ostringstream os;
            os << "gradcheck: input " << checked[k] << " (shape " << x.shape_str() << ") element "
               << e << ", output element " << j << ": analytic " << ana << " vs numeric " << num;
            *report = os.str();
          }
          return false;
        }
      }
    }
  }
  return true;
}

bool gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                   const Tensor& grad_output, double eps, double atol, double rtol,
                   std::string* report) {
  std::vector<size_t> differentiable;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) differentiable.push_back(i);
  EMBER_CHECK(!differentiable.empty(), "gradgradcheck: no input requires grad");
  Shape out_shape;
  {
    EnableGradGuard eg;
    out_shape = fn(inputs).sizes();
  }
  Tensor v = grad_output;
  if (v.defined()) {
    EMBER_CHECK(v.sizes() == out_shape && v.dtype() == DType::f64 && v.device().is_cpu(),
                "gradgradcheck: grad_output must be a float64 CPU tensor of the output's shape ",
                shape_str(out_shape), ", got ", v.shape_str(), " ", dtype_name(v.dtype()));
    v = v.detach();
  } else {
    Generator gen(Device::cpu(), 20240607);
    v = rand(out_shape, TensorOptions(DType::f64), &gen) * 2.0 - 1.0;
  }
  v.set_requires_grad(true);

  // The first-order gradient as a function of (inputs..., v), flattened into one vector. It runs
  // with grad mode on even for gradcheck's finite differences (which switch it off), since it
  // needs a graph to differentiate.
  const size_t n = inputs.size();
  GradcheckFn first_order = [&fn, &differentiable, n](const std::vector<Tensor>& args) {
    EnableGradGuard eg;
    std::vector<Tensor> xs(args.begin(), args.begin() + std::ptrdiff_t(n));
    Tensor out = fn(xs);
    std::vector<Tensor> wrt;
    for (size_t i : differentiable) wrt.push_back(xs[i]);
    std::vector<Tensor> gs;
    if (out.requires_grad()) gs = grad({out}, wrt, {args[n]}, true, true, true);
    std::vector<Tensor> flat;
    for (size_t k = 0; k < wrt.size(); ++k)
      flat.push_back(gs.size() > k && gs[k].defined()
                         ? gs[k].reshape({-1})
                         : zeros({wrt[k].numel()}, TensorOptions(DType::f64)));
    return cat(flat, 0);
  };
  std::vector<Tensor> args = inputs;
  args.push_back(v);
  std::string inner;
  bool ok = gradcheck(first_order, args, eps, atol, rtol, &inner);
  if (!ok && report)
    *report = "gradgradcheck (inputs " + std::to_string(n) + " = grad_output): " + inner;
  return ok;
}

}  // namespace ember::autograd
