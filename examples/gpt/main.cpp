// examples/gpt: a character-level GPT (a decoder-only Transformer) trained on a text corpus
// (default: Debian's fortunes, as examples/lstm), printing generated text (valid UTF-8) at the
// end and the validation loss on a held-out tail of the corpus as it trains.
//   model     token Embedding + LearnedPositionalEmbedding -> dropout -> pre-norm Transformer
//             blocks (nn::TransformerEncoder of TransformerEncoderLayer with norm_first, GELU,
//             causal self-attention through scaled_dot_product_attention) with a final LayerNorm
//             -> Linear head (no bias); GPT-2's initialization (N(0, 0.02), the residual
//             projections scaled by 1 / sqrt(2 * layers), zero biases)
//   training  AdamW (weight decay on the matrices only), linear warm-up then cosine decay
//             (WarmupCosineLR), gradient clipping, cross-entropy in float32
// GPU when present, else a short CPU run with a tiny model. --amp bf16; --graphs captures the
// training step; --algo-mode; CSV logs (per evaluation and per logging interval) and curves.png in
// --out; --checkpoint (after every evaluation; atomic) and --resume; data parallel under
// ember-launch (--ddp, or automatically when WORLD_SIZE > 1), as examples/lstm.
// examples/gpt/gpt_torch.py is the same program in PyTorch (model, data order, seed policy).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
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
  std::string corpus_path, device_name = "auto", amp = "none", algo;
  std::string out = "runs/gpt", checkpoint;
  int64_t steps = 5000, batch = 64, seq_len = 256, d_model = 384, layers = 6, heads = 6;
  int64_t warmup = 100, eval_every = 250, log_interval = 10, sample_chars = 500;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, dropout = 0.2, clip = 1.0;
  bool graphs = false, ddp_flag = false, resume = false;
  uint64_t seed = 0;
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

struct GPTImpl : nn::Module {
  nn::Embedding tok_emb{nullptr};
  nn::LearnedPositionalEmbedding pos_emb{nullptr};
  nn::Dropout drop{nullptr};
  nn::TransformerEncoder blocks{nullptr};
  nn::Linear head{nullptr};
  int64_t context;

  GPTImpl(int64_t vocab, int64_t context, int64_t d, int64_t layers, int64_t heads, double dropout)
      : nn::Module("GPT"), context(context) {
    tok_emb = register_module("tok_emb", nn::Embedding(vocab, d));
    pos_emb = register_module("pos_emb", nn::LearnedPositionalEmbedding(context, d));
    drop = register_module("drop", nn::Dropout(dropout));
    const auto block = nn::TransformerEncoderLayerOptions(d, heads)
                           .dim_feedforward(4 * d)
                           .dropout(dropout)
                           .activation(nn::TransformerActivation::gelu)
                           .batch_first(true)
                           .norm_first(true);
    blocks = register_module(
        "blocks",
        nn::TransformerEncoder(
            nn::TransformerEncoderOptions(block, layers).norm(nn::LayerNormOptions({d}))));
    head = register_module("head", nn::Linear(nn::LinearOptions(d, vocab).bias(false)));
    // GPT-2's initialization, by parameter name (gpt_torch.py does the same).
    for (auto& [name, p] : named_parameters()) {
      if (p.dim() >= 2) {
        const bool residual =
            ends_with(name, "out_proj.weight") || ends_with(name, "linear2.weight");
        nn::init::normal_(p, 0.0, residual ? 0.02 / std::sqrt(2.0 * double(layers)) : 0.02);
      } else if (ends_with(name, "bias")) {
        nn::init::zeros_(p);
      }
    }
  }
  // tokens [B, T] (T <= context) -> logits [B, T, vocab].
  Tensor forward(const Tensor& tokens) {
    Tensor x = drop(pos_emb(tok_emb(tokens)));
    return head(blocks->forward(x, {}, {}, /*is_causal=*/true));
  }
};
EMBER_MODULE(GPT);

