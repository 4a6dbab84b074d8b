// examples/resnet: trains ResNet-18/34/50 on Fashion-MNIST (default: the IDX files of Debian's
// dataset-fashion-mnist package), CIFAR-10 (--dataset cifar10 --data DIR) or synthetic
// ImageNet-shaped data (--dataset synthetic, for throughput). GPU when present, else CPU.
// Progress line with loss, accuracy and images/s; CSV logs (per epoch and per logging interval)
// and a PNG plot (gnuplot) in --out;
// atomic checkpoints and --resume; --amp bf16|fp16, --channels-last, --graphs (CUDA graphs per
// input shape), data parallel under ember-launch (--ddp, or automatically when WORLD_SIZE > 1), and
// --random-resolution MIN:MAX (every training batch resized to a resolution drawn from a seeded
// generator: the varying-shape workload the algorithm cache's adaptive mode is for).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>

#include "common/algo_mode.h"
#include "common/cli_help.h"
#include "common/distributed_setup.h"
#include "common/progress.h"
#include "common/run_files.h"
#include "ember/distributed/ddp.h"
#include "ember/distributed/sync_batch_norm.h"
#include "ember/ember.h"
#include "ember/nn/graphed_step.h"
#include "ember/nn/nn.h"
#include "resnet/resnet.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

struct Config {
  std::string dataset = "fashion-mnist", data, arch = "resnet18", device = "auto";
  std::string schedule = "cosine", amp = "none", out = "runs/resnet", checkpoint, algo_mode;
  std::string random_resolution;  // "MIN:MAX", or empty
  int64_t batch_size = 128, epochs = 15, train_limit = 0, test_limit = 0, max_steps = 0;
  int64_t workers = 2, log_interval = 50, synthetic_size = 224, synthetic_batches = 50;
  int64_t width = 64;  // the first stage's channels
  double lr = 0.1, momentum = 0.9, weight_decay = 5e-4, warmup_epochs = 1, label_smoothing = 0;
  bool channels_last = false, graphs = false, ddp = false, sync_bn = false, resume = false,
       augment = true;
  uint64_t seed = 0;
};

struct Data {
  std::shared_ptr<data::Dataset> train, test;
  int64_t channels = 1, classes = 10;
  std::string stem = "cifar";
  std::vector<double> mean, std;
};

// The first n examples of a tensor dataset (for quick runs).
std::shared_ptr<data::Dataset> head(std::shared_ptr<data::TensorDataset> d, int64_t n) {
  if (n <= 0 || n >= d->size()) return d;
  std::vector<Tensor> t;
  for (const Tensor& x : d->tensors()) t.push_back(x.narrow(0, 0, n).contiguous());
  return std::make_shared<data::TensorDataset>(t);
}

Data load_data(const Config& c) {
  Data d;
  if (c.dataset == "fashion-mnist" || c.dataset == "mnist") {
    std::string folder = c.data.empty() ? data::default_fashion_mnist_folder() : c.data;
    d.train = head(std::make_shared<data::MNIST>(folder, data::Split::train), c.train_limit);
    d.test = head(std::make_shared<data::MNIST>(folder, data::Split::test), c.test_limit);
    d.channels = 1;
    d.mean = {0.2860};
    d.std = {0.3530};
  } else if (c.dataset == "cifar10") {
    EMBER_CHECK(!c.data.empty(),
                "--dataset cifar10 needs --data DIR (the cifar-10-batches-bin folder)");
    d.train = head(std::make_shared<data::CIFAR10>(c.data, data::Split::train), c.train_limit);
    d.test = head(std::make_shared<data::CIFAR10>(c.data, data::Split::test), c.test_limit);
    d.channels = 3;
    d.mean = {0.4914, 0.4822, 0.4465};
    d.std = {0.2470, 0.2435, 0.2616};
  } else if (c.dataset == "synthetic") {
    // ImageNet-shaped random images for throughput runs (no accuracy to speak of).
    const int64_t n = c.batch_size * c.synthetic_batches, s = c.synthetic_size;
    Generator gen(Device::cpu(), c.seed + 1);
    auto ds = std::make_shared<data::TensorDataset>(
        std::vector<Tensor>{randn({n, 3, s, s}, TensorOptions(), &gen),
                            randint(0, 1000, {n}, TensorOptions(DType::i64), &gen)});
    d.train = ds;
    d.test = head(ds, c.batch_size);
    d.channels = 3;
    d.classes = 1000;
    d.stem = s >= 128 ? "imagenet" : "cifar";
  } else {
    EMBER_THROW(bad_param, "unknown --dataset '", c.dataset,
                "' (fashion-mnist, mnist, cifar10, synthetic)");
  }
  return d;
}

