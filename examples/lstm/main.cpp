// examples/lstm: two recurrent models.
//   --task charlm (default): a character language model (Embedding -> 2-layer LSTM -> Linear)
//     trained on a text corpus (default: Debian's fortunes), printing generated text (valid UTF-8)
//     as it trains and the validation loss on a held-out tail of the corpus.
//   --task fashion: an LSTM classifier reading Fashion-MNIST images row by row (28 steps of 28
//     pixels), with a progress line during each epoch, reporting test accuracy.
// GPU when present, else a short CPU run. Adam; --amp bf16; --graphs captures the training step
// (charlm). CSV logs (per evaluation or epoch, and per logging interval) and curves.png in --out;
// --checkpoint (after every evaluation or epoch; atomic) and --resume, as examples/resnet. Data
// parallel under ember-launch or mpirun (--ddp, or automatically when WORLD_SIZE > 1): each rank
// trains on its shard of the data, DistributedDataParallel averages the gradients, the validation
// loss / test accuracy are reduced over the ranks, and rank 0 alone prints and writes files.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "common/algo_mode.h"
#include "common/cli_help.h"
#include "common/distributed_setup.h"
#include "common/progress.h"
#include "common/run_files.h"
#include "common/utf8.h"
#include "ember/distributed/ddp.h"
#include "ember/ember.h"
#include "ember/nn/graphed_step.h"
#include "ember/nn/nn.h"

using namespace ember;

namespace {

struct Config {
  std::string task = "charlm", corpus_path, device_name = "auto", amp = "none", data_dir, algo;
  std::string out = "runs/lstm", checkpoint;
  int64_t steps = 2000, batch = 64, seq_len = 128, hidden = 512, layers = 2, embed_dim = 256;
  int64_t sample_every = 250, eval_every = 250, epochs = 5, log_interval = 10;
  double lr = 2e-3, dropout = 0.0, clip = 1.0;
  bool graphs = false, ddp_flag = false, resume = false;
  uint64_t seed = 0;
};

struct CharLMImpl : nn::Module {
  nn::Embedding embed{nullptr};
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
  CharLMImpl(int64_t vocab, int64_t embed_dim, int64_t hidden, int64_t layers, double dropout)
      : nn::Module("CharLM") {
    embed = register_module("embed", nn::Embedding(vocab, embed_dim));
    lstm = register_module("lstm", nn::LSTM(nn::LSTMOptions(embed_dim, hidden)
                                                .num_layers(layers)
                                                .batch_first(true)
                                                .dropout(dropout)));
    head = register_module("head", nn::Linear(hidden, vocab));
  }
  // tokens [B, T] -> logits [B, T, vocab], and the final (h, c).
  RnnResult forward(const Tensor& tokens, const Tensor& h0 = {}, const Tensor& c0 = {}) {
    RnnResult r = lstm->forward(embed->forward(tokens), h0, c0);
    r.output = head->forward(r.output);
    return r;
  }
};

// Fashion-MNIST row by row: 28 steps of 28 pixels -> LSTM(28, hidden) -> Linear on the last
// step's output. One module, so that DistributedDataParallel can wrap it.
struct RowClassifierImpl : nn::Module {
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
  explicit RowClassifierImpl(int64_t hidden) : nn::Module("RowClassifier") {
    lstm = register_module("lstm", nn::LSTM(nn::LSTMOptions(28, hidden).batch_first(true)));
    head = register_module("head", nn::Linear(hidden, 10));
  }
  // images [B, 1, 28, 28] -> logits [B, 10].
  Tensor forward(const Tensor& images) {
    Tensor rows = images.reshape({images.size(0), 28, 28});
    return head->forward(lstm->forward(rows).output.select(1, 27));
  }
};

// Samples about `n` bytes of text, feeding one at a time and carrying the LSTM state. A
// character cut off at the end is completed (up to 3 more bytes), and any byte sequence that is
// not valid UTF-8 is replaced by U+FFFD, so the text always prints.
std::string sample(CharLMImpl& model, const data::TextCorpus& corpus, Device device, int64_t n,
                   double temperature, Generator& gen) {
  autograd::NoGradGuard ng;
  model.eval();
  std::string out = "\n";
  Tensor token = corpus.encode(out).reshape({1, 1}).to(device);
  Tensor h, c;
  for (int64_t i = 0; i < n + 3 && (i < n || examples::utf8_incomplete_tail(out) > 0); ++i) {
    RnnResult r = model.forward(token, h, c);
    h = r.h_n;
    c = r.c_n;
    Tensor probs = softmax(r.output.reshape({-1}).to(DType::f32) / temperature, 0).cpu();
    // Inverse-CDF draw from the categorical distribution.
    const double u = rand({1}, TensorOptions(DType::f64), &gen).item();
    std::vector<double> p = probs.to_vector();
    int64_t next = int64_t(p.size()) - 1;
    double acc = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      acc += p[k];
      if (u < acc) {
        next = int64_t(k);
        break;
      }
    }
    out += corpus.vocabulary()[size_t(next)];
    token = full({1, 1}, double(next), TensorOptions(DType::i64).with_device(device));
  }
  model.train();
  return examples::sanitize_utf8(out);
}

