// Dataset, TensorDataset and DataLoader (nn/data.h): Philox-seeded epoch orders, worker threads
// that collate batches ahead into (pinned) host memory, and asynchronous copies to the GPU on a
// side stream with one batch of prefetch.
#include "ember/nn/data.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "ember/nn/pinned_memory.h"
#include "ember/ops/ops.h"
#include "ember/tensor/parallel.h"
#include "ember/tensor/philox.h"
#include "ember/tensor/runtime/allocator.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::data {

namespace {

// Copies the bytes of `src` (any layout, CPU) into `dst` (dense, row of a batch).
void copy_row(char* dst, const Tensor& src) {
  const Tensor dense = src.is_contiguous() ? src : src.contiguous();
  std::memcpy(dst, dense.data_ptr(), dense.nbytes());
}

Shape with_leading(int64_t n, const Shape& rest) {
  Shape s{n};
  s.insert(s.end(), rest.begin(), rest.end());
  return s;
}

// 64 random bits for (seed, stream, counter): Philox4x32-10 as a hash, so every epoch order and
// every batch's augmentation seed is a pure function of its coordinates.
uint64_t philox_bits(uint64_t seed, uint64_t stream, uint64_t counter) {
  const philox::U32x4 r = philox::draw4(seed, stream, 4 * counter);
  return (uint64_t(r.x) << 32) | r.y;
}

// What the loader derives from its seed, kept apart by the stream number.
constexpr uint64_t kShuffleStream = 0x5348554646ull;    // "SHUFF"
constexpr uint64_t kTransformStream = 0x5452414e53ull;  // "TRANS"

}  // namespace

// ---- Dataset, TensorDataset
// ------------------------------------------------------------------------

Batch Dataset::get_batch(const std::vector<int64_t>& indices, const BatchAllocator& alloc) const {
  Batch batch;
  const int64_t n = int64_t(indices.size());
  for (int64_t i = 0; i < n; ++i) {
    Example example = get(indices[size_t(i)]);
    if (i == 0) {
      EMBER_CHECK(!example.empty(), "Dataset::get_batch: example ", indices[0], " has no fields");
      for (const Tensor& field : example) {
        EMBER_CHECK(field.defined(), "Dataset::get_batch: example ", indices[0],
                    " has an undefined field");
        batch.push_back(alloc(with_leading(n, field.sizes()), field.dtype()));
      }
    }
    EMBER_CHECK(example.size() == batch.size(), "Dataset::get_batch: example ", indices[size_t(i)],
                " has ", example.size(), " fields but example ", indices[0], " has ", batch.size());
    for (size_t f = 0; f < batch.size(); ++f) {
      Tensor field = example[f];
      EMBER_CHECK(
          field.defined() &&
              field.sizes() == Shape(batch[f].sizes().begin() + 1, batch[f].sizes().end()) &&
              field.dtype() == batch[f].dtype(),
          "Dataset::get_batch: field ", f, " of example ", indices[size_t(i)], " (",
          field.defined() ? field.shape_str() : "undefined", ", ",
          field.defined() ? dtype_name(field.dtype()) : "", ") does not match example ", indices[0],
          "'s (", shape_str(Shape(batch[f].sizes().begin() + 1, batch[f].sizes().end())), ", ",
          dtype_name(batch[f].dtype()), "); examples of one batch must agree");
      if (!field.device().is_cpu()) field = field.cpu();
      copy_row(static_cast<char*>(batch[f].data_ptr()) + size_t(i) * field.nbytes(), field);
    }
  }
  return batch;
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) { set_tensors(std::move(tensors)); }

void TensorDataset::set_tensors(std::vector<Tensor> tensors) {
  EMBER_CHECK(!tensors.empty(), "TensorDataset: give at least one tensor");
  for (size_t k = 0; k < tensors.size(); ++k) {
    Tensor& t = tensors[k];
    EMBER_CHECK(t.defined() && t.dim() >= 1, "TensorDataset: tensor ", k,
                " must have at least one "
                "dim (its first dim indexes the examples)");
    EMBER_CHECK(t.size(0) == tensors[0].size(0), "TensorDataset: tensor ", k, " has ", t.size(0),
                " examples (shape ", t.shape_str(), ") but tensor 0 has ", tensors[0].size(0));
    t = t.detach();
    if (!t.device().is_cpu()) t = t.cpu();
    if (!t.is_contiguous()) t = t.contiguous();
  }
  size_ = tensors[0].size(0);
  tensors_ = std::move(tensors);
}

