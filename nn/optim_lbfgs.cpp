// torch.optim.LBFGS (nn/optim_lbfgs.h): a port of PyTorch's lbfgs.py (two-loop recursion, the
// strong-Wolfe line search with cubic interpolation) on flat tensors of the parameters' device.
#include "ember/nn/optim_lbfgs.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace ember::optim {

namespace {

using json = nlohmann::json;

double dot_value(const Tensor& a, const Tensor& b) { return sum(a * b).item(); }
double abs_max(const Tensor& a) { return a.numel() == 0 ? 0.0 : max(abs(a)).item(); }

// The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to the bounds
// (default: the interval between x1 and x2); PyTorch's _cubic_interpolate.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const auto [xmin_bound, xmax_bound] =
      bounds ? *bounds : (x1 <= x2 ? std::make_pair(x1, x2) : std::make_pair(x2, x1));
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square >= 0) {
    const double d2 = std::sqrt(d2_square);
    const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                    : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
    return std::min(std::max(min_pos, xmin_bound), xmax_bound);
  }
  return (xmin_bound + xmax_bound) / 2;
}

struct LineSearchResult {
  double f;
  Tensor g;
  double t;
  int64_t evals;
};

// PyTorch's _strong_wolfe: a step t along d satisfying the strong Wolfe conditions (c1, c2),
// bracketing then zooming; obj(t) gives (loss, flat gradient) at x + t d.
template <typename Obj>
LineSearchResult strong_wolfe(const Obj& obj, double t, const Tensor& d, double f, const Tensor& g,
                              double gtd, double tolerance_change, double c1 = 1e-4,
                              double c2 = 0.9, int max_ls = 25) {
  const double d_norm = abs_max(d);
  auto [f_new, g_new] = obj(t);
  int64_t evals = 1;
  double gtd_new = dot_value(g_new, d);
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g.clone();
  bool done = false;
  int ls_iter = 0;
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Tensor> bracket_g;
  while (ls_iter < max_ls) {
    if (f_new > f + c1 * t * gtd || (ls_iter > 1 && f_new >= f_prev)) {
      bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new.clone()};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    if (std::abs(gtd_new) <= -c2 * gtd) {
      bracket = {t}, bracket_f = {f_new}, bracket_g = {g_new}, bracket_gtd = {gtd_new};
      done = true;
      break;
    }
    if (gtd_new >= 0) {
      bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new.clone()};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    const double min_step = t + 0.01 * (t - t_prev), max_step = t * 10;
    const double tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                          std::make_pair(min_step, max_step));
    t_prev = tmp, f_prev = f_new, g_prev = g_new.clone(), gtd_prev = gtd_new;
    std::tie(f_new, g_new) = obj(t);
    ++evals;
    gtd_new = dot_value(g_new, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) {
    bracket = {0, t}, bracket_f = {f, f_new}, bracket_g = {g, g_new}, bracket_gtd = {gtd, gtd_new};
  }
  // Zoom: shrink the bracket until a point satisfies the conditions.
  bool insuf_progress = false;
  size_t low = bracket_f.front() <= bracket_f.back() ? 0 : 1, high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::abs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1],
                          bracket_gtd[1]);
    const double hi = std::max(bracket[0], bracket[1]), lo = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (hi - lo);
    if (std::min(hi - t, t - lo) < eps) {
      if (insuf_progress || t >= hi || t <= lo) {
        t = std::abs(t - hi) < std::abs(t - lo) ? hi - eps : lo + eps;
        insuf_progress = false;
      } else {
        insuf_progress = true;
      }
    } else {
      insuf_progress = false;
    }
    std::tie(f_new, g_new) = obj(t);
    ++evals;
    gtd_new = dot_value(g_new, d);
    ++ls_iter;
    if (f_new > f + c1 * t * gtd || f_new >= bracket_f[low]) {
      bracket[high] = t, bracket_f[high] = f_new, bracket_g[high] = g_new.clone();
      bracket_gtd[high] = gtd_new;
      low = bracket_f[0] <= bracket_f[1] ? 0 : 1;
      high = 1 - low;
    } else {
      if (std::abs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        bracket[high] = bracket[low], bracket_f[high] = bracket_f[low];
        bracket_g[high] = bracket_g[low], bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t, bracket_f[low] = f_new, bracket_g[low] = g_new.clone();
      bracket_gtd[low] = gtd_new;
    }
  }
  // A one-point bracket (the first phase met the conditions) has its point at index 0.
  if (bracket.size() == 1) low = 0;
  return {bracket_f[low], bracket_g[low], bracket[low], evals};
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, const LBFGSOptions& options) : options_(options) {
  EMBER_CHECK(options.lr() > 0, "LBFGS: learning rate ", options.lr(), " must be positive");
  EMBER_CHECK(options.max_iter() > 0, "LBFGS: max_iter ", options.max_iter(), " must be positive");
  EMBER_CHECK(!options.max_eval() || *options.max_eval() > 0, "LBFGS: max_eval must be positive");
  EMBER_CHECK(options.history_size() > 0, "LBFGS: history_size ", options.history_size(),
              " must be positive");
  EMBER_CHECK(options.tolerance_grad() >= 0 && options.tolerance_change() >= 0,
              "LBFGS: tolerances must be non-negative");
  EMBER_CHECK(!options.line_search_fn() || *options.line_search_fn() == "strong_wolfe",
              "LBFGS: line_search_fn '", options.line_search_fn().value_or(""),
              "' is not supported; use \"strong_wolfe\" or none");
  if (!options_.max_eval()) options_.max_eval(options.max_iter() * 5 / 4);
  add_group(std::move(params), options.lr(), 0);
}

