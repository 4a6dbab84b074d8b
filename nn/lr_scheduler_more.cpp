// The schedules of nn/lr_scheduler_more.h: PyTorch's schedules in closed form per epoch, the
// composites that evaluate their children, and the metric-driven ReduceLROnPlateau.
#include "ember/nn/lr_scheduler_more.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>

#include "ember/tensor/json_depth.h"

namespace ember::optim {

namespace {
using json = nlohmann::json;

json parse_state(const std::string& text, const std::string& op) {
  EMBER_CHECK(json_nesting_depth(text) <= kMaxJsonDepth, op, ": the state nests deeper than ",
              kMaxJsonDepth, " levels; it is corrupt");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    EMBER_THROW(bad_param, op, ": not valid JSON (", e.what(), ")");
  }
}

std::vector<LRLambda> check_lambdas(std::vector<LRLambda> lambdas, size_t groups, const char* op) {
  EMBER_CHECK(lambdas.size() == 1 || lambdas.size() == groups, op, ": got ", lambdas.size(),
              " lambdas for ", groups, " parameter groups; give one, or one per group");
  for (const LRLambda& f : lambdas) EMBER_CHECK(bool(f), op, ": a lambda is empty");
  if (lambdas.size() == 1) lambdas.resize(groups, lambdas[0]);
  return lambdas;
}
}  // namespace

// ---- ExponentialLR, LambdaLR, MultiplicativeLR, PolynomialLR, ConstantLR ----------------------

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  EMBER_CHECK(gamma >= 0, "ExponentialLR: gamma ", gamma, " is negative");
  initial_step();
}

double ExponentialLR::compute_lr(int64_t epoch, size_t group) const {
  return base_lrs_[group] * std::pow(gamma_, double(epoch));
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<LRLambda> lr_lambdas)
    : LRScheduler(optimizer),
      lambdas_(check_lambdas(std::move(lr_lambdas), optimizer.num_param_groups(), "LambdaLR")) {
  initial_step();
}

double LambdaLR::compute_lr(int64_t epoch, size_t group) const {
  return base_lrs_[group] * lambdas_[group](epoch);
}

MultiplicativeLR::MultiplicativeLR(Optimizer& optimizer, std::vector<LRLambda> lr_lambdas)
    : LRScheduler(optimizer),
      lambdas_(
          check_lambdas(std::move(lr_lambdas), optimizer.num_param_groups(), "MultiplicativeLR")) {
  initial_step();
}

double MultiplicativeLR::compute_lr(int64_t epoch, size_t group) const {
  double lr = base_lrs_[group];
  for (int64_t e = 1; e <= epoch; ++e) lr *= lambdas_[group](e);  // in PyTorch's order
  return lr;
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(optimizer), total_iters_(total_iters), power_(power) {
  EMBER_CHECK(total_iters > 0, "PolynomialLR: total_iters ", total_iters, " must be positive");
  EMBER_CHECK(power >= 0, "PolynomialLR: power ", power, " is negative");
  initial_step();
}

double PolynomialLR::compute_lr(int64_t epoch, size_t group) const {
  const double done = double(std::min(epoch, total_iters_)) / double(total_iters_);
  return base_lrs_[group] * std::pow(1.0 - done, power_);
}

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer), factor_(factor), total_iters_(total_iters) {
  EMBER_CHECK(factor >= 0 && factor <= 1, "ConstantLR: factor ", factor,
              " must be in [0, 1] (the constant factor applied before total_iters)");
  EMBER_CHECK(total_iters >= 0, "ConstantLR: total_iters ", total_iters, " is negative");
  initial_step();
}

double ConstantLR::compute_lr(int64_t epoch, size_t group) const {
  return base_lrs_[group] * (epoch >= total_iters_ ? 1.0 : factor_);
}

// ---- CosineAnnealingWarmRestarts ----------------------------------------------------------------

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0,
                                                         int64_t T_mult, double eta_min)
    : LRScheduler(optimizer), t_0_(T_0), t_mult_(T_mult), eta_min_(eta_min) {
  EMBER_CHECK(T_0 > 0, "CosineAnnealingWarmRestarts: T_0 ", T_0, " must be a positive integer");
  EMBER_CHECK(T_mult >= 1, "CosineAnnealingWarmRestarts: T_mult ", T_mult,
              " must be an integer >= 1");
  initial_step();
}

