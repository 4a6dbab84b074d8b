// DistributedDataParallel's reducer: buckets, hooks, overlap with backward, and the sampler.
#include "distributed/ddp.h"

#include <algorithm>
#include <numeric>

#include "tensor/generator.h"

namespace ember::distributed {

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> params;  // indices into `params`
    std::vector<int64_t> offsets;
    Tensor flat;
    size_t pending = 0;
    bool launched = false;
    Event done;
  };

  std::shared_ptr<ProcessGroup> group;
  DDPOptions options;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;  // param index -> bucket
  std::vector<bool> ready;
  std::vector<size_t> ready_order;  // first iteration's order, to rebuild buckets
  bool in_backward = false, no_sync = false, rebuilt = false;
  Device device;
  Stream comm_stream;
  DDPStats stats;

  void build_buckets(const std::vector<size_t>& order) {
    buckets.clear();
    bucket_of.assign(params.size(), 0);
    size_t cap = options.first_bucket_bytes;
    for (size_t i : order) {
      const Tensor& p = params[i];
      const size_t bytes = p.nbytes();
      bool fits = !buckets.empty() &&
                  params[buckets.back().params.front()].dtype() == p.dtype() &&
                  buckets.back().offsets.back() * int64_t(p.element_size()) + int64_t(bytes) <= int64_t(cap);
      if (!fits) {
        if (!buckets.empty()) cap = options.bucket_cap_bytes;
        buckets.emplace_back();
        buckets.back().offsets.push_back(0);
      }
      Bucket& b = buckets.back();
      b.params.push_back(i);
      b.offsets.push_back(b.offsets.back() + p.numel());
      bucket_of[i] = buckets.size() - 1;
    }
    for (Bucket& b : buckets)
      b.flat = empty({b.offsets.back()}, params[b.params.front()].dtype(), device);
    stats.num_buckets = buckets.size();
  }

  void start_iteration() {
    in_backward = true;
    std::fill(ready.begin(), ready.end(), false);
    for (Bucket& b : buckets) {
      b.pending = b.params.size();
      b.launched = false;
    }
    autograd::queue_final_callback([this] { finish_iteration(); });
  }

  void launch(Bucket& b) {
    autograd::NoGradGuard ng;
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& g = params[b.params[k]].grad();
      // Into a [sizes] view of the slot, so a strided (channels_last) grad is read in place
      // rather than first copied to a contiguous temporary by reshape.
      b.flat.narrow(0, b.offsets[k], b.offsets[k + 1] - b.offsets[k]).view(g.sizes()).copy_(g);
    }
    if (device.is_cuda()) {
      // The communication stream waits for the copies, reduces, and signals `done`.
      Event copied;
      copied.record(current_stream(device));
      copied.wait(comm_stream);
      StreamGuard guard(comm_stream);
      group->all_reduce(b.flat, ReduceOp::avg);
      b.done.record(comm_stream);
    } else {
      group->all_reduce(b.flat, ReduceOp::avg);
    }
    b.launched = true;
    ++stats.buckets_reduced;
  }

  void on_grad_ready(size_t i) {
    if (no_sync) return;
    if (!in_backward) start_iteration();
    if (ready[i]) return;
    ready[i] = true;
    if (!rebuilt) ready_order.push_back(i);
    Bucket& b = buckets[bucket_of[i]];
    if (--b.pending == 0) launch(b);
  }

  void finish_iteration() {
    in_backward = false;
    std::vector<std::string> unused;
    for (size_t i = 0; i < params.size(); ++i)
      if (!ready[i]) unused.push_back(names[i]);
    if (!unused.empty()) {
      if (!options.find_unused_parameters) {
        std::string list;
        for (size_t k = 0; k < unused.size() && k < 10; ++k) list += (k ? ", " : "") + unused[k];
        EMBER_THROW(bad_param, "DistributedDataParallel: ", unused.size(), " parameter(s) received no "
                    "gradient in this backward (", list, "); every rank must use every parameter, or "
                    "set DDPOptions::find_unused_parameters = true");
      }
      autograd::NoGradGuard ng;
      for (size_t i = 0; i < params.size(); ++i) {
        if (ready[i]) continue;
        Tensor& p = params[i];
        if (!p.grad().defined()) p.mutable_grad() = zeros_like(p);
        ready[i] = true;
        Bucket& b = buckets[bucket_of[i]];
        if (--b.pending == 0) launch(b);
      }
    }
    autograd::NoGradGuard ng;
    Stream compute = current_stream(device);
    for (Bucket& b : buckets) {
      EMBER_INTERNAL_ASSERT(b.launched, "DDP bucket not launched at the end of backward");
      if (device.is_cuda()) b.done.wait(compute);
      for (size_t k = 0; k < b.params.size(); ++k) {
        Tensor& g = params[b.params[k]].mutable_grad();
        g.copy_(b.flat.narrow(0, b.offsets[k], b.offsets[k + 1] - b.offsets[k]).view(g.sizes()));
      }
    }
    ++stats.iterations;
    if (!rebuilt) {
      rebuilt = true;
      std::vector<size_t> reverse(params.size());
      std::iota(reverse.rbegin(), reverse.rend(), 0);
      if (ready_order.size() == params.size() && ready_order != reverse) {
        build_buckets(ready_order);
        ++stats.bucket_rebuilds;
      }
    }
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DDPOptions options)
    : module_(std::move(module)), group_(std::move(group)), reducer_(std::make_shared<Reducer>()) {
  EMBER_CHECK(module_ && group_, "DistributedDataParallel: module and process group are required");
  Reducer& r = *reducer_;
  r.group = group_;
  r.options = options;
  for (auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    r.params.push_back(p);
    r.names.push_back(name);
  }
  EMBER_CHECK(!r.params.empty(), "DistributedDataParallel: the module has no trainable parameters");
  r.device = r.params.front().device();
  for (size_t i = 0; i < r.params.size(); ++i)
    EMBER_CHECK(r.params[i].device() == r.device, "DistributedDataParallel: parameter '", r.names[i],
                "' is on ", r.params[i].device().str(), " but others are on ", r.device.str(),
                "; one replica lives on one device");
  if (r.device.is_cuda()) r.comm_stream = new_stream(r.device);
  // Every rank starts from rank 0's weights and buffers.
  {
    autograd::NoGradGuard ng;
    for (Tensor& p : r.params) group_->broadcast(p, 0);
    sync_buffers();
  }
  r.ready.assign(r.params.size(), false);
  std::vector<size_t> reverse(r.params.size());
  std::iota(reverse.rbegin(), reverse.rend(), 0);
  r.build_buckets(reverse);
  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t i = 0; i < r.params.size(); ++i)
    r.params[i].register_post_accumulate_grad_hook([weak, i](Tensor&) {
      if (auto reducer = weak.lock()) reducer->on_grad_ready(i);
    });
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::sync_buffers() {
  if (!reducer_->options.broadcast_buffers || group_->world_size() == 1) return;
  autograd::NoGradGuard ng;
  for (Tensor& b : module_->buffers()) {
    if (b.is_contiguous()) {
      group_->broadcast(b, 0);
    } else {
      Tensor c = b.contiguous();
      group_->broadcast(c, 0);
      b.copy_(c);
    }
  }
}

const DDPStats& DistributedDataParallel::stats() const { return reducer_->stats; }

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), prev_(ddp.reducer_->no_sync) {
  ddp_.reducer_->no_sync = true;
}
DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.reducer_->no_sync = prev_; }

std::vector<int64_t> distributed_sample_indices(int64_t n, int rank, int world, uint64_t seed,
                                                int64_t epoch, bool shuffle, bool drop_last) {
  EMBER_CHECK(world >= 1 && rank >= 0 && rank < world, "distributed_sample_indices: rank ", rank,
              " not in [0, ", world, ")");
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  if (shuffle) {
    Generator gen(Device::cpu(), seed + uint64_t(epoch));
    Tensor perm = randperm(n, TensorOptions(DType::i64), &gen);
    const int64_t* p = static_cast<const int64_t*>(perm.data_ptr());
    idx.assign(p, p + n);
  }
  int64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
  const int64_t total = per_rank * world;
  if (!drop_last)
    for (int64_t i = n; i < total && n > 0; ++i) idx.push_back(idx[size_t((i - n) % n)]);
  idx.resize(size_t(total));
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < total; i += world) mine.push_back(idx[size_t(i)]);
  return mine;
}

}  // namespace ember::distributed
