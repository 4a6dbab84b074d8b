// Datasets and the DataLoader, as torch.utils.data: a Dataset gives examples (tuples of CPU
// tensors), TensorDataset serves tensors sharing their first dim, and DataLoader batches them:
//   - order: sequential, or a seeded shuffle per epoch (Fisher-Yates driven by Philox counters,
//     tensor/philox.h: epoch e of seed s is the same permutation on every machine and run);
//   - batching: each field of the examples stacked along a new leading dim; drop_last drops a
//     final partial batch;
//   - worker threads: num_workers threads collate (and transform) batches ahead of the consumer,
//     up to num_workers * prefetch_factor batches; batches come out in order whatever the number
//     of workers, so results do not depend on it;
//   - augmentation: an optional transform of one field (nn/transforms.h), run by the workers with
//     a seed that is a function of (loader seed, epoch, batch index) only;
//   - samplers (nn/sampler.h): a sampler gives the epoch's index stream (instead of shuffle), or a
//     batch sampler gives its batches (instead of batch_size, shuffle, sampler and drop_last);
//   - collation: a collate function turns the examples of a batch into the batch, for examples
//     that cannot be stacked (e.g. sequences of different lengths, padded by
//     nn::utils::rnn::pad_sequence of nn/data_utils.h);
//   - resuming: start_epoch(first_batch) starts an epoch at a given batch; the batches from there
//     are exactly the tail of the full epoch (order and transform seeds depend on the epoch and
//     the batch index only);
//   - persistent_workers: the worker threads are started once and serve every epoch, instead of
//     being started at each epoch's start and ended at its end;
//   - GPU delivery: with device(cuda) batches are collated in pinned host memory
//     (nn/pinned_memory.h), copied asynchronously on a side stream, and the next batch's copy is
//     started as soon as it is ready (prefetch), so copies overlap the training step; the
//     consumer's current stream waits on an event (no host sync), and the device tensors are
//     recorded on it so the caching allocator does not reuse them early.
//
//   auto train = std::make_shared<data::MNIST>(data::default_fashion_mnist_folder(),
//   data::Split::train); data::DataLoader loader(train,
//   data::DataLoaderOptions(128).shuffle(true).num_workers(2)
//                                      .device(Device::cuda()).seed(1));
//   for (int epoch = 0; epoch < epochs; ++epoch)
//     for (data::Batch& batch : loader) { Tensor x = batch[0], y = batch[1]; ... }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ember/nn/options.h"
#include "ember/nn/sampler.h"
#include "ember/tensor/tensor.h"

