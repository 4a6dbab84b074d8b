// Data utilities on the CPU: Subset / random_split / ConcatDataset, the samplers (PyTorch's
// DistributedSampler rule on hand-computed streams, permutations, reproducibility per (seed,
// epoch), weighted draws' frequencies), the DataLoader with samplers and batch samplers, mid-epoch
// resume equal to the full epoch's tail, persistent workers, pad_sequence and variable-length
// collation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/data.h"
#include "ember/nn/data_utils.h"
#include "ember/nn/sampler.h"
#include "support/errors.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

std::shared_ptr<data::TensorDataset> numbered(int64_t n, double offset = 0) {
  Tensor x = (arange(double(n)) + offset).reshape({n, 1});
  Tensor y = arange(0, double(10 * n), 10, TensorOptions(DType::i64));
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
}

// Field 0 of every example of `ds`, in order, through get().
std::vector<double> values(const data::Dataset& ds) {
  std::vector<double> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(ds.get(i)[0].item<double>());
  return out;
}

std::vector<std::vector<double>> run_epoch(data::DataLoader& loader) {
  std::vector<std::vector<double>> out;
  while (std::optional<data::Batch> b = loader.next()) out.push_back((*b)[0].to_vector());
  return out;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  for (int64_t k = 0; k < n; ++k)
    if (int64_t(v.size()) != n || v[size_t(k)] != k) return false;
  return true;
}

}  // namespace

TEST_CASE("Subset, random_split, ConcatDataset") {
  auto ds = numbered(10);
  data::Subset sub(ds, {7, 2, 2, 5});
  CHECK(sub.size() == 4);
  CHECK(values(sub) == std::vector<double>{7, 2, 2, 5});
  data::Batch b = sub.get_batch({3, 0}, [](const Shape& s, DType t) { return empty(s, t); });
  CHECK(b[0].to_vector() == std::vector<double>{5, 7});
  CHECK(b[1].to_vector() == std::vector<double>{50, 70});
  CHECK(contains(error_of([&] { data::Subset(ds, {10}); }), "out of range"));
  CHECK(contains(error_of([&] { sub.get(4); }), "out of range"));

  // Lengths: disjoint subsets covering the dataset, reproducible per seed.
  auto parts = data::random_split(ds, std::vector<int64_t>{3, 7}, 5);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0]->size() == 3);
  CHECK(parts[1]->size() == 7);
  std::vector<int64_t> all = parts[0]->indices();
  all.insert(all.end(), parts[1]->indices().begin(), parts[1]->indices().end());
  CHECK(is_permutation_of_range(all, 10));
  CHECK(data::random_split(ds, std::vector<int64_t>{3, 7}, 5)[0]->indices() == parts[0]->indices());
  CHECK(data::random_split(ds, std::vector<int64_t>{3, 7}, 6)[1]->indices() != parts[1]->indices());
  CHECK(contains(error_of([&] {
                   data::random_split(ds, std::vector<int64_t>{3, 6});
                 }),
                 "sum to 9"));
  // Fractions, PyTorch 2: floors, then the remainder round-robin from the first split.
  CHECK(data::split_lengths(10, {0.5, 0.5}) == std::vector<int64_t>{5, 5});
  CHECK(data::split_lengths(10, {0.33, 0.33, 0.34}) == std::vector<int64_t>{4, 3, 3});
  CHECK(data::split_lengths(11, {0.25, 0.25, 0.25, 0.25}) == std::vector<int64_t>{3, 3, 3, 2});
  CHECK(data::split_lengths(5, {0.1, 0.1, 0.8}) == std::vector<int64_t>{1, 0, 4});
  CHECK(data::random_split(ds, std::vector<double>{0.3, 0.7})[0]->size() == 3);
  CHECK(contains(error_of([&] { data::split_lengths(10, {0.5, 0.6}); }), "not 1"));

  // Concatenation: cumulative sizes, get and get_batch routed to the parts.
  data::ConcatDataset cat({numbered(3), numbered(0), numbered(4, 100)});
  CHECK(cat.size() == 7);
  CHECK(cat.cumulative_sizes() == std::vector<int64_t>{3, 3, 7});
  CHECK(values(cat) == std::vector<double>{0, 1, 2, 100, 101, 102, 103});
  CHECK(cat.locate(3) == std::pair<size_t, int64_t>{2, 0});
  data::Batch cb = cat.get_batch({5, 0, 3, 2}, [](const Shape& s, DType t) { return empty(s, t); });
  CHECK(cb[0].to_vector() == std::vector<double>{102, 0, 100, 2});
  CHECK(cb[1].to_vector() == std::vector<double>{20, 0, 0, 20});
  CHECK(contains(error_of([&] { cat.get(7); }), "out of range"));
  data::DataLoader loader(std::make_shared<data::ConcatDataset>(cat),
                          data::DataLoaderOptions(3).shuffle(true).seed(2).num_workers(2));
  std::vector<double> seen;
  for (data::Batch& batch : loader)
    for (double v : batch[0].to_vector()) seen.push_back(v);
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<double>{0, 1, 2, 100, 101, 102, 103});
}