// Samples about `n` bytes of text after a newline, each step reading the last `context` tokens.
// A character cut off at the end is completed (up to 3 more bytes), and any byte sequence that is
// not valid UTF-8 is replaced by U+FFFD, so the text always prints.
std::string sample(GPTImpl& model, const data::TextCorpus& corpus, Device device, int64_t n,
                   double temperature, Generator& gen) {
  autograd::NoGradGuard ng;
  model.eval();
  std::string out = "\n";
  std::vector<double> ids = {double(corpus.encode(out).item())};
  for (int64_t i = 0; i < n + 3 && (i < n || examples::utf8_incomplete_tail(out) > 0); ++i) {
    const int64_t len = std::min<int64_t>(int64_t(ids.size()), model.context);
    std::vector<double> window(ids.end() - len, ids.end());
    Tensor tokens = from_vector(window, {1, len}, TensorOptions(DType::i64).with_device(device));
    Tensor logits = model.forward(tokens).select(1, len - 1).reshape({-1});
    std::vector<double> p = softmax(logits.to(DType::f32) / temperature, 0).cpu().to_vector();
    // Inverse-CDF draw from the categorical distribution.
    const double u = rand({1}, TensorOptions(DType::f64), &gen).item();
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
    ids.push_back(double(next));
  }
  model.train();
  return examples::sanitize_utf8(out);
}

// Saves the model, the optimizer, the scheduler, the RNG state and the step to --checkpoint.
void save_checkpoint(const Config& c, nn::Module& model, optim::Optimizer& opt,
                     optim::LRScheduler& sched, int64_t step) {
  if (c.checkpoint.empty()) return;
  nn::Checkpoint ck;
  ck.model = model.state_dict();
  ck.optimizer = opt.state_dict();
  ck.optimizer_config = opt.config_json();
  ck.scheduler = sched.state_json();
  ck.step = step;
  ck.rng = nn::capture_rng_state();
  ck.extra["step"] = std::to_string(step);
  ck.extra["example"] = "gpt";
  ck.save(c.checkpoint);
}

// --resume: restores what save_checkpoint wrote (all or nothing) and returns the step.
int64_t resume_checkpoint(const Config& c, nn::Module& model, optim::Optimizer& opt,
                          optim::LRScheduler& sched, bool main_rank) {
  EMBER_CHECK(!c.checkpoint.empty() && std::filesystem::exists(c.checkpoint),
              "--resume needs an existing --checkpoint, got '", c.checkpoint, "'");
  const nn::Checkpoint ck = nn::Checkpoint::load(c.checkpoint);
  const auto example = ck.extra.find("example");
  const auto pos = ck.extra.find("step");
  EMBER_CHECK(example != ck.extra.end() && example->second == "gpt" && pos != ck.extra.end(),
              "--resume: ", c.checkpoint, " was not written by ember-gpt");
  ck.restore(model, &opt, &sched);
  const int64_t value = std::strtoll(pos->second.c_str(), nullptr, 10);
  if (main_rank)
    std::printf("resumed from %s at step %lld\n", c.checkpoint.c_str(), (long long)value);
  return value;
}

