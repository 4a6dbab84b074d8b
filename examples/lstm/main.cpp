// examples/lstm: two recurrent models.
//   --task charlm (default): a character language model (Embedding -> 2-layer LSTM -> Linear)
//     trained on a text corpus (default: Debian's fortunes), printing generated text as it
//     trains and the validation loss on a held-out tail of the corpus.
//   --task fashion: an LSTM classifier reading Fashion-MNIST images row by row (28 steps of 28
//     pixels), reporting test accuracy.
// GPU when present, else a short CPU run. Adam; --amp bf16; --graphs captures the training step
// (charlm). Data parallel under ember-launch or mpirun (--ddp, or automatically when WORLD_SIZE >
// 1): each rank trains on its shard of the data, DistributedDataParallel averages the gradients,
// the validation loss / test accuracy are reduced over the ranks, and rank 0 alone prints.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "common/algo_mode.h"
#include "common/distributed_setup.h"
#include "ember/distributed/ddp.h"
#include "ember/ember.h"
#include "ember/nn/graphed_step.h"
#include "ember/nn/nn.h"

using namespace ember;

namespace {

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

// Samples `n` characters, feeding one at a time and carrying the LSTM state.
std::string sample(CharLMImpl& model, const data::TextCorpus& corpus, Device device, int64_t n,
                   double temperature, Generator& gen) {
  autograd::NoGradGuard ng;
  model.eval();
  std::string out = "\n";
  Tensor token = corpus.encode(out).reshape({1, 1}).to(device);
  Tensor h, c;
  for (int64_t i = 0; i < n; ++i) {
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
  return out;
}

// The reduction of a per-rank value over the ranks (in place, on the value's device); a single
// process keeps its own.
void reduce_over_ranks(const examples::DistributedSetup& dist, Tensor& value,
                       distributed::ReduceOp op) {
  if (dist.group) dist.group->all_reduce(value, op);
}

}  // namespace

int main(int argc, char** argv) {
  std::string task = "charlm", corpus_path, device_name = "auto", amp = "none", data_dir, algo;
  int64_t steps = 2000, batch = 64, seq_len = 128, hidden = 512, layers = 2, embed_dim = 256;
  int64_t sample_every = 250, eval_every = 250, epochs = 5;
  double lr = 2e-3, dropout = 0.0, clip = 1.0;
  bool graphs = false, ddp_flag = false;
  uint64_t seed = 0;
  CLI::App app{"Ember LSTM examples: character language model, row-by-row image classifier"};
  app.add_option("--task", task, "charlm or fashion");
  app.add_option("--corpus", corpus_path, "text file or folder (default: Debian's fortunes)");
  app.add_option("--data", data_dir, "Fashion-MNIST folder for --task fashion");
  app.add_option("--device", device_name, "auto, cpu or cuda[:N]");
  app.add_option("--steps", steps, "training steps (charlm)");
  app.add_option("--epochs", epochs, "epochs (fashion)");
  app.add_option("--batch-size", batch, "per process");
  app.add_option("--seq-len", seq_len);
  app.add_option("--hidden", hidden);
  app.add_option("--layers", layers);
  app.add_option("--embed", embed_dim);
  app.add_option("--dropout", dropout);
  app.add_option("--lr", lr, "Adam learning rate");
  app.add_option("--clip", clip, "clip the gradient norm (0: off)");
  app.add_option("--sample-every", sample_every);
  app.add_option("--eval-every", eval_every);
  app.add_option("--amp", amp, "none or bf16");
  app.add_flag("--graphs", graphs, "capture the training step as a CUDA graph");
  app.add_option("--algo-mode", algo, examples::kAlgoModeHelp);
  app.add_flag("--ddp", ddp_flag,
               "data parallel (automatic when started by ember-launch with WORLD_SIZE > 1)");
  app.add_option("--seed", seed);
  CLI11_PARSE(app, argc, argv);

  try {
    const examples::DistributedSetup dist = examples::setup_distributed(ddp_flag);
    const bool main_rank = dist.main_rank();
    const Device device = examples::pick_device(device_name);
    manual_seed(seed);
    std::optional<dispatch::AlgoModeGuard> algo_mode;  // this thread runs every step
    if (const auto mode = examples::algo_mode_for(algo, device)) algo_mode.emplace(*mode);
    const bool use_amp = amp == "bf16";
    EMBER_CHECK(amp == "none" || amp == "bf16", "--amp must be none or bf16");
    if (device.is_cpu() && app.count("--steps") == 0 && app.count("--epochs") == 0) {
      steps = 30;
      epochs = 1;
      hidden = std::min<int64_t>(hidden, 128);
      seq_len = std::min<int64_t>(seq_len, 64);
      sample_every = eval_every = 15;
      if (main_rank) std::printf("no GPU: a short CPU run (pass --steps / --epochs for more)\n");
    }
    const TensorOptions on_device_f64 = TensorOptions(DType::f64).with_device(device);

    if (task == "fashion") {
      std::string folder = data_dir.empty() ? data::default_fashion_mnist_folder() : data_dir;
      auto train = std::make_shared<data::MNIST>(folder, data::Split::train);
      auto test = std::make_shared<data::MNIST>(folder, data::Split::test);
      auto model = std::make_shared<RowClassifierImpl>(hidden);
      model->to(device);
      // Broadcasts rank 0's parameters, then averages the gradients of every backward.
      std::unique_ptr<distributed::DistributedDataParallel> ddp;
      if (dist.group)
        ddp = std::make_unique<distributed::DistributedDataParallel>(model, dist.group);
      optim::Adam opt(model->parameters(), optim::AdamOptions(lr));
      data::DataLoader loader(
          examples::shard_for_rank(train, dist, seed),
          data::DataLoaderOptions(batch).shuffle(true).seed(seed).device(device).transform(
              data::Normalize({0.2860}, {0.3530})));
      data::DataLoader test_loader(examples::shard_for_rank(test, dist, seed),
                                   data::DataLoaderOptions(512).device(device).transform(
                                       data::Normalize({0.2860}, {0.3530})));
      if (main_rank && dist.world > 1)
        std::printf("row-by-row LSTM on Fashion-MNIST, batch %lld x %d ranks, %s\n",
                    (long long)batch, dist.world, device.str().c_str());
      // Per rank: at most 40 training steps and about 2000 test images.
      const int64_t limit = device.is_cpu() && app.count("--epochs") == 0 ? 40 : 0;
      for (int64_t epoch = 0; epoch < epochs; ++epoch) {
        loader.set_epoch(epoch);
        int64_t i = 0;
        // The loss also accumulates on the device: reading it each step would sync the host.
        Tensor loss_sum = zeros({}, on_device_f64);
        for (data::Batch& b : loader) {
          if (limit && i >= limit) break;
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
        if (main_rank)
          std::printf("epoch %lld: train loss %.4f | test acc %.2f%%\n", (long long)epoch + 1,
                      train_loss.item(), 100 * correct.item() / std::max(test_total.item(), 1.0));
      }
      return 0;
    }
    EMBER_CHECK(task == "charlm", "unknown --task '", task, "' (charlm or fashion)");

    data::TextCorpus corpus =
        corpus_path.empty() ? data::TextCorpus() : data::TextCorpus(corpus_path);
    Tensor tokens = corpus.tokens();
    const int64_t n = tokens.size(0), n_val = std::max<int64_t>(n / 20, seq_len + 1);
    auto train_set = std::make_shared<data::SequenceDataset>(
        tokens.narrow(0, 0, n - n_val).contiguous(), seq_len);
    auto val_set = std::make_shared<data::SequenceDataset>(
        tokens.narrow(0, n - n_val, n_val).contiguous(), seq_len);
    const int64_t vocab = corpus.vocab_size();
    auto model = std::make_shared<CharLMImpl>(vocab, embed_dim, hidden, layers, dropout);
    model->to(device);
    // Broadcasts rank 0's parameters, then averages the gradients of every backward (inside the
    // captured step with --graphs: the all-reduces are part of the graph).
    std::unique_ptr<distributed::DistributedDataParallel> ddp;
    if (dist.group) ddp = std::make_unique<distributed::DistributedDataParallel>(model, dist.group);
    optim::Adam opt(model->parameters(), optim::AdamOptions(lr));
    data::DataLoader loader(
        examples::shard_for_rank(train_set, dist, seed),
        data::DataLoaderOptions(batch).shuffle(true).drop_last(true).seed(seed).device(device));
    data::DataLoader val_loader(examples::shard_for_rank(val_set, dist, seed),
                                data::DataLoaderOptions(batch).drop_last(true).device(device));
    if (main_rank)
      std::printf(
          "char LM on %s: %lld characters, vocabulary %lld, LSTM %lld x %lld, %s%s, %s "
          "algorithms\n",
          corpus_path.empty() ? "fortunes" : corpus_path.c_str(), (long long)n, (long long)vocab,
          (long long)layers, (long long)hidden, device.str().c_str(),
          dist.world > 1 ? (", " + std::to_string(dist.world) + " ranks").c_str() : "",
          dispatch::algo_mode_name(dispatch::current_algo_settings().mode));

    auto train_step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
      Tensor loss;
      {
        nn::AutocastGuard ac(DType::bf16, use_amp);
        Tensor logits = model->forward(in[0]).output;
        loss = cross_entropy(logits.reshape({-1, vocab}).to(DType::f32), in[1].reshape({-1}));
      }
      loss.backward();  // with DDP, the gradients are averaged over the ranks when it returns
      if (clip > 0) nn::clip_grad_norm_(model->parameters(), clip);
      opt.step();
      opt.zero_grad(/*set_to_none=*/!ddp);  // with DDP the gradients are views of its buckets: kept
      return {loss.detach()};
    };
    nn::GraphedStepOptions go;
    go.enabled = graphs && device.is_cuda();
    nn::GraphedStep step(train_step, go);
    Generator sampler(Device::cpu(), seed + 7);
    auto t0 = std::chrono::steady_clock::now();
    int64_t done = 0, tokens_seen = 0;
    double running = 0;
    while (done < steps) {
      for (data::Batch& b : loader) {
        if (done >= steps) break;
        Tensor loss = step({b[0], b[1]})[0];
        ++done;
        tokens_seen += b[0].numel();
        if (main_rank && (done % 10 == 0 || done == steps)) running = loss.item();
        if (done % eval_every == 0 || done == steps) {
          // Every rank evaluates up to 20 batches of its shard; the mean is averaged over ranks.
          Tensor val = zeros({}, on_device_f64);
          int64_t k = 0;
          {
            autograd::NoGradGuard ng;
            model->eval();
            for (data::Batch& v : val_loader) {
              Tensor logits = model->forward(v[0]).output;
              add_(val,
                   cross_entropy(logits.reshape({-1, vocab}).to(DType::f32), v[1].reshape({-1}))
                       .to(DType::f64));
              if (++k >= 20) break;
            }
            model->train();
          }
          Tensor val_mean = val / double(std::max<int64_t>(k, 1));
          reduce_over_ranks(dist, val_mean, distributed::ReduceOp::avg);
          if (main_rank) {
            const double secs =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("step %lld: train loss %.4f | val loss %.4f | %.0f tokens/s\n",
                        (long long)done, running, val_mean.item(), tokens_seen * dist.world / secs);
          }
        }
        if (main_rank && (done % sample_every == 0 || done == steps))
          std::printf("--- sample at step %lld ---%s\n---\n", (long long)done,
                      sample(*model, corpus, device, 200, 0.8, sampler).c_str());
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
