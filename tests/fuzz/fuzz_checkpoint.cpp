// Fuzz target: the training-checkpoint loader. Arbitrary bytes are read with nn::Checkpoint::load
// and, when that succeeds, restored the way a training script resumes: the model's state dict, an
// Adam optimizer's state and config, a StepLR scheduler's state, a GradScaler and the RNG state.
// Every failure must be an ember::Error.
#include "fuzz_support.h"

using namespace ember;

namespace {
struct FuzzNetImpl : nn::Module {
  FuzzNetImpl() : nn::Module("FuzzNet") {
    fc = register_module("fc", nn::Linear(4, 3));
    bn = register_module("bn", nn::BatchNorm1d(3));
  }
  Tensor forward(const Tensor& x) { return bn->forward(fc->forward(x)); }
  nn::Linear fc{nullptr};
  nn::BatchNorm1d bn{nullptr};
};
EMBER_MODULE(FuzzNet);

// A model, optimizer, scheduler and scaler after two training steps (so every state exists).
struct Trainer {
  FuzzNet net;
  optim::Adam opt{net->parameters(), optim::AdamOptions(1e-2)};
  optim::StepLR sched{opt, 2, 0.5};
  nn::GradScaler scaler;
  Trainer() {
    for (int i = 0; i < 2; ++i) {
      opt.zero_grad();
      Tensor y = net->forward(randn({5, 4}));
      (y * y).mean().backward();
      opt.step();
      sched.step();
    }
  }
};
}  // namespace

namespace ember_fuzz {
void write_seeds(const std::string& dir) {
  manual_seed(2);
  Trainer t;
  nn::Checkpoint ck;
  ck.model = t.net->state_dict();
  ck.optimizer = t.opt.state_dict();
  ck.optimizer_config = t.opt.config_json();
  ck.scheduler = t.sched.state_json();
  ck.grad_scaler = t.scaler.state_dict();
  ck.step = 2;
  ck.rng = nn::capture_rng_state();
  ck.extra["epoch"] = "1";
  ck.save(dir + "/full.safetensors");
  nn::Checkpoint model_only;
  model_only.model = t.net->state_dict();
  model_only.save(dir + "/model_only.safetensors");
}
}  // namespace ember_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Trainer* trainer = [] {
    manual_seed(2);
    return new Trainer();
  }();
  const std::string path = ember_fuzz::write_file("in.safetensors", data, size);
  ember_fuzz::expect_only_ember_errors("Checkpoint::load", [&] {
    nn::Checkpoint ck = nn::Checkpoint::load(path);
    for (const auto& named : ck.model) ember_fuzz::touch(named.second);
    for (const auto& named : ck.optimizer) ember_fuzz::touch(named.second);
    // Each restore on its own: one failing must not hide the others.
    ember_fuzz::expect_only_ember_errors("Module::load_state_dict",
                                         [&] { trainer->net->load_state_dict(ck.model); });
    ember_fuzz::expect_only_ember_errors("Optimizer::load_state_dict", [&] {
      trainer->opt.load_state_dict(ck.optimizer, ck.optimizer_config);
    });
    ember_fuzz::expect_only_ember_errors("LRScheduler::load_state_json",
                                         [&] { trainer->sched.load_state_json(ck.scheduler); });
    ember_fuzz::expect_only_ember_errors("GradScaler::load_state_dict",
                                         [&] { trainer->scaler.load_state_dict(ck.grad_scaler); });
    ember_fuzz::expect_only_ember_errors("restore_rng_state",
                                         [&] { nn::restore_rng_state(ck.rng); });
  });
  return 0;
}