TEST_CASE("DistributedSampler: PyTorch's padding and striding rule") {
  using S = data::DistributedSampler;
  // n = 10, 3 replicas: total 12 = order + its first 2; rank r takes order[r::3].
  CHECK(S(10, 3, 0, false).indices(0) == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(S(10, 3, 1, false).indices(0) == std::vector<int64_t>{1, 4, 7, 0});
  CHECK(S(10, 3, 2, false).indices(0) == std::vector<int64_t>{2, 5, 8, 1});
  // drop_last: truncated to 9.
  CHECK(S(10, 3, 0, false, 0, true).indices(0) == std::vector<int64_t>{0, 3, 6});
  CHECK(S(10, 3, 2, false, 0, true).indices(0) == std::vector<int64_t>{2, 5, 8});
  CHECK(S(10, 3, 1, false, 0, true).size() == 3);
  // Padding longer than the dataset repeats it: n = 2, 5 replicas -> 0 1 0 1 0.
  CHECK(S(2, 5, 2, false).indices(0) == std::vector<int64_t>{0});
  CHECK(S(2, 5, 3, false).indices(0) == std::vector<int64_t>{1});
  CHECK(S(2, 5, 4, false).indices(0) == std::vector<int64_t>{0});
  CHECK(S(2, 5, 4, false, 0, true).indices(0).empty());
  // Even split: no padding.
  CHECK(S(8, 4, 3, false).indices(0) == std::vector<int64_t>{3, 7});
  CHECK(S(7, 2, 1, false).total_size() == 8);
  CHECK(S(7, 2, 1, false).indices(0) == std::vector<int64_t>{1, 3, 5, 0});

  // Shuffled: every rank shares one permutation per (seed, epoch); the ranks cover the dataset.
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> all;
    for (int64_t r = 0; r < 4; ++r) {
      S s(13, 4, r, true, 77);
      s.set_epoch(epoch);
      const std::vector<int64_t> mine = s.indices();
      CHECK(mine.size() == 4);
      CHECK(mine == S(13, 4, r, true, 77).indices(epoch));
      all.insert(all.end(), mine.begin(), mine.end());
    }
    // Interleave back: position i*4 + r of the padded order; the first 13 are a permutation.
    std::vector<int64_t> order(16);
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t i = 0; i < 4; ++i) order[size_t(i * 4 + r)] = all[size_t(r * 4 + i)];
    CHECK(is_permutation_of_range(std::vector<int64_t>(order.begin(), order.begin() + 13), 13));
    CHECK(std::vector<int64_t>(order.begin() + 13, order.end()) ==
          std::vector<int64_t>(order.begin(), order.begin() + 3));
  }
  CHECK(S(13, 4, 0, true, 77).indices(0) != S(13, 4, 0, true, 77).indices(1));
  CHECK(contains(error_of([] { S(10, 3, 3); }), "rank 3"));
  CHECK(contains(error_of([] { S(10, 0, 0); }), "num_replicas"));
}