Example TensorDataset::get(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size_, "TensorDataset::get: index ", index,
              " is out of range [0, ", size_, ")");
  Example out;
  for (const Tensor& t : tensors_) out.push_back(t.select(0, index));
  return out;
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices,
                               const BatchAllocator& alloc) const {
  Batch batch;
  const int64_t n = int64_t(indices.size());
  for (const Tensor& t : tensors_) {
    Tensor out = alloc(with_leading(n, Shape(t.sizes().begin() + 1, t.sizes().end())), t.dtype());
    const size_t row_bytes = size_t(t.numel() / std::max<int64_t>(size_, 1)) * t.element_size();
    const char* src = static_cast<const char*>(t.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t index = indices[size_t(i)];
      EMBER_CHECK(index >= 0 && index < size_, "TensorDataset::get_batch: index ", index,
                  " is out of range [0, ", size_, ")");
      std::memcpy(dst + size_t(i) * row_bytes, src + size_t(index) * row_bytes, row_bytes);
    }
    batch.push_back(out);
  }
  return batch;
}

// ---- DataLoader
// -------------------------------------------------------------------------------------

struct DataLoader::State {
  std::shared_ptr<const Dataset> dataset;
  DataLoaderOptions options;
  int64_t dataset_size = 0;
  int64_t next_epoch = 0;
  int64_t next_start_batch = 0;
  int64_t epoch = -1;
  int64_t workers_started = 0;

  // The running epoch: batch b holds order[batch_begin[b] .. batch_begin[b + 1]). Written only
  // while no worker is producing (workers stopped, or persistent workers paused and idle).
  std::vector<int64_t> order;
  std::vector<int64_t> batch_begin;
  int64_t total_batches = 0;
  int64_t cursor = 0;  // next batch next() returns
  std::mutex mutex;
  std::condition_variable work_cv, ready_cv;
  int64_t next_to_produce = 0;
  int64_t delivered = 0;  // batches taken by the consumer (workers stay within a window of it)
  int64_t busy = 0;       // workers producing a batch
  bool stop = false;
  bool paused = false;  // persistent workers between epochs
  struct HostBatch {
    Batch tensors;
    std::exception_ptr error;
  };
  std::map<int64_t, HostBatch> ready;
  std::vector<std::thread> workers;

  // GPU delivery.
  std::optional<Stream> copy_stream;
  struct DeviceBatch {
    Batch device, host;
    Event copied;
  };
  std::optional<std::pair<int64_t, DeviceBatch>> prefetched;
  // Host buffers whose copies may still be reading them (pinned blocks must not be reused early).
  std::deque<std::pair<Batch, Event>> in_flight;

  bool pinned() const { return options.pin_memory() || options.device().is_cuda(); }

  int64_t num_batches() const {
    if (options.batch_sampler()) return options.batch_sampler()->num_batches();
    const int64_t n = options.sampler() ? options.sampler()->size() : dataset_size;
    const int64_t b = options.batch_size();
    return options.drop_last() ? n / b : (n + b - 1) / b;
  }