// The reduction of a per-rank value over the ranks (in place, on the value's device); a single
// process keeps its own.
void reduce_over_ranks(const examples::DistributedSetup& dist, Tensor& value,
                       distributed::ReduceOp op) {
  if (dist.group) dist.group->all_reduce(value, op);
}

// Saves the model, the optimizer, the RNG state and `position` (the task's progress counter,
// "epoch" or "step") to --checkpoint.
void save_checkpoint(const Config& c, nn::Module& model, optim::Optimizer& opt, int64_t step,
                     const char* position, int64_t value) {
  if (c.checkpoint.empty()) return;
  nn::Checkpoint ck;
  ck.model = model.state_dict();
  ck.optimizer = opt.state_dict();
  ck.optimizer_config = opt.config_json();
  ck.step = step;
  ck.rng = nn::capture_rng_state();
  ck.extra[position] = std::to_string(value);
  ck.extra["task"] = c.task;
  ck.save(c.checkpoint);
}

// --resume: restores what save_checkpoint wrote (all or nothing) and returns `position`.
int64_t resume_checkpoint(const Config& c, nn::Module& model, optim::Optimizer& opt,
                          const char* position, bool main_rank) {
  EMBER_CHECK(!c.checkpoint.empty() && std::filesystem::exists(c.checkpoint),
              "--resume needs an existing --checkpoint, got '", c.checkpoint, "'");
  const nn::Checkpoint ck = nn::Checkpoint::load(c.checkpoint);
  const auto task = ck.extra.find("task");
  const auto pos = ck.extra.find(position);
  EMBER_CHECK(task != ck.extra.end() && task->second == c.task && pos != ck.extra.end(),
              "--resume: ", c.checkpoint, " was not written by --task ", c.task,
              " of this example (no \"", position, "\" entry)");
  ck.restore(model, &opt);
  const int64_t value = std::strtoll(pos->second.c_str(), nullptr, 10);
  if (main_rank)
    std::printf("resumed from %s at %s %lld\n", c.checkpoint.c_str(), position, (long long)value);
  return value;
}

