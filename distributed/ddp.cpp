// DistributedDataParallel's reducer: buckets, hooks, overlap with backward, and the sampler.
#include "ember/distributed/ddp.h"

#include <algorithm>
#include <numeric>

#include "ember/kernel_interface/optim.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::distributed {

namespace {

// True when `grad` is exactly the bucket slot `slot` (same memory, same layout): it was accumulated
// in place and there is nothing to copy.
bool is_slot(const Tensor& grad, const Tensor& slot) {
  return grad.storage() == slot.storage() && grad.offset() == slot.offset() &&
         grad.sizes() == slot.sizes() && grad.strides() == slot.strides();
}

}  // namespace

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
  // param index -> its elements of its bucket's `flat`, viewed with the parameter's own strides
  // (parameters are dense, channels_last included: the constructor checks), so that its .grad can
  // be this very view and the optimizer sees the parameter's layout.
  std::vector<Tensor> slots;
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
      bool fits = !buckets.empty() && params[buckets.back().params.front()].dtype() == p.dtype() &&
                  buckets.back().offsets.back() * int64_t(p.element_size()) + int64_t(bytes) <=
                      int64_t(cap);
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
    slots.assign(params.size(), Tensor());
    for (Bucket& b : buckets) {
      b.flat = empty({b.offsets.back()}, params[b.params.front()].dtype(), device);
      for (size_t k = 0; k < b.params.size(); ++k) {
        const Tensor& p = params[b.params[k]];
        // A dense tensor's elements fill [offset, offset + numel) whatever its strides.
        slots[b.params[k]] = make_view(b.flat, p.sizes(), p.strides(), b.offsets[k]);
      }
    }
    stats.num_buckets = buckets.size();
  }

  // Makes parameter i's .grad its slot, holding its gradient (zeros when it has none: an unused
  // parameter). Nothing is copied when .grad already is the slot, the steady state: backward
  // accumulated into it in place. Otherwise (the first backward, after zero_grad(set_to_none),
  // after a bucket rebuild) the gradient is copied in once, as PyTorch's gradient_as_bucket_view
  // does.
  void adopt_grad(size_t i) {
    Tensor& g = params[i].mutable_grad();
    Tensor& slot = slots[i];
    if (g.defined() && is_slot(g, slot)) return;
    if (g.defined()) {
      slot.copy_(g);
      ++stats.grads_copied;
    } else {
      slot.zero_();
    }
    g = make_view(slot, slot.sizes(), slot.strides(), slot.offset());  // a handle of its own
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

  // Averages the bucket in place; every gradient of it is in its slot by now.
  void launch(Bucket& b) {
    if (device.is_cuda()) {
      // The communication stream waits for the gradients, reduces, and signals `done`.
      Event computed;
      computed.record(current_stream(device));
      computed.wait(comm_stream);
      StreamGuard guard(comm_stream);
      group->all_reduce(b.flat, ReduceOp::avg);
      b.done.record(comm_stream);
    } else {
      group->all_reduce(b.flat, ReduceOp::avg);
    }
    b.launched = true;
    ++stats.buckets_reduced;
  }

  void mark_ready(size_t i) {
    ready[i] = true;
    adopt_grad(i);
    Bucket& b = buckets[bucket_of[i]];
    if (--b.pending == 0) launch(b);
  }

  void on_grad_ready(size_t i) {
    if (no_sync) return;
    if (!in_backward) start_iteration();
    if (ready[i]) return;
    if (!rebuilt) ready_order.push_back(i);
    autograd::NoGradGuard ng;
    mark_ready(i);
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
        EMBER_THROW(bad_param, "DistributedDataParallel: ", unused.size(),
                    " parameter(s) received no "
                    "gradient in this backward (",
                    list,
                    "); every rank must use every parameter, or "
                    "set DDPOptions::find_unused_parameters = true");
      }
      autograd::NoGradGuard ng;
      for (size_t i = 0; i < params.size(); ++i)
        if (!ready[i]) mark_ready(i);
    }
    autograd::NoGradGuard ng;
    Stream compute = current_stream(device);
    // The averaged gradients are already in .grad (the slots): only wait for them.
    for (Bucket& b : buckets) {
      EMBER_INTERNAL_ASSERT(b.launched, "DDP bucket not launched at the end of backward");
      if (device.is_cuda()) b.done.wait(compute);
    }
    ++stats.iterations;
    if (!rebuilt) {
      rebuilt = true;
      std::vector<size_t> reverse(params.size());
      std::iota(reverse.rbegin(), reverse.rend(), 0);
      if (ready_order.size() == params.size() && ready_order != reverse) {
        build_buckets(ready_order);
        ++stats.bucket_rebuilds;
        // The averaged gradients move into the new buckets (and the old ones are freed).
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].grad().defined()) adopt_grad(i);
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
  for (size_t i = 0; i < r.params.size(); ++i) {
    const Tensor& p = r.params[i];
    EMBER_CHECK(p.device() == r.device, "DistributedDataParallel: parameter '", r.names[i],
                "' is on ", p.device().str(), " but others are on ", r.device.str(),
                "; one replica lives on one device");
    // Its gradient becomes a view of a bucket slot with the parameter's strides.
    EMBER_CHECK(
        is_dense_layout(p), "DistributedDataParallel: parameter '", r.names[i], "' (shape ",
        p.shape_str(), ", strides ", shape_str(p.strides()),
        ") is not dense; make it .contiguous() (or channels_last) before wrapping the module");
  }
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