double CosineAnnealingWarmRestarts::compute_lr(int64_t epoch, size_t group) const {
  // PyTorch's T_cur / T_i bookkeeping, exactly in integers.
  int64_t t_cur = epoch, t_i = t_0_;
  if (t_mult_ == 1) {
    t_cur = epoch % t_0_;
  } else {
    while (t_cur >= t_i) {
      t_cur -= t_i;
      t_i *= t_mult_;
    }
  }
  return eta_min_ + (base_lrs_[group] - eta_min_) *
                        (1 + std::cos(std::numbers::pi * double(t_cur) / double(t_i))) / 2;
}

// ---- CyclicLR -----------------------------------------------------------------------------------

CyclicLR::CyclicLR(Optimizer& optimizer, std::vector<double> base_lrs, std::vector<double> max_lrs,
                   const CyclicLROptions& options)
    : LRScheduler(optimizer), options_(options) {
  const size_t groups = optimizer.num_param_groups();
  EMBER_CHECK(base_lrs.size() == 1 || base_lrs.size() == groups, "CyclicLR: got ", base_lrs.size(),
              " base_lrs for ", groups, " groups; give one, or one per group");
  EMBER_CHECK(max_lrs.size() == 1 || max_lrs.size() == groups, "CyclicLR: got ", max_lrs.size(),
              " max_lrs for ", groups, " groups; give one, or one per group");
  EMBER_CHECK(options.step_size_up() > 0 && options.step_size_down() >= 0,
              "CyclicLR: step_size_up ", options.step_size_up(), " must be positive and ",
              "step_size_down ", options.step_size_down(), " non-negative (0: as step_size_up)");
  EMBER_CHECK(options.gamma() > 0, "CyclicLR: gamma ", options.gamma(), " must be positive");
  for (size_t g = 0; g < groups; ++g) {
    const double base = base_lrs.size() == 1 ? base_lrs[0] : base_lrs[g];
    const double max = max_lrs.size() == 1 ? max_lrs[0] : max_lrs[g];
    EMBER_CHECK(base >= 0 && max >= 0, "CyclicLR: group ", g, ": base_lr ", base, " and max_lr ",
                max, " must be non-negative");
    base_lrs_[g] = base;
    max_lrs_.push_back(max);
  }
  const double up = double(options.step_size_up());
  const double down = options.step_size_down() > 0 ? double(options.step_size_down()) : up;
  total_size_ = up + down;
  step_ratio_ = up / total_size_;
  if (options.cycle_momentum())
    EMBER_CHECK(options.base_momentum() >= 0 && options.max_momentum() >= 0,
                "CyclicLR: base_momentum and max_momentum must be non-negative");
  initial_step();
}

std::pair<double, double> CyclicLR::position(int64_t epoch) const {
  const double cycle = std::floor(1 + double(epoch) / total_size_);
  const double x = 1.0 + double(epoch) / total_size_ - cycle;
  const double scale_factor = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
  double scale = 1.0;
  switch (options_.mode()) {
    case CyclicMode::triangular:
      break;
    case CyclicMode::triangular2:
      scale = 1 / std::pow(2.0, cycle - 1);
      break;
    case CyclicMode::exp_range:
      scale = std::pow(options_.gamma(), double(epoch));  // scale_mode "iterations"
      break;
  }
  return {scale_factor, scale};
}

double CyclicLR::compute_lr(int64_t epoch, size_t group) const {
  const auto [scale_factor, scale] = position(epoch);
  const double base_height = (max_lrs_[group] - base_lrs_[group]) * scale_factor;
  return base_lrs_[group] + base_height * scale;
}

std::optional<double> CyclicLR::compute_momentum(int64_t epoch, size_t) const {
  if (!options_.cycle_momentum()) return std::nullopt;
  const auto [scale_factor, scale] = position(epoch);
  const double base_height = (options_.max_momentum() - options_.base_momentum()) * scale_factor;
  return options_.max_momentum() - base_height * scale;
}

// ---- SequentialLR, ChainedScheduler -------------------------------------------------------------