// --task fashion. `limit`: at most that many training steps per epoch and about 2000 test images
// per rank (0: all).
void run_fashion(const Config& c, const examples::DistributedSetup& dist, Device device,
                 int64_t limit) {
  const bool main_rank = dist.main_rank();
  const TensorOptions on_device_f64 = TensorOptions(DType::f64).with_device(device);
  std::string folder = c.data_dir.empty() ? data::default_fashion_mnist_folder() : c.data_dir;
  auto train = std::make_shared<data::MNIST>(folder, data::Split::train);
  auto test = std::make_shared<data::MNIST>(folder, data::Split::test);
  auto model = std::make_shared<RowClassifierImpl>(c.hidden);
  model->to(device);
  optim::Adam opt(model->parameters(), optim::AdamOptions(c.lr));
  const int64_t start_epoch =
      c.resume ? resume_checkpoint(c, *model, opt, "epoch", main_rank) : int64_t(0);
  // Broadcasts rank 0's parameters, then averages the gradients of every backward.
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (dist.group) ddp = std::make_unique<distributed::DistributedDataParallel>(model, dist.group);
  data::DataLoader loader(
      examples::shard_for_rank(train, dist, c.seed),
      data::DataLoaderOptions(c.batch).shuffle(true).seed(c.seed).device(device).transform(
          data::Normalize({0.2860}, {0.3530})));
  data::DataLoader test_loader(
      examples::shard_for_rank(test, dist, c.seed),
      data::DataLoaderOptions(512).device(device).transform(data::Normalize({0.2860}, {0.3530})));
  int64_t steps_per_epoch = loader.num_batches();
  if (limit) steps_per_epoch = std::min(steps_per_epoch, limit);
  if (main_rank)
    std::printf("row-by-row LSTM on Fashion-MNIST, batch %lld x %d rank(s), %lld steps/epoch, %s\n",
                (long long)c.batch, dist.world, (long long)steps_per_epoch, device.str().c_str());
  examples::CsvLog csv, steps_csv;
  if (main_rank) {
    csv = examples::CsvLog(c.out + "/log.csv", "epoch,step,train_loss,test_acc,seconds", c.resume);
    steps_csv = examples::CsvLog(c.out + "/steps.csv", "epoch,step,train_loss", c.resume);
  }
  examples::ProgressLine& progress = examples::progress_line();
  int64_t global_step = start_epoch * steps_per_epoch;
  for (int64_t epoch = start_epoch; epoch < c.epochs; ++epoch) {
    loader.set_epoch(epoch);
    int64_t i = 0;
    const auto t0 = std::chrono::steady_clock::now();
    // The loss also accumulates on the device: reading it each step would sync the host.
    Tensor loss_sum = zeros({}, on_device_f64);
    for (data::Batch& b : loader) {
      if (i >= steps_per_epoch) break;
      Tensor loss = cross_entropy(model->forward(b[0]), b[1]);
      // Zeroed in place, not dropped: with --ddp the gradients are views of the reducer's
      // buckets, which set_to_none would replace with fresh tensors copied in every step.
      opt.zero_grad(false);
      loss.backward();
      opt.step();
      {
        autograd::NoGradGuard ng;
        add_(loss_sum, loss.detach().to(DType::f64));
      }
      ++i;
      ++global_step;
      if (main_rank && (i % c.log_interval == 0 || i == steps_per_epoch)) {
        const int width = 30, done = int(width * i / steps_per_epoch);
        const double mean = loss_sum.item() / double(i);
        progress.show("epoch %lld/%lld [%s%s] %lld/%lld loss %.4f", (long long)epoch + 1,
                      (long long)c.epochs, std::string(size_t(done), '#').c_str(),
                      std::string(size_t(width - done), '.').c_str(), (long long)i,
                      (long long)steps_per_epoch, mean);
        steps_csv.row(
            {double(epoch) + double(i) / double(steps_per_epoch), double(global_step), mean});
      }
    }
    // Counts accumulate on the device (exact in f64), one all_reduce each at the end.
    Tensor correct = zeros({}, on_device_f64);
    double total = 0;
    {
      autograd::NoGradGuard ng;
      for (data::Batch& b : test_loader) {
        Tensor pred = argmax(model->forward(b[0]), 1);
        add_(correct, sum(eq(pred, b[1]).to(DType::f32)).to(DType::f64));
        total += double(b[0].size(0));
        if (limit && total >= 2000) break;
      }
    }
    Tensor train_loss = loss_sum / double(std::max<int64_t>(i, 1));
    Tensor test_total = full({}, total, on_device_f64);
    reduce_over_ranks(dist, train_loss, distributed::ReduceOp::avg);
    reduce_over_ranks(dist, correct, distributed::ReduceOp::sum);
    reduce_over_ranks(dist, test_total, distributed::ReduceOp::sum);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (main_rank) {
      const double acc = correct.item() / std::max(test_total.item(), 1.0);
      progress.finish("epoch %lld/%lld: train loss %.4f | test acc %.2f%% | %.1f s",
                      (long long)epoch + 1, (long long)c.epochs, train_loss.item(), 100 * acc,
                      secs);
      csv.row({double(epoch + 1), double(global_step), train_loss.item(), acc, secs});
      save_checkpoint(c, *model, opt, global_step, "epoch", epoch + 1);
    }
  }
  if (main_rank) {
    csv.close();
    steps_csv.close();
    examples::write_plot(c.out, "epoch",
                         {{"loss", {{"steps.csv", 1, 3, "train"}}, ""},
                          {"test accuracy", {{"log.csv", 1, 4, "test", true}}, "[0:1]"}});
    std::printf("log: %s/log.csv, plot: %s/curves.png\n", c.out.c_str(), c.out.c_str());
  }
}

