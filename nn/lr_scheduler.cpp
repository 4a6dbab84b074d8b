// The learning-rate schedules of nn/lr_scheduler.h: closed-form rates per epoch, written into the
// optimizer's device-resident learning rates by Optimizer::set_lr (a device fill, no host sync).
#include "ember/nn/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "ember/tensor/json_depth.h"

namespace ember::optim {

namespace {
using json = nlohmann::json;

double cosine_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
}
double linear_anneal(double start, double end, double pct) { return (end - start) * pct + start; }
}  // namespace

// ---- LRScheduler
// ----------------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
}

void LRScheduler::initial_step() { step(); }

void LRScheduler::step() {
  const int64_t next = last_epoch_ + 1;
  // Compute every rate first, so that an out-of-range step (OneCycleLR) changes nothing.
  std::vector<double> lrs;
  std::vector<std::optional<double>> momenta;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    lrs.push_back(compute_lr(next, g));
    momenta.push_back(compute_momentum(next, g));
  }
  EMBER_CHECK(optimizer_.num_param_groups() == base_lrs_.size(), name(),
              ".step: the optimizer has ", optimizer_.num_param_groups(),
              " parameter groups but the scheduler was made for ", base_lrs_.size(),
              "; make the scheduler after adding every group");
  last_epoch_ = next;
  for (size_t g = 0; g < lrs.size(); ++g) {
    optimizer_.set_lr(g, lrs[g]);
    if (momenta[g]) optimizer_.set_momentum(g, *momenta[g]);
  }
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(compute_lr(last_epoch_, g));
  return out;
}

double LRScheduler::lr_at(int64_t epoch, size_t group) const {
  EMBER_CHECK(group < base_lrs_.size(), name(), ".lr_at: no parameter group ", group,
              " (there are ", base_lrs_.size(), ")");
  EMBER_CHECK(epoch >= 0, name(), ".lr_at: epoch ", epoch, " is negative");
  return compute_lr(epoch, group);
}

std::string LRScheduler::state_json() const {
  return json{{"type", name()}, {"last_epoch", last_epoch_}, {"base_lrs", base_lrs_}}.dump();
}

void LRScheduler::load_state_json(const std::string& text) {
  json j;
  EMBER_CHECK(json_nesting_depth(text) <= kMaxJsonDepth, name(), ".load_state_json: the state ",
              "nests deeper than ", kMaxJsonDepth, " levels; it is corrupt");
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    EMBER_THROW(bad_param, name(), ".load_state_json: not valid JSON (", e.what(), ")");
  }
  EMBER_CHECK(
      j.is_object() && j.contains("type") && j.contains("last_epoch") &&
          j["last_epoch"].is_number_integer() && j.contains("base_lrs") && j["base_lrs"].is_array(),
      name(), ".load_state_json: expected {\"type\", \"last_epoch\", \"base_lrs\"}, got ", text);
  EMBER_CHECK(j["type"] == name(), name(), ".load_state_json: the state belongs to a ",
              j["type"].dump(), " scheduler");
  std::vector<double> base;
  for (const json& v : j["base_lrs"]) {
    EMBER_CHECK(v.is_number() && v.get<double>() >= 0, name(),
                ".load_state_json: base_lrs must be "
                "non-negative numbers, got ",
                v.dump());
    base.push_back(v.get<double>());
  }
  EMBER_CHECK(base.size() == base_lrs_.size(), name(), ".load_state_json: the state has ",
              base.size(), " base rates, this scheduler's optimizer ", base_lrs_.size(), " groups");
  const int64_t epoch = j["last_epoch"].get<int64_t>();
  EMBER_CHECK(epoch >= 0, name(), ".load_state_json: last_epoch ", epoch, " is negative");
  base_lrs_ = base;
  last_epoch_ = epoch;
}

// ---- StepLR, MultiStepLR, CosineAnnealingLR, LinearLR, WarmupCosineLR
// ------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, "StepLR: step_size ", step_size, " must be positive");
  initial_step();
}

double StepLR::compute_lr(int64_t epoch, size_t group) const {
  return base_lrs_[group] * std::pow(gamma_, double(epoch / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  EMBER_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()),
              "MultiStepLR: milestones must "
              "be in increasing order");
  initial_step();
}

double MultiStepLR::compute_lr(int64_t epoch, size_t group) const {
  // bisect_right: milestones <= epoch have passed (a repeated milestone counts twice, as in
  // PyTorch).
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lrs_[group] * std::pow(gamma_, double(passed));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  EMBER_CHECK(T_max > 0, "CosineAnnealingLR: T_max ", T_max, " must be positive");
  initial_step();
}

double CosineAnnealingLR::compute_lr(int64_t epoch, size_t group) const {
  return eta_min_ + (base_lrs_[group] - eta_min_) *
                        (1 + std::cos(std::numbers::pi * double(epoch) / double(t_max_))) / 2;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  EMBER_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor ", start_factor,
              " must be in (0, 1]");
  EMBER_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor ", end_factor,
              " must be in [0, 1]");
  EMBER_CHECK(total_iters > 0, "LinearLR: total_iters ", total_iters, " must be positive");
  initial_step();
}