void LBFGS::step_group(size_t, const std::vector<size_t>&, const Tensor&) {
  EMBER_THROW(bad_param, "LBFGS.step: LBFGS re-evaluates the loss; call step(closure) with a ",
              "closure that zeroes the gradients, computes the loss, calls backward() and ",
              "returns the loss");
}

Tensor LBFGS::gather_flat_grad() const {
  std::vector<Tensor> views;
  for (const Tensor& p : groups_[0].params) {
    if (p.grad().defined())
      views.push_back(p.grad().reshape({p.numel()}));
    else
      views.push_back(zeros({p.numel()}, TensorOptions(p.dtype()).with_device(p.device())));
  }
  return cat(views, 0);
}

void LBFGS::add_to_params(double step_size, const Tensor& direction) {
  int64_t offset = 0;
  for (Tensor& p : groups_[0].params) {
    const int64_t n = p.numel();
    p.add_(direction.narrow(0, offset, n).reshape(p.sizes()), step_size);
    offset += n;
  }
  for (Tensor& p : groups_[0].params) p.bump_version();
}

std::vector<Tensor> LBFGS::clone_params() const {
  std::vector<Tensor> out;
  for (const Tensor& p : groups_[0].params) out.push_back(p.detach().clone());
  return out;
}

void LBFGS::set_params(const std::vector<Tensor>& values) {
  for (size_t i = 0; i < values.size(); ++i) groups_[0].params[i].copy_(values[i]);
}

std::pair<double, Tensor> LBFGS::directional_evaluate(const LossClosure& closure,
                                                      const std::vector<Tensor>& x, double t,
                                                      const Tensor& d) {
  add_to_params(t, d);
  double loss = 0;
  {
    autograd::EnableGradGuard grad;
    loss = closure().item();
  }
  Tensor flat_grad = gather_flat_grad();
  set_params(x);
  return {loss, flat_grad};
}