// --task charlm.
void run_charlm(const Config& c, const examples::DistributedSetup& dist, Device device) {
  const bool main_rank = dist.main_rank();
  const TensorOptions on_device_f64 = TensorOptions(DType::f64).with_device(device);
  const bool use_amp = c.amp == "bf16";
  data::TextCorpus corpus =
      c.corpus_path.empty() ? data::TextCorpus() : data::TextCorpus(c.corpus_path);
  Tensor tokens = corpus.tokens();
  const int64_t n = tokens.size(0), n_val = std::max<int64_t>(n / 20, c.seq_len + 1);
  auto train_set = std::make_shared<data::SequenceDataset>(
      tokens.narrow(0, 0, n - n_val).contiguous(), c.seq_len);
  auto val_set = std::make_shared<data::SequenceDataset>(
      tokens.narrow(0, n - n_val, n_val).contiguous(), c.seq_len);
  const int64_t vocab = corpus.vocab_size();
  auto model = std::make_shared<CharLMImpl>(vocab, c.embed_dim, c.hidden, c.layers, c.dropout);
  model->to(device);
  optim::Adam opt(model->parameters(), optim::AdamOptions(c.lr));
  int64_t done = c.resume ? resume_checkpoint(c, *model, opt, "step", main_rank) : int64_t(0);
  // Broadcasts rank 0's parameters, then averages the gradients of every backward (inside the
  // captured step with --graphs: the all-reduces are part of the graph).
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (dist.group) ddp = std::make_unique<distributed::DistributedDataParallel>(model, dist.group);
  data::DataLoader loader(
      examples::shard_for_rank(train_set, dist, c.seed),
      data::DataLoaderOptions(c.batch).shuffle(true).drop_last(true).seed(c.seed).device(device));
  data::DataLoader val_loader(examples::shard_for_rank(val_set, dist, c.seed),
                              data::DataLoaderOptions(c.batch).drop_last(true).device(device));
  if (main_rank)
    std::printf(
        "char LM on %s: %lld characters, vocabulary %lld, LSTM %lld x %lld, %s%s, %s "
        "algorithms\n",
        c.corpus_path.empty() ? "fortunes" : c.corpus_path.c_str(), (long long)n, (long long)vocab,
        (long long)c.layers, (long long)c.hidden, device.str().c_str(),
        dist.world > 1 ? (", " + std::to_string(dist.world) + " ranks").c_str() : "",
        dispatch::algo_mode_name(dispatch::current_algo_settings().mode));
  examples::CsvLog csv, steps_csv;
  if (main_rank) {
    csv = examples::CsvLog(c.out + "/log.csv", "step,train_loss,val_loss,tokens_per_s,seconds",
                           c.resume);
    steps_csv = examples::CsvLog(c.out + "/steps.csv", "step,train_loss", c.resume);
  }
  examples::ProgressLine& progress = examples::progress_line();

  auto train_step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss;
    {
      nn::AutocastGuard ac(DType::bf16, use_amp);
      Tensor logits = model->forward(in[0]).output;
      loss = cross_entropy(logits.reshape({-1, vocab}).to(DType::f32), in[1].reshape({-1}));
    }
    loss.backward();  // with DDP, the gradients are averaged over the ranks when it returns
    if (c.clip > 0) nn::clip_grad_norm_(model->parameters(), c.clip);
    opt.step();
    opt.zero_grad(/*set_to_none=*/!ddp);  // with DDP the gradients are views of its buckets: kept
    return {loss.detach()};
  };
  nn::GraphedStepOptions go;
  go.enabled = c.graphs && device.is_cuda();
  nn::GraphedStep step(train_step, go);
  Generator sampler(Device::cpu(), c.seed + 7);
  auto t0 = std::chrono::steady_clock::now();
  int64_t tokens_seen = 0;
  double running = 0;
  while (done < c.steps) {
    for (data::Batch& b : loader) {
      if (done >= c.steps) break;
      Tensor loss = step({b[0], b[1]})[0];
      ++done;
      tokens_seen += b[0].numel();
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (main_rank && (done % c.log_interval == 0 || done == c.steps)) {
        running = loss.item();
        steps_csv.row({double(done), running});
        progress.show("step %lld/%lld loss %.4f %.0f tokens/s", (long long)done, (long long)c.steps,
                      running, tokens_seen * dist.world / secs);
      }
      if (done % c.eval_every == 0 || done == c.steps) {
        // Every rank evaluates up to 20 batches of its shard; the mean is averaged over ranks.
        Tensor val = zeros({}, on_device_f64);
        int64_t k = 0;
        {
          autograd::NoGradGuard ng;
          model->eval();
          for (data::Batch& v : val_loader) {
            Tensor logits = model->forward(v[0]).output;
            add_(val, cross_entropy(logits.reshape({-1, vocab}).to(DType::f32), v[1].reshape({-1}))
                          .to(DType::f64));
            if (++k >= 20) break;
          }
          model->train();
        }
        Tensor val_mean = val / double(std::max<int64_t>(k, 1));
        reduce_over_ranks(dist, val_mean, distributed::ReduceOp::avg);
        if (main_rank) {
          const double tps = tokens_seen * dist.world / secs;
          progress.finish("step %lld: train loss %.4f | val loss %.4f | %.0f tokens/s",
                          (long long)done, running, val_mean.item(), tps);
          csv.row({double(done), running, val_mean.item(), tps, secs});
          save_checkpoint(c, *model, opt, done, "step", done);
        }
      }
      if (main_rank && (done % c.sample_every == 0 || done == c.steps)) {
        progress.end();
        std::printf("--- sample at step %lld ---%s\n---\n", (long long)done,
                    sample(*model, corpus, device, 200, 0.8, sampler).c_str());
      }
    }
  }
  if (main_rank) {
    csv.close();
    steps_csv.close();
    examples::write_plot(
        c.out, "step",
        {{"loss", {{"steps.csv", 1, 2, "train"}, {"log.csv", 1, 3, "validation", true}}, ""}});
    std::printf("log: %s/log.csv, plot: %s/curves.png\n", c.out.c_str(), c.out.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Ember LSTM examples: character language model, row-by-row image classifier"};
  examples::use_help_format(app);
  app.add_option("--task", c.task, "charlm or fashion")
      ->check(CLI::IsMember({"charlm", "fashion"}));
  app.add_option("--corpus", c.corpus_path, "text file or folder (default: Debian's fortunes)");
  app.add_option("--data", c.data_dir,
                 "Fashion-MNIST folder for --task fashion (default: Debian's files)");
  app.add_option("--device", c.device_name, "auto, cpu or cuda[:N]");
  app.add_option("--steps", c.steps, "training steps (charlm; without a GPU: 30 unless given)");
  app.add_option("--epochs", c.epochs, "epochs (fashion; without a GPU: 1 unless given)");
  app.add_option("--batch-size", c.batch, "sequences or images per step, per process");
  app.add_option("--seq-len", c.seq_len, "characters per training sequence (charlm)");
  app.add_option("--hidden", c.hidden, "LSTM hidden size");
  app.add_option("--layers", c.layers, "LSTM layers (charlm)");
  app.add_option("--embed", c.embed_dim, "character embedding size (charlm)");
  app.add_option("--dropout", c.dropout, "dropout between LSTM layers (charlm)");
  app.add_option("--lr", c.lr, "Adam learning rate");
  app.add_option("--clip", c.clip, "clip the gradient norm (0: off; charlm)");
  app.add_option("--sample-every", c.sample_every, "steps between generated samples (charlm)");
  app.add_option("--eval-every", c.eval_every,
                 "steps between validation losses and checkpoints (charlm)");
  app.add_option("--log-interval", c.log_interval, "steps between progress updates")
      ->check(CLI::PositiveNumber);
  app.add_option("--amp", c.amp, "none or bf16");
  app.add_flag("--graphs", c.graphs, "capture the training step as a CUDA graph (charlm)");
  app.add_option("--algo-mode", c.algo, examples::kAlgoModeHelp);
  app.add_flag("--ddp", c.ddp_flag,
               "data parallel (automatic when started by ember-launch with WORLD_SIZE > 1)");
  app.add_option("--out", c.out, "folder for log.csv, steps.csv and curves.png");
  app.add_option("--checkpoint", c.checkpoint,
                 "save a checkpoint to this file after every evaluation (charlm) or epoch "
                 "(fashion; atomic; its folder is created at start)");
  app.add_flag("--resume", c.resume, "continue from --checkpoint");
  app.add_option("--seed", c.seed, "seed of the weights, shuffling and sampling");
  CLI11_PARSE(app, argc, argv);

  try {
    examples::prepare_checkpoint_path(c.checkpoint);
    EMBER_CHECK(c.amp == "none" || c.amp == "bf16", "--amp must be none or bf16");
    const examples::DistributedSetup dist = examples::setup_distributed(c.ddp_flag);
    const Device device = examples::pick_device(c.device_name);
    manual_seed(c.seed);
    std::optional<dispatch::AlgoModeGuard> algo_mode;  // this thread runs every step
    if (const auto mode = examples::algo_mode_for(c.algo, device)) algo_mode.emplace(*mode);
    if (device.is_cpu() && app.count("--steps") == 0 && app.count("--epochs") == 0) {
      c.steps = 30;
      c.epochs = 1;
      c.hidden = std::min<int64_t>(c.hidden, 128);
      c.seq_len = std::min<int64_t>(c.seq_len, 64);
      c.sample_every = c.eval_every = 15;
      if (app.count("--log-interval") == 0) c.log_interval = 5;
      if (dist.main_rank())
        std::printf("no GPU: a short CPU run (pass --steps / --epochs for more)\n");
    }
    if (dist.main_rank()) std::filesystem::create_directories(c.out);
    if (c.task == "fashion")
      run_fashion(c, dist, device, device.is_cpu() && app.count("--epochs") == 0 ? 40 : 0);
    else
      run_charlm(c, dist, device);
  } catch (const std::exception& e) {
    examples::print_error(e.what());
    return 1;
  }
  return 0;
}