TEST_CASE("samplers: permutations, reproducibility per (seed, epoch), weighted frequencies") {
  CHECK(data::SequentialSampler(4).indices(3) == std::vector<int64_t>{0, 1, 2, 3});
  data::RandomSampler rs(20, false, std::nullopt, 9);
  CHECK(is_permutation_of_range(rs.indices(0), 20));
  CHECK(rs.indices(0) == data::RandomSampler(20, false, std::nullopt, 9).indices(0));
  CHECK(rs.indices(0) != rs.indices(1));
  CHECK(rs.indices(0) != data::RandomSampler(20, false, std::nullopt, 10).indices(0));
  // num_samples beyond n: whole permutations, then the head of another.
  const std::vector<int64_t> long_stream = data::RandomSampler(5, false, 12, 1).indices(0);
  CHECK(long_stream.size() == 12);
  CHECK(is_permutation_of_range({long_stream.begin(), long_stream.begin() + 5}, 5));
  CHECK(is_permutation_of_range({long_stream.begin() + 5, long_stream.begin() + 10}, 5));
  // With replacement: uniform counts.
  const std::vector<int64_t> draws = data::RandomSampler(4, true, 40000, 3).indices(2);
  std::vector<int64_t> counts(4, 0);
  for (int64_t d : draws) ++counts[size_t(d)];
  for (int64_t c : counts) CHECK(std::abs(c - 10000) < 400);  // ~4.6 sigma

  data::SubsetRandomSampler ss({4, 8, 15, 16, 23, 42}, 5);
  std::vector<int64_t> sub = ss.indices(1);
  std::sort(sub.begin(), sub.end());
  CHECK(sub == std::vector<int64_t>{4, 8, 15, 16, 23, 42});
  CHECK(ss.indices(1) == data::SubsetRandomSampler({4, 8, 15, 16, 23, 42}, 5).indices(1));

  // Weighted with replacement: frequencies follow the weights; zero weights never drawn.
  const std::vector<double> w = {1, 0, 2, 5, 2};
  data::WeightedRandomSampler ws(w, 100000, true, 11);
  std::vector<int64_t> wc(5, 0);
  for (int64_t d : ws.indices(0)) ++wc[size_t(d)];
  CHECK(wc[1] == 0);
  for (size_t k = 0; k < 5; ++k) {
    const double p = w[k] / 10, expected = 100000 * p;
    CHECK(std::abs(double(wc[k]) - expected) <= 5 * std::sqrt(100000 * p * (1 - p)) + 1);
  }
  CHECK(ws.indices(0) == data::WeightedRandomSampler(w, 100000, true, 11).indices(0));
  CHECK(ws.indices(0) != ws.indices(1));
  // Without replacement: distinct indices, positive weights only; the first draw follows the
  // weights (P(first = 3) = 0.5).
  data::WeightedRandomSampler wn(w, 4, false, 12);
  int64_t first_is_3 = 0;
  for (int64_t epoch = 0; epoch < 4000; ++epoch) {
    std::vector<int64_t> s = wn.indices(epoch);
    first_is_3 += s[0] == 3;
    std::sort(s.begin(), s.end());
    CHECK(s == std::vector<int64_t>{0, 2, 3, 4});
  }
  CHECK(std::abs(first_is_3 - 2000) < 160);  // ~5 sigma
  CHECK(contains(error_of([&] { data::WeightedRandomSampler(w, 5, false); }), "4 positive"));
  CHECK(contains(error_of([] { data::WeightedRandomSampler({1, -1}, 1); }), "non-negative"));

  data::BatchSampler bs(std::make_shared<data::SequentialSampler>(7), 3, false);
  CHECK(bs.num_batches() == 3);
  CHECK(bs.batches(0) == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6}});
  data::BatchSampler bd(std::make_shared<data::SequentialSampler>(7), 3, true);
  CHECK(bd.batches(0).size() == 2);
}