  // The order of `epoch` and where each batch begins in it (batch_begin has one entry more).
  void plan(int64_t e, std::vector<int64_t>& out_order, std::vector<int64_t>& begins) const {
    out_order.clear();
    begins.assign(1, 0);
    if (const auto& bs = options.batch_sampler()) {
      for (std::vector<int64_t>& batch : bs->batches(e)) {
        out_order.insert(out_order.end(), batch.begin(), batch.end());
        begins.push_back(int64_t(out_order.size()));
      }
      return;
    }
    if (const auto& sampler = options.sampler()) {
      out_order = sampler->indices(e);
    } else {
      out_order.resize(size_t(dataset_size));
      std::iota(out_order.begin(), out_order.end(), int64_t(0));
      if (options.shuffle()) {
        const uint64_t key = philox_bits(options.seed(), kShuffleStream, uint64_t(e));
        for (size_t i = out_order.size(); i > 1; --i) {
          // 64 random bits modulo i: the bias is below i / 2^64, far under anything measurable.
          const size_t j = size_t(philox_bits(key, uint64_t(i - 1), 0) % uint64_t(i));
          std::swap(out_order[i - 1], out_order[j]);
        }
      }
    }
    const int64_t n = int64_t(out_order.size()), nb = num_batches();
    for (int64_t b = 0; b < nb; ++b) begins.push_back(std::min(n, (b + 1) * options.batch_size()));
  }

  uint64_t batch_seed(int64_t batch) const {
    return philox_bits(philox_bits(options.seed(), kTransformStream, uint64_t(epoch)),
                       uint64_t(batch), 0);
  }

  Batch make_host_batch(int64_t b) {
    const std::vector<int64_t> indices(order.begin() + batch_begin[size_t(b)],
                                       order.begin() + batch_begin[size_t(b) + 1]);
    const bool transform = bool(options.transform()), collate = bool(options.collate());
    // Without a transform or a collate function the batch is collated straight into pinned memory.
    BatchAllocator alloc =
        pinned() && !transform && !collate
            ? BatchAllocator([](const Shape& s, DType t) { return empty_pinned(s, t); })
            : BatchAllocator([](const Shape& s, DType t) { return empty(s, t, Device::cpu()); });
    Batch batch;
    if (collate) {
      std::vector<Example> examples;
      examples.reserve(indices.size());
      for (int64_t index : indices) examples.push_back(dataset->get(index));
      batch = options.collate()(examples);
      for (size_t f = 0; f < batch.size(); ++f)
        EMBER_CHECK(batch[f].defined() && batch[f].device().is_cpu(), "DataLoader: field ", f,
                    " of the collate function's batch must be a defined CPU tensor");
    } else {
      batch = dataset->get_batch(indices, alloc);
    }
    if (transform) {
      const int64_t field = options.transform_field();
      EMBER_CHECK(field >= 0 && field < int64_t(batch.size()), "DataLoader: transform_field ",
                  field, " is out of range for batches of ", batch.size(), " fields");
      Tensor out = options.transform()(batch[size_t(field)], batch_seed(b));
      EMBER_CHECK(out.defined() && out.device().is_cpu() && out.dim() >= 1 &&
                      out.size(0) == batch[size_t(field)].size(0),
                  "DataLoader: the transform must return a CPU tensor with the batch's leading "
                  "dim ",
                  batch[size_t(field)].size(0), ", got ",
                  out.defined() ? out.shape_str() : "undefined");
      batch[size_t(field)] = out;
    }
    if (pinned() && (transform || collate)) {
      for (Tensor& t : batch)
        if (!is_pinned(t)) {
          Tensor staged = empty_pinned(t.sizes(), t.dtype());
          copy_row(static_cast<char*>(staged.data_ptr()), t);
          t = staged;
        }
    }
    return batch;
  }