double LinearLR::compute_lr(int64_t epoch, size_t group) const {
  const double progress = double(std::min(epoch, total_iters_)) / double(total_iters_);
  return base_lrs_[group] * (start_factor_ + (end_factor_ - start_factor_) * progress);
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_iters, int64_t total_iters,
                               double warmup_start_factor, double eta_min)
    : LRScheduler(optimizer),
      warmup_iters_(warmup_iters),
      total_iters_(total_iters),
      warmup_start_factor_(warmup_start_factor),
      eta_min_(eta_min) {
  EMBER_CHECK(warmup_iters >= 0 && total_iters > warmup_iters,
              "WarmupCosineLR: need 0 <= "
              "warmup_iters < total_iters, got warmup_iters ",
              warmup_iters, ", total_iters ", total_iters);
  EMBER_CHECK(warmup_start_factor > 0 && warmup_start_factor <= 1,
              "WarmupCosineLR: "
              "warmup_start_factor ",
              warmup_start_factor, " must be in (0, 1]");
  initial_step();
}

double WarmupCosineLR::compute_lr(int64_t epoch, size_t group) const {
  const double base = base_lrs_[group];
  if (epoch < warmup_iters_)
    return base * (warmup_start_factor_ +
                   (1 - warmup_start_factor_) * double(epoch) / double(warmup_iters_));
  const double t = double(std::min(epoch, total_iters_) - warmup_iters_);
  const double period = double(total_iters_ - warmup_iters_);
  return eta_min_ + (base - eta_min_) * (1 + std::cos(std::numbers::pi * t / period)) / 2;
}

// ---- OneCycleLR
// -------------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
                       const OneCycleLROptions& options)
    : LRScheduler(optimizer), total_steps_(total_steps), options_(options) {
  const size_t groups = optimizer.num_param_groups();
  EMBER_CHECK(max_lrs.size() == 1 || max_lrs.size() == groups, "OneCycleLR: got ", max_lrs.size(),
              " max_lrs for ", groups, " parameter groups; give one, or one per group");
  EMBER_CHECK(total_steps > 0, "OneCycleLR: total_steps ", total_steps, " must be positive");
  EMBER_CHECK(options.pct_start() >= 0 && options.pct_start() <= 1, "OneCycleLR: pct_start ",
              options.pct_start(), " must be in [0, 1]");
  EMBER_CHECK(options.div_factor() > 0 && options.final_div_factor() > 0,
              "OneCycleLR: div_factor "
              "and final_div_factor must be positive");
  for (size_t g = 0; g < groups; ++g) {
    const double max_lr = max_lrs.size() == 1 ? max_lrs[0] : max_lrs[g];
    EMBER_CHECK(max_lr >= 0, "OneCycleLR: max_lr ", max_lr, " is negative");
    max_lrs_.push_back(max_lr);
    initial_lrs_.push_back(max_lr / options.div_factor());
    min_lrs_.push_back(initial_lrs_.back() / options.final_div_factor());
  }
  base_lrs_ = initial_lrs_;
  const double pct_steps = options.pct_start() * double(total_steps);
  const double base_m = options.base_momentum(), max_m = options.max_momentum();
  if (options.three_phase()) {
    phases_ = {{pct_steps - 1, Level::initial, Level::max, max_m, base_m},
               {2 * pct_steps - 2, Level::max, Level::initial, base_m, max_m},
               {double(total_steps) - 1, Level::initial, Level::min, max_m, max_m}};
  } else {
    phases_ = {{pct_steps - 1, Level::initial, Level::max, max_m, base_m},
               {double(total_steps) - 1, Level::max, Level::min, base_m, max_m}};
  }
  initial_step();
}

double OneCycleLR::level_lr(Level level, size_t group) const {
  switch (level) {
    case Level::initial:
      return initial_lrs_[group];
    case Level::max:
      return max_lrs_[group];
    case Level::min:
      return min_lrs_[group];
  }
  return 0;
}

std::pair<double, double> OneCycleLR::at(int64_t epoch, size_t group) const {
  EMBER_CHECK(epoch <= total_steps_, "OneCycleLR: tried to step ", epoch,
              " times; the specified "
              "number of total steps is ",
              total_steps_, " (make the scheduler with more steps)");
  const auto anneal =
      options_.anneal_strategy() == AnnealStrategy::cos ? cosine_anneal : linear_anneal;
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (double(epoch) <= phase.end_step || i + 1 == phases_.size()) {
      const double span = phase.end_step - start_step;
      // PyTorch divides by zero here (a phase of zero length); take the phase's end instead.
      const double pct = span != 0 ? (double(epoch) - start_step) / span : 1.0;
      return {anneal(level_lr(phase.start_lr, group), level_lr(phase.end_lr, group), pct),
              anneal(phase.start_momentum, phase.end_momentum, pct)};
    }
    start_step = phase.end_step;
  }
  return {0, 0};  // unreachable: the last phase always matches
}

double OneCycleLR::compute_lr(int64_t epoch, size_t group) const { return at(epoch, group).first; }

std::optional<double> OneCycleLR::compute_momentum(int64_t epoch, size_t group) const {
  if (!options_.cycle_momentum()) return std::nullopt;
  return at(epoch, group).second;
}

}  // namespace ember::optim