namespace {
// Checks the children and re-bases them on the first one's base rates; returns those.
std::vector<double> adopt_children(Optimizer& optimizer,
                                   const std::vector<std::shared_ptr<LRScheduler>>& children,
                                   const char* op) {
  EMBER_CHECK(!children.empty(), op, ": give at least one scheduler");
  for (size_t i = 0; i < children.size(); ++i) {
    EMBER_CHECK(children[i] != nullptr, op, ": scheduler ", i, " is null");
    EMBER_CHECK(children[i]->base_lrs().size() == optimizer.num_param_groups(), op, ": scheduler ",
                i, " was made for ", children[i]->base_lrs().size(),
                " parameter groups, the optimizer has ", optimizer.num_param_groups());
  }
  return children[0]->base_lrs();
}
}  // namespace

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  base_lrs_ = adopt_children(optimizer, schedulers_, "SequentialLR");
  for (const auto& child : schedulers_) {
    EMBER_CHECK(&child->optimizer_ == &optimizer, "SequentialLR: every scheduler must belong to ",
                "the optimizer given to SequentialLR");
    child->base_lrs_ = base_lrs_;
  }
  EMBER_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ", schedulers_.size(),
              " schedulers need ", schedulers_.size() - 1, " milestones, got ", milestones_.size());
  EMBER_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()),
              "SequentialLR: milestones must be in increasing order");
  initial_step();
}

std::pair<const LRScheduler*, int64_t> SequentialLR::active(int64_t epoch) const {
  const size_t idx =
      size_t(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  const int64_t offset = idx == 0 ? 0 : milestones_[idx - 1];
  return {schedulers_[idx].get(), epoch - offset};
}

double SequentialLR::compute_lr(int64_t epoch, size_t group) const {
  const auto [child, child_epoch] = active(epoch);
  return child->compute_lr(child_epoch, group);
}

std::optional<double> SequentialLR::compute_momentum(int64_t epoch, size_t group) const {
  const auto [child, child_epoch] = active(epoch);
  return child->compute_momentum(child_epoch, group);
}

ChainedScheduler::ChainedScheduler(Optimizer& optimizer,
                                   std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)) {
  base_lrs_ = adopt_children(optimizer, schedulers_, "ChainedScheduler");
  for (const auto& child : schedulers_) {
    EMBER_CHECK(&child->optimizer_ == &optimizer, "ChainedScheduler: every scheduler must belong ",
                "to the optimizer given to ChainedScheduler");
    child->base_lrs_ = base_lrs_;
  }
  initial_step();
}

double ChainedScheduler::compute_lr(int64_t epoch, size_t group) const {
  const double base = base_lrs_[group];
  if (base == 0) return 0;
  double lr = base;
  for (const auto& child : schedulers_) lr *= child->compute_lr(epoch, group) / base;
  return lr;
}

std::optional<double> ChainedScheduler::compute_momentum(int64_t epoch, size_t group) const {
  std::optional<double> momentum;
  for (const auto& child : schedulers_)
    if (auto m = child->compute_momentum(epoch, group)) momentum = m;
  return momentum;
}

namespace {
std::string composite_state(const std::string& own,
                            const std::vector<std::shared_ptr<LRScheduler>>& children) {
  json j = json::parse(own);
  json list = json::array();
  for (const auto& child : children) list.push_back(json::parse(child->state_json()));
  j["schedulers"] = list;
  return j.dump();
}

// Loads the composite's own part (through `load_own`) and each child's.
template <typename LoadOwn>
void load_composite(const std::string& text, const std::string& op,
                    const std::vector<std::shared_ptr<LRScheduler>>& children, LoadOwn load_own) {
  json j = parse_state(text, op);
  EMBER_CHECK(j.is_object() && j.contains("schedulers") && j["schedulers"].is_array() &&
                  j["schedulers"].size() == children.size(),
              op, ": the state must list the states of its ", children.size(), " schedulers");
  for (size_t i = 0; i < children.size(); ++i)
    children[i]->load_state_json(j["schedulers"][i].dump());
  j.erase("schedulers");
  load_own(j.dump());
}
}  // namespace

std::string SequentialLR::state_json() const {
  json j = json::parse(LRScheduler::state_json());
  j["milestones"] = milestones_;
  return composite_state(j.dump(), schedulers_);
}

void SequentialLR::load_state_json(const std::string& text) {
  load_composite(text, "SequentialLR.load_state_json", schedulers_, [&](const std::string& own) {
    json j = json::parse(own);
    j.erase("milestones");
    LRScheduler::load_state_json(j.dump());
  });
}

std::string ChainedScheduler::state_json() const {
  return composite_state(LRScheduler::state_json(), schedulers_);
}