  void worker_loop() {
    // The workers already run beside the training thread: their ops stay on their own thread
    // rather than queueing for (or crowding) the CPU thread pool.
    InlineParallelScope inline_ops;
    const int64_t window = options.num_workers() * options.prefetch_factor();
    const bool persistent = options.persistent_workers();
    for (;;) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mutex);
        // Persistent workers outlive the epoch: they wait for the next one instead of returning.
        work_cv.wait(lock, [&] {
          return stop || (!persistent && next_to_produce >= total_batches) ||
                 (!paused && next_to_produce < total_batches &&
                  next_to_produce < delivered + window);
        });
        if (stop || next_to_produce >= total_batches) return;
        b = next_to_produce++;
        ++busy;
      }
      HostBatch hb;
      try {
        hb.tensors = make_host_batch(b);
      } catch (...) {
        hb.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        --busy;
        ready.emplace(b, std::move(hb));
      }
      ready_cv.notify_all();
    }
  }

  void drop_prefetched() {
    ready.clear();
    if (prefetched) retire(std::move(prefetched->second));
    prefetched.reset();
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    work_cv.notify_all();
    for (std::thread& t : workers) t.join();
    workers.clear();
    drop_prefetched();
  }

  // Persistent workers: stop handing out batches and wait until none is being produced, so the
  // epoch's order can be replaced.
  void pause_workers() {
    std::unique_lock<std::mutex> lock(mutex);
    paused = true;
    ready_cv.wait(lock, [&] { return busy == 0; });
    drop_prefetched();
  }

  // Batch b's host tensors, from a worker (waiting for it, or nullopt when `wait` is false and it
  // is not ready) or collated here without workers.
  std::optional<Batch> take_host(int64_t b, bool wait) {
    if (options.num_workers() == 0) {
      if (!wait) return std::nullopt;
      return make_host_batch(b);
    }
    HostBatch hb;
    {
      std::unique_lock<std::mutex> lock(mutex);
      if (wait) ready_cv.wait(lock, [&] { return ready.count(b) != 0; });
      auto it = ready.find(b);
      if (it == ready.end()) return std::nullopt;
      hb = std::move(it->second);
      ready.erase(it);
      delivered = std::max(delivered, b + 1);
    }
    work_cv.notify_all();
    if (hb.error) std::rethrow_exception(hb.error);
    return std::move(hb.tensors);
  }

  DeviceBatch copy_to_device(Batch host) {
    const Device device = options.device();
    if (!copy_stream) copy_stream = new_stream(device);
    DeviceBatch db;
    {
      StreamGuard guard(*copy_stream);
      for (const Tensor& t : host) {
        Tensor d = empty(t.sizes(), t.dtype(), device);
        d.copy_(t);  // pinned source: an asynchronous cudaMemcpyAsync on the copy stream
        db.device.push_back(d);
      }
    }
    db.copied.record(*copy_stream);
    db.host = std::move(host);
    return db;
  }

  // Keeps a delivered batch's host tensors until its copy has finished.
  void retire(DeviceBatch&& db) {
    in_flight.emplace_back(std::move(db.host), std::move(db.copied));
    while (!in_flight.empty() && in_flight.front().second.query()) in_flight.pop_front();
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options)
    : state_(std::make_unique<State>()) {
  EMBER_CHECK(dataset != nullptr, "DataLoader: the dataset is null");
  EMBER_CHECK(options.batch_size() > 0, "DataLoader: batch_size ", options.batch_size(),
              " must be positive");
  EMBER_CHECK(options.num_workers() >= 0, "DataLoader: num_workers ", options.num_workers(),
              " is negative");
  EMBER_CHECK(options.prefetch_factor() > 0, "DataLoader: prefetch_factor ",
              options.prefetch_factor(), " must be positive");
  if (options.device().is_cuda()) cuda::check_device(options.device());
  EMBER_CHECK(!(options.sampler() && options.shuffle()),
              "DataLoader: the sampler option is mutually exclusive with shuffle; shuffle through "
              "the sampler (e.g. RandomSampler) instead");
  EMBER_CHECK(!options.batch_sampler() || (options.batch_size() == 1 && !options.shuffle() &&
                                           !options.sampler() && !options.drop_last()),
              "DataLoader: the batch_sampler option is mutually exclusive with batch_size (other "
              "than 1), shuffle, sampler and drop_last; set those on the BatchSampler");
  EMBER_CHECK(!options.persistent_workers() || options.num_workers() > 0,
              "DataLoader: persistent_workers needs num_workers > 0");
  state_->dataset = std::move(dataset);
  state_->options = options;
  state_->dataset_size = state_->dataset->size();
  EMBER_CHECK(state_->dataset_size >= 0, "DataLoader: the dataset reports a negative size");
}