Tensor LBFGS::step(const LossClosure& closure) {
  EMBER_CHECK(bool(closure), "LBFGS.step: the closure is empty");
  autograd::NoGradGuard no_grad;
  const LBFGSOptions& o = options_;
  const double lr = groups_[0].lr;
  Tensor orig_loss;
  {
    autograd::EnableGradGuard grad;
    orig_loss = closure();
  }
  EMBER_CHECK(orig_loss.defined() && orig_loss.numel() == 1, "LBFGS.step: the closure must ",
              "return the loss as a one-element tensor");
  double loss = orig_loss.item();
  int64_t current_evals = 1;
  ++func_evals_;
  Tensor flat_grad = gather_flat_grad();
  if (abs_max(flat_grad) <= o.tolerance_grad()) return orig_loss;

  int64_t n_iter = 0;
  while (n_iter < o.max_iter()) {
    ++n_iter;
    ++n_iter_;
    if (n_iter_ == 1) {
      d_ = -flat_grad;
      old_dirs_.clear(), old_stps_.clear(), ro_.clear();
      h_diag_ = 1;
    } else {
      // The curvature pair of the last step, then the two-loop recursion.
      const Tensor y = flat_grad - prev_flat_grad_;
      const Tensor s = d_ * t_;
      const double ys = dot_value(y, s);
      if (ys > 1e-10) {
        if (int64_t(old_dirs_.size()) == o.history_size()) {
          old_dirs_.erase(old_dirs_.begin());
          old_stps_.erase(old_stps_.begin());
          ro_.erase(ro_.begin());
        }
        old_dirs_.push_back(y);
        old_stps_.push_back(s);
        ro_.push_back(1.0 / ys);
        h_diag_ = ys / dot_value(y, y);
      }
      const size_t num_old = old_dirs_.size();
      al_.resize(size_t(o.history_size()));
      Tensor q = -flat_grad;
      for (size_t k = num_old; k-- > 0;) {
        al_[k] = dot_value(old_stps_[k], q) * ro_[k];
        q.add_(old_dirs_[k], -al_[k]);
      }
      Tensor r = q * h_diag_;
      for (size_t k = 0; k < num_old; ++k) {
        const double be_k = dot_value(old_dirs_[k], r) * ro_[k];
        r.add_(old_stps_[k], al_[k] - be_k);
      }
      d_ = r;
    }
    prev_flat_grad_ = flat_grad.clone();
    prev_loss_ = loss;
    has_direction_ = true;
    // The step length: scaled down on the very first iteration, as PyTorch.
    if (n_iter_ == 1)
      t_ = std::min(1.0, 1.0 / sum(abs(flat_grad)).item()) * lr;
    else
      t_ = lr;
    const double gtd = dot_value(flat_grad, d_);
    if (gtd > -o.tolerance_change()) break;

    int64_t ls_func_evals = 0;
    bool opt_cond = false;
    if (o.line_search_fn()) {
      const std::vector<Tensor> x_init = clone_params();
      auto obj = [&](double t) { return directional_evaluate(closure, x_init, t, d_); };
      LineSearchResult ls = strong_wolfe(obj, t_, d_, loss, flat_grad, gtd, o.tolerance_change());
      loss = ls.f, flat_grad = ls.g, t_ = ls.t, ls_func_evals = ls.evals;
      add_to_params(t_, d_);
      opt_cond = abs_max(flat_grad) <= o.tolerance_grad();
    } else {
      add_to_params(t_, d_);
      if (n_iter != o.max_iter()) {
        {
          autograd::EnableGradGuard grad;
          loss = closure().item();
        }
        flat_grad = gather_flat_grad();
        opt_cond = abs_max(flat_grad) <= o.tolerance_grad();
        ls_func_evals = 1;
      }
    }
    current_evals += ls_func_evals;
    func_evals_ += ls_func_evals;
    if (n_iter == o.max_iter()) break;
    if (current_evals >= *o.max_eval()) break;
    if (opt_cond) break;
    if (abs_max(d_ * t_) <= o.tolerance_change()) break;
    if (std::abs(loss - prev_loss_) < o.tolerance_change()) break;
  }
  return orig_loss;
}

std::string LBFGS::group_options_json(size_t) const {
  const LBFGSOptions& o = options_;
  return json{{"max_iter", o.max_iter()},
              {"max_eval", *o.max_eval()},
              {"tolerance_grad", o.tolerance_grad()},
              {"tolerance_change", o.tolerance_change()},
              {"history_size", o.history_size()},
              {"line_search_fn", o.line_search_fn() ? json(*o.line_search_fn()) : json(nullptr)}}
      .dump();
}

void LBFGS::load_group_options_json(size_t, const std::string& text) {
  const json j = json::parse(text);
  LBFGSOptions o = options_;
  try {
    o.max_iter(j.at("max_iter").get<int64_t>())
        .max_eval(j.at("max_eval").get<int64_t>())
        .tolerance_grad(j.at("tolerance_grad").get<double>())
        .tolerance_change(j.at("tolerance_change").get<double>())
        .history_size(j.at("history_size").get<int64_t>());
    const json& ls = j.at("line_search_fn");
    o.line_search_fn(ls.is_null() ? std::nullopt
                                  : std::optional<std::string>(ls.get<std::string>()));
  } catch (const json::exception& e) {
    EMBER_THROW(bad_param, "LBFGS.load_state_dict: options ", text, " are incomplete (", e.what(),
                ")");
  }
  EMBER_CHECK(o.max_iter() > 0 && *o.max_eval() > 0 && o.history_size() > 0,
              "LBFGS.load_state_dict: max_iter, max_eval and history_size must be positive");
  options_ = o;
}