void ChainedScheduler::load_state_json(const std::string& text) {
  load_composite(text, "ChainedScheduler.load_state_json", schedulers_,
                 [&](const std::string& own) { LRScheduler::load_state_json(own); });
}

// ---- ReduceLROnPlateau --------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options)
    : optimizer_(optimizer), options_(options) {
  const char* op = "ReduceLROnPlateau";
  EMBER_CHECK(options.factor() >= 0 && options.factor() < 1, op, ": factor ", options.factor(),
              " must be below 1 (and non-negative)");
  EMBER_CHECK(options.patience() >= 0, op, ": patience ", options.patience(), " is negative");
  EMBER_CHECK(options.cooldown() >= 0, op, ": cooldown ", options.cooldown(), " is negative");
  EMBER_CHECK(options.threshold() >= 0, op, ": threshold ", options.threshold(), " is negative");
  EMBER_CHECK(options.eps() >= 0, op, ": eps ", options.eps(), " is negative");
  const size_t groups = optimizer.num_param_groups();
  const std::vector<double>& min_lr = options.min_lr();
  EMBER_CHECK(min_lr.size() == 1 || min_lr.size() == groups, op, ": got ", min_lr.size(),
              " min_lr values for ", groups, " parameter groups; give one, or one per group");
  for (size_t g = 0; g < groups; ++g) {
    const double m = min_lr.size() == 1 ? min_lr[0] : min_lr[g];
    EMBER_CHECK(m >= 0, op, ": min_lr ", m, " is negative");
    min_lrs_.push_back(m);
  }
  best_ = options.mode() == PlateauMode::min ? std::numeric_limits<double>::infinity()
                                             : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double t = options_.threshold();
  const bool rel = options_.threshold_mode() == ThresholdMode::rel;
  if (options_.mode() == PlateauMode::min) return rel ? a < best_ * (1 - t) : a < best_ - t;
  return rel ? a > best_ * (t + 1) : a > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience()) {
    for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
      const double old_lr = optimizer_.lr(g);
      const double new_lr = std::max(old_lr * options_.factor(), min_lrs_[g]);
      if (old_lr - new_lr > options_.eps()) optimizer_.set_lr(g, new_lr);
    }
    cooldown_counter_ = options_.cooldown();
    num_bad_epochs_ = 0;
  }
}

std::vector<double> ReduceLROnPlateau::get_last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) out.push_back(optimizer_.lr(g));
  return out;
}

std::string ReduceLROnPlateau::state_json() const {
  // JSON has no infinity: the initial "best" is written as null.
  json best = std::isfinite(best_) ? json(best_) : json(nullptr);
  return json{{"type", name()},
              {"last_epoch", last_epoch_},
              {"best", best},
              {"num_bad_epochs", num_bad_epochs_},
              {"cooldown_counter", cooldown_counter_}}
      .dump();
}

void ReduceLROnPlateau::load_state_json(const std::string& text) {
  const std::string op = "ReduceLROnPlateau.load_state_json";
  const json j = parse_state(text, op);
  EMBER_CHECK(j.is_object() && j.value("type", "") == name() && j.contains("last_epoch") &&
                  j["last_epoch"].is_number_integer() && j.contains("best") &&
                  (j["best"].is_number() || j["best"].is_null()) && j.contains("num_bad_epochs") &&
                  j["num_bad_epochs"].is_number_integer() && j.contains("cooldown_counter") &&
                  j["cooldown_counter"].is_number_integer(),
              op, ": expected a ReduceLROnPlateau state {\"type\", \"last_epoch\", \"best\", ",
              "\"num_bad_epochs\", \"cooldown_counter\"}, got ", text);
  const int64_t epoch = j["last_epoch"].get<int64_t>();
  const int64_t bad = j["num_bad_epochs"].get<int64_t>();
  const int64_t cooldown = j["cooldown_counter"].get<int64_t>();
  EMBER_CHECK(epoch >= 0 && bad >= 0 && cooldown >= 0, op, ": negative counters in ", text);
  last_epoch_ = epoch;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
  best_ = j["best"].is_null()
              ? (options_.mode() == PlateauMode::min ? std::numeric_limits<double>::infinity()
                                                     : -std::numeric_limits<double>::infinity())
              : j["best"].get<double>();
}

}  // namespace ember::optim