DataLoader::~DataLoader() {
  state_->stop_workers();
  // Pinned blocks go back to the cache when their tensors die: wait for the copies reading them.
  for (auto& entry : state_->in_flight) entry.second.synchronize();
}

const DataLoaderOptions& DataLoader::options() const { return state_->options; }
const Dataset& DataLoader::dataset() const { return *state_->dataset; }
int64_t DataLoader::num_batches() const { return state_->num_batches(); }
int64_t DataLoader::epoch() const { return state_->epoch; }

void DataLoader::set_epoch(int64_t epoch) {
  EMBER_CHECK(epoch >= 0, "DataLoader::set_epoch: epoch ", epoch, " is negative");
  state_->next_epoch = epoch;
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  EMBER_CHECK(epoch >= 0, "DataLoader::epoch_order: epoch ", epoch, " is negative");
  std::vector<int64_t> order, begins;
  state_->plan(epoch, order, begins);
  return order;
}

int64_t DataLoader::workers_started() const { return state_->workers_started; }

void DataLoader::set_start_batch(int64_t first_batch) {
  EMBER_CHECK(first_batch >= 0 && first_batch <= num_batches(),
              "DataLoader::set_start_batch: ", "batch ", first_batch, " is out of range [0, ",
              num_batches(), "]");
  state_->next_start_batch = first_batch;
}

void DataLoader::start_epoch(int64_t first_batch) {
  State& s = *state_;
  const int64_t total = s.num_batches();
  EMBER_CHECK(first_batch >= 0 && first_batch <= total, "DataLoader::start_epoch: first batch ",
              first_batch, " is out of range [0, ", total, "] (", total, " batches per epoch)");
  const bool keep_workers = s.options.persistent_workers() && !s.workers.empty();
  if (keep_workers)
    s.pause_workers();
  else
    s.stop_workers();
  const int64_t epoch = s.next_epoch;
  std::vector<int64_t> order, begins;
  s.plan(epoch, order, begins);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.epoch = epoch;
    s.next_epoch = epoch + 1;
    s.order = std::move(order);
    s.batch_begin = std::move(begins);
    s.total_batches = int64_t(s.batch_begin.size()) - 1;
    s.cursor = first_batch;
    s.next_to_produce = first_batch;
    s.delivered = first_batch;
    s.stop = false;
    s.paused = false;
  }
  if (keep_workers) {
    s.work_cv.notify_all();
    return;
  }
  for (int64_t w = 0; w < s.options.num_workers(); ++w) {
    s.workers.emplace_back([&s] { s.worker_loop(); });
    ++s.workers_started;
  }
}

std::optional<Batch> DataLoader::next() {
  State& s = *state_;
  if (s.epoch < 0) start_epoch();
  const int64_t total = s.total_batches;
  if (s.cursor >= total) return std::nullopt;
  const int64_t b = s.cursor++;
  if (!s.options.device().is_cuda()) return s.take_host(b, true);

  State::DeviceBatch db;
  if (s.prefetched && s.prefetched->first == b) {
    db = std::move(s.prefetched->second);
    s.prefetched.reset();
  } else {
    db = s.copy_to_device(*s.take_host(b, true));
  }
  // Start the next batch's copy now if a worker has it ready, so it overlaps this step.
  if (b + 1 < total && !s.prefetched)
    if (std::optional<Batch> host = s.take_host(b + 1, false))
      s.prefetched.emplace(b + 1, s.copy_to_device(std::move(*host)));
  const Stream compute = current_stream(s.options.device());
  db.copied.wait(compute);
  for (const Tensor& t : db.device)
    if (t.numel() > 0) cuda::record_stream(t.storage()->data.ptr, compute);
  Batch out = db.device;
  s.retire(std::move(db));
  return out;
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader) {
  if (loader_ != nullptr) ++*this;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  current_ = loader_->next();
  if (!current_) loader_ = nullptr;
  return *this;
}

DataLoader::Iterator DataLoader::begin() {
  const int64_t first = state_->next_start_batch;
  state_->next_start_batch = 0;
  start_epoch(first);
  return Iterator(this);
}

}  // namespace ember::data