TEST_CASE("DataLoader with samplers and batch samplers; drop_last") {
  auto ds = numbered(10);
  auto dist = std::make_shared<data::DistributedSampler>(10, 3, 1, false);
  data::DataLoader a(ds, data::DataLoaderOptions(3).sampler(dist));
  CHECK(a.num_batches() == 2);
  CHECK(run_epoch(a) == std::vector<std::vector<double>>{{1, 4, 7}, {0}});
  data::DataLoader dropping(ds, data::DataLoaderOptions(3).sampler(dist).drop_last(true));
  CHECK(dropping.num_batches() == 1);
  CHECK(run_epoch(dropping) == std::vector<std::vector<double>>{{1, 4, 7}});

  // A random sampler is driven by the loader's epoch: epoch e's batches are the sampler's stream e.
  auto rs = std::make_shared<data::RandomSampler>(10, false, std::nullopt, 4);
  data::DataLoader b(ds, data::DataLoaderOptions(4).sampler(rs).num_workers(2));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<double> flat;
    for (auto& batch : run_epoch(b)) flat.insert(flat.end(), batch.begin(), batch.end());
    std::vector<int64_t> stream = rs->indices(epoch);
    CHECK(flat == std::vector<double>(stream.begin(), stream.end()));
    CHECK(b.epoch_order(epoch) == stream);
    b.start_epoch();
  }

  auto batches = std::make_shared<data::BatchSampler>(
      std::make_shared<data::SubsetRandomSampler>(std::vector<int64_t>{1, 3, 5, 7, 9}, 8), 2, true);
  data::DataLoader c(ds, data::DataLoaderOptions().batch_sampler(batches).num_workers(1));
  CHECK(c.num_batches() == 2);
  std::vector<std::vector<double>> got = run_epoch(c);
  const auto expected = batches->batches(0);
  REQUIRE(got.size() == 2);
  for (size_t k = 0; k < 2; ++k)
    CHECK(got[k] == std::vector<double>(expected[k].begin(), expected[k].end()));

  CHECK(contains(error_of([&] {
                   data::DataLoader(ds, data::DataLoaderOptions(2).sampler(dist).shuffle(true));
                 }),
                 "mutually exclusive with shuffle"));
  CHECK(contains(
      error_of([&] { data::DataLoader(ds, data::DataLoaderOptions(2).batch_sampler(batches)); }),
      "batch_sampler"));
  CHECK(contains(
      error_of([&] { data::DataLoader(ds, data::DataLoaderOptions(2).persistent_workers(true)); }),
      "num_workers > 0"));
}

TEST_CASE("DataLoader: a mid-epoch start equals the tail of the full epoch") {
  auto ds = numbered(23);
  for (int64_t workers : {0, 2}) {
    for (bool persistent : {false, true}) {
      if (persistent && workers == 0) continue;
      CAPTURE(workers);
      CAPTURE(persistent);
      auto opts = data::DataLoaderOptions(4)
                      .shuffle(true)
                      .seed(31)
                      .num_workers(workers)
                      .persistent_workers(persistent)
                      .transform([](const Tensor& x, uint64_t seed) {
                        return x + double(seed % 997) * 1000;
                      });
      data::DataLoader full(ds, opts);
      full.set_epoch(2);
      full.start_epoch();
      const auto whole = run_epoch(full);
      REQUIRE(whole.size() == 6);
      for (int64_t first : {0, 1, 4, 6}) {
        data::DataLoader resumed(ds, opts);
        resumed.set_epoch(2);
        resumed.start_epoch(first);
        CHECK(resumed.epoch() == 2);
        CHECK(run_epoch(resumed) ==
              std::vector<std::vector<double>>(whole.begin() + first, whole.end()));
      }
      // Through range-for: set_start_batch applies to the next begin() only.
      data::DataLoader ranged(ds, opts);
      ranged.set_epoch(2);
      ranged.set_start_batch(3);
      std::vector<std::vector<double>> tail;
      for (data::Batch& batch : ranged) tail.push_back(batch[0].to_vector());
      CHECK(tail == std::vector<std::vector<double>>(whole.begin() + 3, whole.end()));
      int64_t next_epoch_batches = 0;
      for (data::Batch& batch : ranged) next_epoch_batches += batch[0].numel() > 0;
      CHECK(next_epoch_batches == 6);
      CHECK(contains(error_of([&] { ranged.start_epoch(7); }), "out of range"));
    }
  }
}