// "MIN:MAX" -> {MIN, MAX}, both >= 8 (the CIFAR stem's three stride-2 stages need 8 pixels).
std::pair<int64_t, int64_t> parse_resolution_range(const std::string& s) {
  const size_t colon = s.find(':');
  int64_t lo = 0, hi = 0;
  try {
    EMBER_CHECK(colon != std::string::npos, "");
    lo = std::stoll(s.substr(0, colon));
    hi = std::stoll(s.substr(colon + 1));
  } catch (const std::exception&) {
    lo = hi = 0;
  }
  EMBER_CHECK(lo >= 8 && hi >= lo,
              "--random-resolution expects MIN:MAX with 8 <= MIN <= MAX, got '", s, "'");
  return {lo, hi};
}

// Nearest-neighbour resampling of NCHW images to size x size: pixel i of the output takes pixel
// floor(i * in / size) of the input, along each spatial dim (upsamples and downsamples alike).
Tensor resize_nearest(const Tensor& x, int64_t size) {
  Tensor out = x;
  for (int64_t dim : {2, 3}) {
    const int64_t in = x.size(dim);
    if (in == size) continue;
    std::vector<double> idx(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) idx[size_t(i)] = double(i * in / size);
    out =
        index_select(out, dim, from_vector(idx, {size}, TensorOptions(DType::i64)).to(x.device()));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Ember ResNet training (Fashion-MNIST by default)"};
  examples::use_help_format(app);
  app.add_option("--dataset", c.dataset, "fashion-mnist, mnist, cifar10 or synthetic");
  app.add_option("--data", c.data, "dataset folder (default: Debian's Fashion-MNIST files)");
  app.add_option("--arch", c.arch, "resnet10, resnet18, resnet34 or resnet50");
  app.add_option("--width", c.width, "the first stage's channels (64: torchvision's ResNets)");
  app.add_option("--device", c.device, "auto, cpu or cuda[:N]");
  app.add_option("--batch-size", c.batch_size, "per process");
  app.add_option("--epochs", c.epochs, "training epochs (without a GPU: 1 unless given)");
  app.add_option("--lr", c.lr, "peak learning rate (SGD, Nesterov momentum)");
  app.add_option("--momentum", c.momentum, "SGD momentum (Nesterov when above 0)");
  app.add_option("--weight-decay", c.weight_decay, "L2 weight decay");
  app.add_option("--schedule", c.schedule,
                 "cosine (with linear warm-up), step, onecycle or constant");
  app.add_option("--warmup-epochs", c.warmup_epochs, "epochs of linear warm-up (cosine)");
  app.add_option("--label-smoothing", c.label_smoothing, "cross-entropy label smoothing");
  app.add_option("--amp", c.amp, "none, bf16 or fp16 (fp16 uses a GradScaler)");
  app.add_flag("--channels-last", c.channels_last, "NHWC activations and weights");
  app.add_flag("--graphs", c.graphs, "capture training steps as CUDA graphs (one per input shape)");
  app.add_option("--algo-mode", c.algo_mode, examples::kAlgoModeHelp);
  app.add_flag("--ddp", c.ddp,
               "data parallel (automatic when started by ember-launch with WORLD_SIZE > 1)");
  app.add_flag("--sync-bn", c.sync_bn,
               "with data parallel: batch-norm statistics over all ranks (SyncBatchNorm)");
  app.add_option("--train-limit", c.train_limit, "use only the first N training images");
  app.add_option("--test-limit", c.test_limit, "use only the first N test images");
  app.add_option("--max-steps", c.max_steps, "stop each epoch after N steps (throughput runs)");
  app.add_option("--workers", c.workers, "data loader threads");
  app.add_option("--log-interval", c.log_interval, "steps between progress updates");
  app.add_option("--synthetic-size", c.synthetic_size, "image size of --dataset synthetic");
  app.add_option("--out", c.out, "folder for log.csv, steps.csv and curves.png");
  app.add_option("--checkpoint", c.checkpoint,
                 "save a checkpoint to this file after every epoch (atomic; its folder is "
                 "created at start)");
  app.add_flag("--resume", c.resume, "continue from --checkpoint");
  app.add_flag("!--no-augment", c.augment, "no random crop / flip");
  app.add_option("--seed", c.seed, "seed of the weights, shuffling and augmentation");
  app.add_option(
      "--random-resolution", c.random_resolution,
      "MIN:MAX: resize each training batch (nearest neighbour) to a resolution drawn "
      "from [MIN, MAX] by a generator seeded with --seed (varying input shapes; "
      "evaluation keeps the dataset's size; with --graphs, rounded up to a multiple of 8)");
  CLI11_PARSE(app, argc, argv);

  try {
    examples::prepare_checkpoint_path(c.checkpoint);
    const examples::DistributedSetup dist = examples::setup_distributed(c.ddp);
    const std::shared_ptr<distributed::ProcessGroup>& group = dist.group;
    const int world = dist.world;
    const Device device = examples::pick_device(c.device);
    manual_seed(c.seed);
    const bool main_rank = dist.main_rank();
    std::optional<dispatch::AlgoModeGuard> algo_mode;  // this thread runs every step
    if (const auto mode = examples::algo_mode_for(c.algo_mode, device)) algo_mode.emplace(*mode);
    // Without a GPU, a full run takes hours: unless told otherwise, make it a short run that still
    // learns: a narrow ResNet-10 (one block per stage, width 16: about a thirtieth of ResNet-18's
    // compute per image) for one epoch on 10000 training images, without augmentation and with a
    // short warm-up; sized so that a 2-core machine passes 80% test accuracy well within 2 minutes
    // of training.
    if (device.is_cpu() && c.dataset != "synthetic" && app.count("--epochs") == 0 &&
        app.count("--train-limit") == 0) {
      c.epochs = 1;
      c.train_limit = 10000;
      if (app.count("--arch") == 0) c.arch = "resnet10";
      if (app.count("--width") == 0) c.width = 16;
      if (app.count("--batch-size") == 0) c.batch_size = 64;
      if (app.count("--warmup-epochs") == 0) c.warmup_epochs = 0.1;
      if (app.count("--log-interval") == 0) c.log_interval = 10;
      c.augment = false;
      if (main_rank)
        std::printf(
            "no GPU: a short CPU run (%s width %lld, 1 epoch on %lld images, no augmentation; pass "
            "--epochs / --train-limit / --arch / --width for more)\n",
            c.arch.c_str(), (long long)c.width, (long long)c.train_limit);
    }

    Data d = load_data(c);
    resnet::ResNetOptions ro;
    ro.arch = c.arch;
    ro.width = c.width;
    ro.stem = d.stem;
    ro.in_channels = d.channels;
    ro.num_classes = d.classes;
    auto model = std::make_shared<resnet::ResNetImpl>(ro);
    model->to(device);
    if (c.channels_last) model->to(MemoryFormat::channels_last);
    if (c.sync_bn && !group && main_rank) std::printf("--sync-bn has no effect without --ddp\n");
    if (c.sync_bn && group) nn::convert_sync_batchnorm(*model, group);
    std::unique_ptr<distributed::DistributedDataParallel> ddp;
    if (group) ddp = std::make_unique<distributed::DistributedDataParallel>(model, group);

    optim::SGD opt(model->parameters(), optim::SGDOptions(c.lr)
                                            .momentum(c.momentum)
                                            .nesterov(c.momentum > 0)
                                            .weight_decay(c.weight_decay));
    data::DataLoaderOptions lo(c.batch_size);
    lo.shuffle(true).drop_last(false).num_workers(c.workers).seed(c.seed).device(device).pin_memory(
        device.is_cuda());
    if (c.augment && c.dataset != "synthetic") {
      const int64_t size = c.dataset == "cifar10" ? 32 : 28;
      lo.transform(data::compose({data::RandomCrop(size, 4), data::RandomHorizontalFlip(),
                                  data::Normalize(d.mean, d.std)}));
    } else if (!d.mean.empty()) {
      lo.transform(data::Normalize(d.mean, d.std));
    }
    // Each rank reads its own fixed shard of the training set, reshuffled every epoch.
    data::DataLoader train_loader(examples::shard_for_rank(d.train, dist, c.seed), lo);
    data::DataLoaderOptions to(c.batch_size);
    to.num_workers(c.workers).device(device);
    if (!d.mean.empty()) to.transform(data::Normalize(d.mean, d.std));
    data::DataLoader test_loader(d.test, to);

    int64_t steps_per_epoch = train_loader.num_batches();
    if (c.max_steps > 0) steps_per_epoch = std::min(steps_per_epoch, c.max_steps);
    const int64_t total_steps = std::max<int64_t>(1, steps_per_epoch * c.epochs);
    std::unique_ptr<optim::LRScheduler> sched;
    if (c.schedule == "cosine")
      sched = std::make_unique<optim::WarmupCosineLR>(
          opt, std::min<int64_t>(int64_t(c.warmup_epochs * steps_per_epoch), total_steps / 2),
          total_steps, 0.01);
    else if (c.schedule == "step")
      sched = std::make_unique<optim::StepLR>(opt, std::max<int64_t>(1, total_steps / 3), 0.1);
    else if (c.schedule == "onecycle")
      sched = std::make_unique<optim::OneCycleLR>(opt, c.lr, total_steps);
    else
      EMBER_CHECK(c.schedule == "constant", "unknown --schedule '", c.schedule, "'");

    const DType amp_dtype = c.amp == "fp16" ? DType::f16 : DType::bf16;
    EMBER_CHECK(c.amp == "none" || c.amp == "bf16" || c.amp == "fp16",
                "--amp must be none, bf16 or fp16");
    const bool amp = c.amp != "none";
    nn::GradScaler scaler(nn::GradScalerOptions().enabled(c.amp == "fp16"));

    int64_t start_epoch = 0, global_step = 0;
    if (c.resume) {
      EMBER_CHECK(!c.checkpoint.empty() && fs::exists(c.checkpoint),
                  "--resume needs an existing --checkpoint, got '", c.checkpoint, "'");
      auto ck = nn::Checkpoint::load(c.checkpoint);
      // All or nothing: a refused part leaves the model, optimizer and schedule untouched.
      ck.restore(*model, &opt, ck.scheduler.empty() ? nullptr : sched.get());
      global_step = ck.step;
      const auto epoch = ck.extra.find("epoch");
      EMBER_CHECK(epoch != ck.extra.end(), "--resume: ", c.checkpoint,
                  " has no \"epoch\" entry; it was not written by this example");
      start_epoch = int64_t(std::strtoll(epoch->second.c_str(), nullptr, 10));
      if (main_rank)
        std::printf("resumed from %s at epoch %lld, step %lld\n", c.checkpoint.c_str(),
                    (long long)start_epoch, (long long)global_step);
    }

    // One training step on a batch: returns {loss, number correct} as device tensors (no sync).
    auto train_step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
      Tensor x = c.channels_last ? in[0].contiguous(MemoryFormat::channels_last) : in[0];
      Tensor logits, loss;
      {
        nn::AutocastGuard ac(amp_dtype, amp);
        logits = model->forward(x);
        loss = cross_entropy(logits.to(DType::f32), in[1],
                             CrossEntropyOptions().with_label_smoothing(c.label_smoothing));
      }
      if (scaler.is_enabled()) {
        scaler.scale(loss).backward();
        scaler.step(opt);
        scaler.update();
      } else {
        loss.backward();
        opt.step();
      }
      // Dropped (set_to_none), as PyTorch does: the next backward, eager or replayed, writes fresh
      // gradients instead of a fill and an add per parameter. With DDP they stay: they are views of
      // the reducer's buckets, which set_to_none would replace with copies every step.
      opt.zero_grad(/*set_to_none=*/!ddp);
      autograd::NoGradGuard ng;
      Tensor correct = sum(eq(argmax(logits, 1), in[1]).to(DType::f32));
      return {loss.detach(), correct};
    };
    nn::GraphedStepOptions go;
    go.enabled = c.graphs && device.is_cuda();
    nn::GraphedStep step(train_step, go);
    // --random-resolution: one resolution per training batch, from its own seeded generator (the
    // same sequence every run, whatever the data loader's threads do).
    std::optional<std::pair<int64_t, int64_t>> res_range;
    if (!c.random_resolution.empty()) res_range = parse_resolution_range(c.random_resolution);
    std::mt19937_64 res_rng(c.seed * 7919 + 17);

    if (main_rank) {
      fs::create_directories(c.out);
      std::printf(
          "%s on %s (%s stem, %lld parameters), %s, batch %lld x %d rank(s), %lld "
          "steps/epoch%s%s%s, "
          "%s algorithms\n",
          c.arch.c_str(), device.str().c_str(), d.stem.c_str(), (long long)model->num_parameters(),
          c.dataset.c_str(), (long long)c.batch_size, world, (long long)steps_per_epoch,
          amp ? (" amp " + c.amp).c_str() : "", c.channels_last ? " channels_last" : "",
          go.enabled ? " cuda-graphs" : "",
          dispatch::algo_mode_name(dispatch::current_algo_settings().mode));
    }
    // log.csv: one row per epoch; steps.csv: one per logging interval (x: fractional epochs).
    examples::CsvLog csv, steps_csv;
    if (main_rank) {
      csv = examples::CsvLog(c.out + "/log.csv",
                             "epoch,step,train_loss,train_acc,test_acc,images_per_s,seconds",
                             c.resume);
      steps_csv =
          examples::CsvLog(c.out + "/steps.csv", "epoch,step,train_loss,train_acc", c.resume);
    }
    examples::ProgressLine& progress = examples::progress_line();

    for (int64_t epoch = start_epoch; epoch < c.epochs; ++epoch) {
      model->train();
      train_loader.set_epoch(epoch);
      Tensor loss_sum = zeros({}, TensorOptions().with_device(device));
      Tensor correct_sum = zeros({}, TensorOptions().with_device(device));
      int64_t seen = 0, step_in_epoch = 0;
      auto t0 = std::chrono::steady_clock::now();
      for (data::Batch& batch : train_loader) {
        if (step_in_epoch >= steps_per_epoch) break;
        // Synchronized batch norm keeps the running statistics equal on every rank already.
        if (ddp && !c.sync_bn) ddp->sync_buffers();
        Tensor images = batch[0];
        if (res_range) {
          int64_t r =
              std::uniform_int_distribution<int64_t>(res_range->first, res_range->second)(res_rng);
          // With --graphs, resolutions are bucketed (rounded up to a multiple of 8), so that a few
          // graphs serve every draw instead of one capture per resolution.
          if (go.enabled) r = (r + 7) / 8 * 8;
          images = resize_nearest(images, r);
        }
        auto out = step({images, batch[1]});
        examples::algo_step_boundary();  // adaptive mode: choices awaiting a timing may be timed
        {
          autograd::NoGradGuard ng;
          add_(loss_sum, out[0] * double(batch[0].size(0)));
          add_(correct_sum, out[1]);
        }
        if (sched) sched->step();
        seen += batch[0].size(0);
        ++step_in_epoch;
        ++global_step;
        if (main_rank &&
            (step_in_epoch % c.log_interval == 0 || step_in_epoch == steps_per_epoch)) {
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const int width = 30, done = int(width * step_in_epoch / steps_per_epoch);
          const double loss_now = loss_sum.item() / seen, acc_now = correct_sum.item() / seen;
          progress.show("epoch %lld/%lld [%s%s] %lld/%lld loss %.4f acc %.2f%% %.0f img/s",
                        (long long)epoch + 1, (long long)c.epochs,
                        std::string(size_t(done), '#').c_str(),
                        std::string(size_t(width - done), '.').c_str(), (long long)step_in_epoch,
                        (long long)steps_per_epoch, loss_now, 100.0 * acc_now,
                        seen * world / std::max(secs, 1e-9));
          steps_csv.row({double(epoch) + double(step_in_epoch) / double(steps_per_epoch),
                         double(global_step), loss_now, acc_now});
        }
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Evaluation on the test set.
      model->eval();
      double correct = 0, total = 0;
      {
        autograd::NoGradGuard ng;
        nn::AutocastGuard ac(amp_dtype, amp);
        for (data::Batch& batch : test_loader) {
          Tensor x = c.channels_last ? batch[0].contiguous(MemoryFormat::channels_last) : batch[0];
          correct += sum(eq(argmax(model->forward(x), 1), batch[1]).to(DType::f32)).item();
          total += double(batch[0].size(0));
        }
      }
      const double train_loss = loss_sum.item() / std::max<int64_t>(seen, 1);
      const double train_acc = correct_sum.item() / std::max<int64_t>(seen, 1);
      const double test_acc = correct / std::max(total, 1.0);
      if (main_rank) {
        progress.finish(
            "epoch %lld/%lld: train loss %.4f acc %.2f%% | test acc %.2f%% | %.0f img/s | %.1f s",
            (long long)epoch + 1, (long long)c.epochs, train_loss, 100 * train_acc, 100 * test_acc,
            seen * world / secs, secs);
        csv.row({double(epoch + 1), double(global_step), train_loss, train_acc, test_acc,
                 seen * world / secs, secs});
        if (!c.checkpoint.empty()) {
          nn::Checkpoint ck;
          ck.model = model->state_dict();
          ck.optimizer = opt.state_dict();
          ck.optimizer_config = opt.config_json();
          if (sched) ck.scheduler = sched->state_json();
          ck.step = global_step;
          ck.rng = nn::capture_rng_state();
          ck.extra["epoch"] = std::to_string(epoch + 1);
          ck.extra["arch"] = c.arch;
          ck.save(c.checkpoint);
        }
      }
    }
    if (main_rank) {
      csv.close();
      steps_csv.close();
      // Training curves per logging interval (steps.csv), test accuracy per epoch (log.csv).
      examples::write_plot(
          c.out, "epoch",
          {{"loss", {{"steps.csv", 1, 3, "train"}}, ""},
           {"accuracy",
            {{"steps.csv", 1, 4, "train"}, {"log.csv", 1, 5, "test", /*points=*/true}},
            "[0:1]"}});
      const auto& s = step.stats();
      if (go.enabled)
        std::printf("cuda graphs: %llu captured, %llu replays, %llu eager steps, %llu fallbacks\n",
                    (unsigned long long)s.captures, (unsigned long long)s.replays,
                    (unsigned long long)s.eager_steps, (unsigned long long)s.fallbacks);
      const dispatch::AlgoCacheStats as = dispatch::algo_cache().stats();
      std::printf(
          "algorithms: %llu shapes timed (%.0f ms), %llu borrowed, %llu by heuristic, %llu hits\n",
          (unsigned long long)as.benchmarks, as.benchmark_ms, (unsigned long long)as.borrowed,
          (unsigned long long)as.heuristic_choices, (unsigned long long)as.hits);
      std::printf("log: %s/log.csv, plot: %s/curves.png\n", c.out.c_str(), c.out.c_str());
    }
  } catch (const std::exception& e) {
    examples::print_error(e.what());
    return 1;
  }
  return 0;
}
