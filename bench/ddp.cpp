// DDP overhead at world size 1 (GPU): the same ResNet training step (examples/resnet; forward,
// cross-entropy, backward, SGD with momentum) timed on a plain model and on a model wrapped in
// DistributedDataParallel over a one-rank NCCL group (no launcher or rendezvous needed: a group of
// one skips the TCP exchange). The difference is what DDP itself costs: the gradient hooks, the
// event waits between the streams and the (trivial) one-rank all-reduces; the gradients are views
// of the buckets, so after the first step nothing is copied (grads_copied counts the copies over
// the whole run: one per parameter in the first step, and again at the bucket rebuild).
// The goal is under 3%. Eager and CUDA-graph steps are both measured
// (DDP must stay capturable). Prints one JSON line per mode:
//   {"bench":"ddp_overhead","impl":"ember","mode":"eager",...,"overhead_pct":...}
// Options: --arch resnet18|resnet34|resnet50 --stem imagenet|cifar --batch N --size S
//          --iters N --reps N --amp none|bf16 --channels-last
// Without --arch it measures resnet18 and resnet50 (the model), imagenet stem, 224x224,
// batch 64, float32.
#include "ember/distributed/ddp.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/graphed_step.h"
#include "ember/nn/nn.h"
#include "resnet/resnet.h"
#include "timing.h"

using namespace ember;

namespace {

struct Config {
  std::vector<std::string> archs = {"resnet18", "resnet50"};
  std::string stem = "imagenet", amp = "none";
  int64_t batch = 64, size = 224;
  int iters = 10, reps = 7;
  bool channels_last = false;
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      EMBER_CHECK(i + 1 < argc, "bench_ddp: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--arch")
      c.archs = {value()};
    else if (a == "--stem")
      c.stem = value();
    else if (a == "--amp")
      c.amp = value();
    else if (a == "--batch")
      c.batch = std::stoll(value());
    else if (a == "--size")
      c.size = std::stoll(value());
    else if (a == "--iters")
      c.iters = std::stoi(value());
    else if (a == "--reps")
      c.reps = std::stoi(value());
    else if (a == "--channels-last")
      c.channels_last = true;
    else
      EMBER_THROW(bad_param, "bench_ddp: unknown option '", a, "'");
  }
  EMBER_CHECK(c.amp == "none" || c.amp == "bf16", "bench_ddp: --amp must be none or bf16");
  return c;
}

// One model with its optimizer and its training step (DDP or not).
struct Trainer {
  std::shared_ptr<resnet::ResNetImpl> model;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<nn::GraphedStep> step;
};

Trainer make_trainer(const Config& c, const resnet::ResNetOptions& ro, Device device,
                     const std::shared_ptr<distributed::ProcessGroup>& group, bool graphs) {
  Trainer t;
  manual_seed(0);  // the same weights for every variant
  t.model = std::make_shared<resnet::ResNetImpl>(ro);
  t.model->to(device);
  if (c.channels_last) t.model->to(MemoryFormat::channels_last);
  if (group) t.ddp = std::make_unique<distributed::DistributedDataParallel>(t.model, group);
  t.opt =
      std::make_unique<optim::SGD>(t.model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  const bool amp = c.amp == "bf16";
  auto fn = [model = t.model.get(), opt = t.opt.get(), amp](const std::vector<Tensor>& in) {
    Tensor loss;
    {
      nn::AutocastGuard ac(DType::bf16, amp);
      loss = cross_entropy(model->forward(in[0]).to(DType::f32), in[1]);
    }
    loss.backward();
    opt->step();
    opt->zero_grad(false);  // keep gradient memory: a captured step must not reallocate it
    return std::vector<Tensor>{loss.detach()};
  };
  nn::GraphedStepOptions go;
  go.enabled = graphs;
  t.step = std::make_unique<nn::GraphedStep>(fn, go);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Config c = parse(argc, argv);
    if (!cuda::is_available() || !distributed::nccl_available()) {
      std::printf("{\"bench\":\"ddp_overhead\",\"skipped\":\"needs a GPU and NCCL\"}\n");
      return 0;
    }
    const Device device = Device::cuda(0);
    distributed::InitOptions io;
    io.backend = "nccl";
    io.rank = 0;
    io.world_size = 1;
    auto group = distributed::init_process_group(io);
    for (const std::string& arch : c.archs) {
      resnet::ResNetOptions ro;
      ro.arch = arch;
      ro.stem = c.stem;
      ro.num_classes = c.stem == "imagenet" ? 1000 : 10;
      manual_seed(1);
      Tensor x = randn({c.batch, 3, c.size, c.size}, TensorOptions().with_device(device));
      if (c.channels_last) x = x.contiguous(MemoryFormat::channels_last);
      Tensor y =
          randint(0, ro.num_classes, {c.batch}, TensorOptions(DType::i64).with_device(device));
      const std::vector<Tensor> batch = {x, y};
      for (const bool graphs : {false, true}) {
        Trainer plain = make_trainer(c, ro, device, nullptr, graphs);
        Trainer ddp = make_trainer(c, ro, device, group, graphs);
        // Warm-up: algorithm choices, allocator, bucket rebuild, graph capture.
        for (int i = 0; i < 5; ++i) {
          (*plain.step)(batch);
          (*ddp.step)(batch);
        }
        // Alternate the two so clock and thermal drift hit both alike.
        std::vector<double> plain_ms, ddp_ms;
        for (int r = 0; r < c.reps; ++r) {
          plain_ms.push_back(bench::mean_ms([&] { (*plain.step)(batch); }, c.iters));
          ddp_ms.push_back(bench::mean_ms([&] { (*ddp.step)(batch); }, c.iters));
        }
        const double p = bench::median(plain_ms), d = bench::median(ddp_ms);
        std::printf(
            "{\"bench\":\"ddp_overhead\",\"impl\":\"ember\",\"mode\":\"%s\",\"arch\":\"%s\","
            "\"stem\":\"%s\",\"batch\":%lld,\"size\":%lld,\"amp\":\"%s\",\"channels_last\":%s,"
            "\"world_size\":1,\"backend\":\"nccl\",\"buckets\":%zu,\"grads_copied\":%llu,"
            "\"graph_fallbacks\":%llu,"
            "\"plain_ms\":%.4f,\"ddp_ms\":%.4f,\"overhead_pct\":%.3f}\n",
            graphs ? "cuda_graph" : "eager", arch.c_str(), c.stem.c_str(), (long long)c.batch,
            (long long)c.size, c.amp.c_str(), c.channels_last ? "true" : "false",
            ddp.ddp->stats().num_buckets, (unsigned long long)ddp.ddp->stats().grads_copied,
            (unsigned long long)(plain.step->stats().fallbacks + ddp.step->stats().fallbacks), p, d,
            100.0 * (d - p) / p);
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
}