void run(const Config& c, const examples::DistributedSetup& dist, Device device) {
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
  GPT model(vocab, c.seq_len, c.d_model, c.layers, c.heads, c.dropout);
  model->to(device);
  // Weight decay on the matrices (embeddings, projections), none on biases and norms.
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const auto adamw = optim::AdamWOptions(c.lr).betas({0.9, 0.99});
  const std::vector<optim::ParamGroup<optim::AdamWOptions>> groups = {
      {decay, optim::AdamWOptions(adamw).weight_decay(c.weight_decay)},
      {no_decay, optim::AdamWOptions(adamw).weight_decay(0.0)}};
  optim::AdamW opt(groups);
  optim::WarmupCosineLR sched(opt, c.warmup, std::max(c.steps, c.warmup + 1),
                              1.0 / double(std::max<int64_t>(c.warmup, 1)), c.min_lr);
  int64_t done = c.resume ? resume_checkpoint(c, *model, opt, sched, main_rank) : int64_t(0);
  // Broadcasts rank 0's parameters, then averages the gradients of every backward (inside the
  // captured step with --graphs: the all-reduces are part of the graph).
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (dist.group)
    ddp = std::make_unique<distributed::DistributedDataParallel>(model.ptr(), dist.group);
  data::DataLoader loader(
      examples::shard_for_rank(train_set, dist, c.seed),
      data::DataLoaderOptions(c.batch).shuffle(true).drop_last(true).seed(c.seed).device(device));
  data::DataLoader val_loader(examples::shard_for_rank(val_set, dist, c.seed),
                              data::DataLoaderOptions(c.batch).drop_last(true).device(device));
  if (main_rank)
    std::printf(
        "char GPT on %s: %lld characters, vocabulary %lld, %lld layers x d %lld x %lld heads, "
        "context %lld, %.2fM parameters, %s%s, %s algorithms\n",
        c.corpus_path.empty() ? "fortunes" : c.corpus_path.c_str(), (long long)n, (long long)vocab,
        (long long)c.layers, (long long)c.d_model, (long long)c.heads, (long long)c.seq_len,
        double(model->num_parameters()) / 1e6, device.str().c_str(),
        dist.world > 1 ? (", " + std::to_string(dist.world) + " ranks").c_str() : "",
        dispatch::algo_mode_name(dispatch::current_algo_settings().mode));
  examples::CsvLog csv, steps_csv;
  if (main_rank) {
    csv = examples::CsvLog(c.out + "/log.csv", "step,train_loss,val_loss,tokens_per_s,seconds",
                           c.resume);
    steps_csv = examples::CsvLog(c.out + "/steps.csv", "step,train_loss,lr", c.resume);
  }
  examples::ProgressLine& progress = examples::progress_line();

  auto train_step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss;
    {
      nn::AutocastGuard ac(DType::bf16, use_amp);
      Tensor logits = model->forward(in[0]);
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
      sched.step();  // between replays: the captured step reads the new rate from the device
      examples::algo_step_boundary();
      ++done;
      tokens_seen += b[0].numel();
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (main_rank && (done % c.log_interval == 0 || done == c.steps)) {
        running = loss.item();
        steps_csv.row({double(done), running, opt.lr(0)});
        progress.show("step %lld/%lld loss %.4f lr %.2e %.0f tokens/s", (long long)done,
                      (long long)c.steps, running, opt.lr(0), tokens_seen * dist.world / secs);
      }
      if (done % c.eval_every == 0 || done == c.steps) {
        if (main_rank && done % c.log_interval != 0) running = loss.item();
        // Every rank evaluates up to 20 batches of its shard; the mean is averaged over ranks.
        Tensor val = zeros({}, on_device_f64);
        int64_t k = 0;
        {
          autograd::NoGradGuard ng;
          model->eval();
          for (data::Batch& v : val_loader) {
            Tensor logits = model->forward(v[0]);
            add_(val, cross_entropy(logits.reshape({-1, vocab}).to(DType::f32), v[1].reshape({-1}))
                          .to(DType::f64));
            if (++k >= 20) break;
          }
          model->train();
        }
        Tensor val_mean = val / double(std::max<int64_t>(k, 1));
        if (dist.group) dist.group->all_reduce(val_mean, distributed::ReduceOp::avg);
        if (main_rank) {
          const double tps = tokens_seen * dist.world / secs;
          progress.finish("step %lld: train loss %.4f | val loss %.4f | %.0f tokens/s",
                          (long long)done, running, val_mean.item(), tps);
          csv.row({double(done), running, val_mean.item(), tps, secs});
          save_checkpoint(c, *model, opt, sched, done);
        }
      }
    }
  }
  if (main_rank) {
    progress.end();
    std::printf("--- sample ---%s\n---\n",
                sample(*model, corpus, device, c.sample_chars, 0.8, sampler).c_str());
    csv.close();
    steps_csv.close();
    examples::write_plot(
        c.out, "step",
        {{"loss", {{"steps.csv", 1, 2, "train"}, {"log.csv", 1, 3, "validation", true}}, ""},
         {"learning rate", {{"steps.csv", 1, 3, "lr"}}, ""}});
    std::printf("log: %s/log.csv, plot: %s/curves.png\n", c.out.c_str(), c.out.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Ember GPT example: a character-level decoder-only Transformer"};
  examples::use_help_format(app);
  app.add_option("--corpus", c.corpus_path, "text file or folder (default: Debian's fortunes)");
  app.add_option("--device", c.device_name, "auto, cpu or cuda[:N]");
  app.add_option("--steps", c.steps, "training steps (without a GPU: 30 unless given)");
  app.add_option("--batch-size", c.batch, "sequences per step, per process");
  app.add_option("--seq-len", c.seq_len, "context length: characters per training sequence");
  app.add_option("--d-model", c.d_model, "model width");
  app.add_option("--layers", c.layers, "Transformer blocks");
  app.add_option("--heads", c.heads, "attention heads (divides --d-model)");
  app.add_option("--dropout", c.dropout, "dropout on embeddings, attention and residual branches");
  app.add_option("--lr", c.lr, "AdamW peak learning rate");
  app.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine decay");
  app.add_option("--warmup", c.warmup, "linear warm-up steps");
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay (matrices only)");
  app.add_option("--clip", c.clip, "clip the gradient norm (0: off)");
  app.add_option("--eval-every", c.eval_every, "steps between validation losses and checkpoints");
  app.add_option("--log-interval", c.log_interval, "steps between progress updates")
      ->check(CLI::PositiveNumber);
  app.add_option("--sample-chars", c.sample_chars, "characters of text generated at the end");
  app.add_option("--amp", c.amp, "none or bf16");
  app.add_flag("--graphs", c.graphs, "capture the training step as a CUDA graph");
  app.add_option("--algo-mode", c.algo, examples::kAlgoModeHelp);
  app.add_flag("--ddp", c.ddp_flag,
               "data parallel (automatic when started by ember-launch with WORLD_SIZE > 1)");
  app.add_option("--out", c.out, "folder for log.csv, steps.csv and curves.png");
  app.add_option("--checkpoint", c.checkpoint,
                 "save a checkpoint to this file after every evaluation (atomic; its folder is "
                 "created at start)");
  app.add_flag("--resume", c.resume, "continue from --checkpoint");
  app.add_option("--seed", c.seed, "seed of the weights, shuffling, dropout and sampling");
  CLI11_PARSE(app, argc, argv);

  try {
    examples::prepare_checkpoint_path(c.checkpoint);
    EMBER_CHECK(c.amp == "none" || c.amp == "bf16", "--amp must be none or bf16");
    const examples::DistributedSetup dist = examples::setup_distributed(c.ddp_flag);
    const Device device = examples::pick_device(c.device_name);
    manual_seed(c.seed);
    std::optional<dispatch::AlgoModeGuard> algo_mode;  // this thread runs every step
    if (const auto mode = examples::algo_mode_for(c.algo, device)) algo_mode.emplace(*mode);
    if (device.is_cpu() && app.count("--steps") == 0) {
      c.steps = 30;
      if (app.count("--d-model") == 0) c.d_model = 64;
      if (app.count("--layers") == 0) c.layers = 2;
      if (app.count("--heads") == 0) c.heads = 4;
      if (app.count("--seq-len") == 0) c.seq_len = 64;
      if (app.count("--batch-size") == 0) c.batch = 16;
      if (app.count("--warmup") == 0) c.warmup = 5;
      if (app.count("--sample-chars") == 0) c.sample_chars = 200;
      c.eval_every = 15;
      if (app.count("--log-interval") == 0) c.log_interval = 5;
      if (dist.main_rank())
        std::printf("no GPU: a short CPU run with a tiny model (pass --steps for more)\n");
    }
    EMBER_CHECK(c.d_model % c.heads == 0, "--heads (", c.heads, ") must divide --d-model (",
                c.d_model, ")");
    if (dist.main_rank()) std::filesystem::create_directories(c.out);
    run(c, dist, device);
  } catch (const std::exception& e) {
    examples::print_error(e.what());
    return 1;
  }
  return 0;
}