TEST_CASE("DataLoader: persistent workers serve every epoch") {
  // Records which threads read examples.
  struct Recording : data::Dataset {
    mutable std::mutex mutex;
    mutable std::set<std::thread::id> threads;
    int64_t size() const override { return 12; }
    data::Example get(int64_t index) const override {
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
      return {full({1}, double(index))};
    }
  };
  auto ds = std::make_shared<Recording>();
  auto opts = data::DataLoaderOptions(2).shuffle(true).seed(3).num_workers(2);
  data::DataLoader persistent(ds, data::DataLoaderOptions(opts).persistent_workers(true));
  data::DataLoader restarted(numbered(12), opts);
  for (int epoch = 0; epoch < 4; ++epoch) {
    std::vector<double> seen;
    for (data::Batch& b : persistent)
      for (double v : b[0].to_vector()) seen.push_back(v);
    std::sort(seen.begin(), seen.end());
    CHECK(seen.size() == 12);
    CHECK(seen.front() == 0);
    CHECK(seen.back() == 11);
    for (data::Batch& b : restarted) CHECK(b[0].numel() == 2);
  }
  CHECK(persistent.workers_started() == 2);
  CHECK(restarted.workers_started() == 8);
  CHECK(ds->threads.size() <= 2);
  CHECK(ds->threads.count(std::this_thread::get_id()) == 0);
  // Abandoning an epoch half-way and starting another keeps the same threads and the right order.
  persistent.set_epoch(7);
  persistent.start_epoch();
  CHECK(persistent.next().has_value());
  persistent.set_epoch(1);
  persistent.start_epoch();
  std::vector<double> flat;
  while (auto b = persistent.next())
    for (double v : (*b)[0].to_vector()) flat.push_back(v);
  const std::vector<int64_t> order = persistent.epoch_order(1);
  CHECK(flat == std::vector<double>(order.begin(), order.end()));
  CHECK(persistent.workers_started() == 2);
}

TEST_CASE("pad_sequence and variable-length collation") {
  using nn::utils::rnn::pad_sequence;
  const Tensor a = tensor({1.0, 2.0, 3.0}), b = tensor({4.0}), c = tensor({5.0, 6.0});
  const Tensor right = pad_sequence({a, b, c}, true, -1);
  CHECK(right.sizes() == Shape{3, 3});
  CHECK(right.to_vector() == std::vector<double>{1, 2, 3, 4, -1, -1, 5, 6, -1});
  const Tensor left = pad_sequence({a, b, c}, true, 0, "left");
  CHECK(left.to_vector() == std::vector<double>{1, 2, 3, 0, 0, 4, 0, 5, 6});
  const Tensor time_major = pad_sequence({a, b, c});
  CHECK(time_major.sizes() == Shape{3, 3});
  CHECK(time_major.to_vector() == std::vector<double>{1, 4, 5, 2, 0, 6, 3, 0, 0});
  // Trailing dims kept.
  const Tensor f = pad_sequence({ones({2, 2}), ones({1, 2})}, true, 9);
  CHECK(f.sizes() == Shape{2, 2, 2});
  CHECK(f.to_vector() == std::vector<double>{1, 1, 1, 1, 1, 1, 9, 9});
  CHECK(contains(error_of([&] { pad_sequence({ones({2, 2}), ones({2, 3})}); }), "trailing"));
  CHECK(contains(error_of([&] { pad_sequence({a}, false, 0, "middle"); }), "padding_side"));
  // Differentiable.
  const Tensor x = tensor({1.0, 2.0}).requires_grad_(true);
  pad_sequence({x, b}, true).sum().backward();
  CHECK(x.grad().to_vector() == std::vector<double>{1, 1});

  // Sequences of lengths 1..5 collated by padding, with their lengths as a second field.
  struct Ragged : data::Dataset {
    int64_t size() const override { return 5; }
    data::Example get(int64_t i) const override {
      return {full({i + 1}, double(i + 1)), tensor({double(i + 1)})};
    }
  };
  auto collate = [](const std::vector<data::Example>& examples) {
    std::vector<Tensor> seqs, lengths;
    for (const data::Example& e : examples) {
      seqs.push_back(e[0]);
      lengths.push_back(e[1]);
    }
    return data::Batch{pad_sequence(seqs, true), cat(lengths, 0)};
  };
  for (int64_t workers : {0, 2}) {
    data::DataLoader loader(std::make_shared<Ragged>(),
                            data::DataLoaderOptions(2).collate(collate).num_workers(workers));
    std::vector<Shape> shapes;
    for (data::Batch& batch : loader) shapes.push_back(batch[0].sizes());
    CHECK(shapes == std::vector<Shape>{{2, 2}, {2, 4}, {1, 5}});
    loader.start_epoch(1);
    data::Batch second = *loader.next();
    CHECK(second[0].to_vector() == std::vector<double>{3, 3, 3, 0, 4, 4, 4, 4});
    CHECK(second[1].to_vector() == std::vector<double>{3, 4});
  }
}