namespace ember::data {

// One example: its fields (e.g. {image, label}), CPU tensors.
using Example = std::vector<Tensor>;
// A batch: field k of every example stacked along a new leading dim.
using Batch = std::vector<Tensor>;
// Makes the (contiguous CPU) tensors a batch is written into.
using BatchAllocator = std::function<Tensor(const Shape& sizes, DType dtype)>;
// A seeded transform of one batch field (see nn/transforms.h): deterministic in the seed.
using Transform = std::function<Tensor(const Tensor& field, uint64_t seed)>;
// Turns the examples of one batch (in batch order) into the batch's fields (CPU tensors).
using Collate = std::function<Batch(const std::vector<Example>& examples)>;

// A map-style dataset, as torch.utils.data.Dataset: size() examples addressed by index. Derive
// and give size() and get(); override get_batch for a faster batched read.
class Dataset {
 public:
  virtual ~Dataset() = default;
  // The number of examples (PyTorch's __len__).
  virtual int64_t size() const = 0;
  // Example `index`, 0 <= index < size(). The loader's workers call it concurrently.
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices` collated into a batch whose tensors come from `alloc`. The default
  // copies each get() result in (examples must agree in field count, shapes and dtypes; an
  // example that does not is an error naming its index); TensorDataset copies rows directly.
  virtual Batch get_batch(const std::vector<int64_t>& indices, const BatchAllocator& alloc) const;
};

// Tensors that share their first dim; example i is {t[i] for each tensor t}. The tensors are kept
// as contiguous CPU tensors.
class TensorDataset : public Dataset {
 public:
  // Errors when there are no tensors, one is 0-d, or they differ in their first dim; keeps them
  // detached, as contiguous CPU tensors (copying those that are not).
  explicit TensorDataset(std::vector<Tensor> tensors);
  // The shared first dim.
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices, const BatchAllocator& alloc) const override;
  // The tensors served (contiguous, on the CPU), in the order given.
  const std::vector<Tensor>& tensors() const { return tensors_; }

 protected:
  TensorDataset() = default;
  void set_tensors(std::vector<Tensor> tensors);  // for derived readers

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

// The options of DataLoader, as torch.utils.data.DataLoader's arguments (with their defaults);
// see the file comment for what each feature does.
struct DataLoaderOptions {
  // batch_size defaults to 1, as PyTorch.
  explicit DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}
  EMBER_ARG(int64_t, batch_size);      // examples per batch, > 0
  EMBER_ARG(bool, shuffle) = false;    // a seeded random order per epoch instead of 0..size-1
  EMBER_ARG(bool, drop_last) = false;  // drop a final batch smaller than batch_size
  // Threads that collate batches ahead (0: the consumer collates each batch when asked).
  EMBER_ARG(int64_t, num_workers) = 0;
  // Batches prepared ahead per worker.
  EMBER_ARG(int64_t, prefetch_factor) = 2;
  // Seeds the shuffle and the transform; epoch e of a seed always gives the same batches.
  EMBER_ARG(uint64_t, seed) = 0;
  // Where batches are delivered. A GPU: pinned staging, asynchronous copies, prefetch.
  EMBER_ARG(Device, device) = Device::cpu();
  // Collate CPU-delivered batches in pinned memory too (GPU-bound batches always are).
  EMBER_ARG(bool, pin_memory) = false;
  // Applied to field `transform_field` of every batch by the workers (CPU tensors).
  EMBER_ARG(Transform, transform);
  EMBER_ARG(int64_t, transform_field) = 0;
  // The epoch's index stream (mutually exclusive with shuffle, as PyTorch).
  EMBER_ARG(std::shared_ptr<const Sampler>, sampler);
  // The epoch's batches (mutually exclusive with batch_size other than 1, shuffle, sampler and
  // drop_last, as PyTorch).
  EMBER_ARG(std::shared_ptr<const BatchSampler>, batch_sampler);
  // Collates the examples (Dataset::get) of each batch instead of Dataset::get_batch's stacking.
  EMBER_ARG(Collate, collate);
  // Keep the worker threads alive across epochs instead of restarting them at each epoch.
  EMBER_ARG(bool, persistent_workers) = false;
};

// Batches a Dataset as torch.utils.data.DataLoader (see the file comment). Not copyable; it owns
// its worker threads, which it stops when destroyed.
class DataLoader {
 public:
  // Shares the dataset; errors on a null dataset or invalid options (batch_size,
  // prefetch_factor or num_workers out of range, sampler options that exclude each other,
  // persistent_workers without workers).
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  const DataLoaderOptions& options() const;  // the options it was built with
  const Dataset& dataset() const;            // the dataset it reads
  int64_t num_batches() const;               // per epoch
  // The epoch the next start (begin() or start_epoch()) begins; each start otherwise begins the
  // epoch after the previous one, from 0. Use it to resume mid-training.
  void set_epoch(int64_t epoch);
  // The epoch being iterated (-1 before the first start).
  int64_t epoch() const;
  // Worker threads started so far (persistent workers: num_workers once; otherwise per epoch).
  int64_t workers_started() const;
  // The example order of `epoch`: 0..size-1, its seeded shuffle, or the sampler's stream (the
  // batch sampler's batches one after another).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // Starts an epoch (abandoning an unfinished one) at batch `first_batch`, then next() yields its
  // batches in order from there and std::nullopt at its end: the same batches as a full epoch's
  // tail. A worker's exception is rethrown by the next() that reaches its batch.
  void start_epoch(int64_t first_batch = 0);
  // The batch the next begin() starts at (once; later begin()s start at 0), for resuming a
  // range-for loop mid-epoch.
  void set_start_batch(int64_t first_batch);
  std::optional<Batch> next();

  // Range-for over one epoch: `for (Batch& b : loader)`; each begin() starts the next epoch.
  class Iterator {
   public:
    // The current batch: its fields, on options().device().
    Batch& operator*() { return *current_; }
    Batch* operator->() { return &*current_; }
    // Fetches the next batch (next()); at the epoch's end the iterator becomes end().
    Iterator& operator++();
    // Iterators compare equal when both are at the end (or on the same loader).
    bool operator==(const Iterator& o) const { return loader_ == o.loader_; }
    bool operator!=(const Iterator& o) const { return loader_ != o.loader_; }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader);
    DataLoader* loader_;  // null at the end
    std::optional<Batch> current_;
  };
  // Starts the next epoch (or the set_epoch / set_start_batch one) and returns its first batch.
  Iterator begin();
  // The end of any epoch.
  Iterator end() { return Iterator(nullptr); }

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ember::data