NamedTensors LBFGS::state_dict() const {
  NamedTensors out;
  if (!has_direction_) return out;
  out.emplace_back("state.0.d", d_);
  out.emplace_back("state.0.prev_flat_grad", prev_flat_grad_);
  if (!old_dirs_.empty()) {
    out.emplace_back("state.0.old_dirs", stack(old_dirs_, 0));
    out.emplace_back("state.0.old_stps", stack(old_stps_, 0));
  }
  out.emplace_back("state.0.ro",
                   from_vector(ro_, {int64_t(ro_.size())}, TensorOptions(DType::f64)));
  out.emplace_back("state.0.al",
                   from_vector(al_, {int64_t(al_.size())}, TensorOptions(DType::f64)));
  return out;
}

std::string LBFGS::config_json() const {
  json j = json::parse(Optimizer::config_json());
  j["lbfgs"] = {
      {"func_evals", func_evals_}, {"n_iter", n_iter_},       {"t", t_},
      {"H_diag", h_diag_},         {"prev_loss", prev_loss_}, {"has_direction", has_direction_}};
  return j.dump();
}

void LBFGS::load_state_dict(const NamedTensors& state, const std::string& config, bool) {
  const std::string op = "LBFGS.load_state_dict";
  EMBER_CHECK(!config.empty(), op, ": LBFGS needs the config_json() saved with the state");
  json j;
  try {
    j = json::parse(config);
  } catch (const json::exception& e) {
    EMBER_THROW(bad_param, op, ": the config is not valid JSON (", e.what(), ")");
  }
  EMBER_CHECK(j.is_object() && j.value("type", "") == "LBFGS" && j.contains("lbfgs") &&
                  j.contains("param_groups") && j["param_groups"].is_array() &&
                  j["param_groups"].size() == 1,
              op, ": the config was not saved by an LBFGS optimizer");
  const json& s = j["lbfgs"];
  int64_t n = 0;
  for (const Tensor& p : groups_[0].params) n += p.numel();
  const Tensor& p0 = groups_[0].params[0];
  auto find = [&](const std::string& key) -> Tensor {
    for (const auto& [name, t] : state)
      if (name == key) return t;
    return Tensor();
  };
  const bool has_direction = s.value("has_direction", false);
  Tensor d = find("state.0.d"), prev = find("state.0.prev_flat_grad");
  Tensor dirs = find("state.0.old_dirs"), stps = find("state.0.old_stps");
  Tensor ro = find("state.0.ro"), al = find("state.0.al");
  if (has_direction) {
    EMBER_CHECK(d.defined() && prev.defined() && ro.defined() && al.defined(), op,
                ": missing state entries (d, prev_flat_grad, ro, al)");
    EMBER_CHECK(d.numel() == n && prev.numel() == n, op, ": the state's vectors have ", d.numel(),
                " elements, the parameters ", n);
    EMBER_CHECK(
        dirs.defined() == stps.defined() &&
            (!dirs.defined() || (dirs.dim() == 2 && dirs.size(1) == n &&
                                 stps.sizes() == dirs.sizes() && ro.numel() == dirs.size(0))),
        op, ": old_dirs / old_stps / ro do not fit together");
  }
  set_lr(0, j["param_groups"][0].at("lr").get<double>());
  json options = j["param_groups"][0];
  options.erase("params");
  load_group_options_json(0, options.dump());
  func_evals_ = s.value("func_evals", int64_t(0));
  n_iter_ = s.value("n_iter", int64_t(0));
  t_ = s.value("t", 0.0), h_diag_ = s.value("H_diag", 1.0), prev_loss_ = s.value("prev_loss", 0.0);
  has_direction_ = has_direction;
  old_dirs_.clear(), old_stps_.clear(), ro_.clear(), al_.clear();
  if (!has_direction) return;
  d_ = d.reshape({n}).to(p0.device(), p0.dtype()).clone();
  prev_flat_grad_ = prev.reshape({n}).to(p0.device(), p0.dtype()).clone();
  const std::vector<double> ro_values = ro.to(DType::f64).cpu().to_vector();
  ro_.assign(ro_values.begin(), ro_values.end());
  const std::vector<double> al_values = al.to(DType::f64).cpu().to_vector();
  al_.assign(al_values.begin(), al_values.end());
  if (dirs.defined())
    for (int64_t k = 0; k < dirs.size(0); ++k) {
      old_dirs_.push_back(dirs.select(0, k).to(p0.device(), p0.dtype()).clone());
      old_stps_.push_back(stps.select(0, k).to(p0.device(), p0.dtype()).clone());
    }
}

}  // namespace ember::optim
