// x.index({...}) and x.index_put_({...}, values, accumulate) as in libtorch: basic indices
// (integers, Slice, None, Ellipsis) become views; tensor indices (int64/int32 or bool masks) are
// broadcast together and gathered (advanced_gather_kernel) or written through their linear
// positions (linear_index_kernel, then index_copy_kernel or, accumulating, index_add_kernel with
// its deterministic variants). The backward of index is an accumulating index_put onto zeros; the
// backward of index_put is index of the gradient for the values and, when not accumulating, the
// gradient with the overwritten positions zeroed for self.
#include "ember/ops/indexing_internal.h"

namespace ember {

using namespace indexing_detail;
using indexing::TensorIndex;

namespace indexing {
TensorIndex::TensorIndex(const char* ellipsis) : type_(TensorIndexType::Ellipsis) {
  EMBER_CHECK(ellipsis && std::string(ellipsis) == "...",
              "TensorIndex: the only string index is \"...\" (Ellipsis), got \"",
              ellipsis ? ellipsis : "(null)", "\"");
}
}  // namespace indexing

namespace {

// self after its basic indices, with the dims the tensor indices address gathered into one block
// [block_start, block_start + block_len), and everything the kernels need to address that block.
struct Plan {
  Tensor view;  // a view of self (basic indices applied, advanced dims moved into the block)
  bool advanced = false;
  int64_t block_start = 0, block_len = 0;
  Shape broadcast;                 // the shape the tensor indices broadcast to
  std::vector<Tensor> keep_alive;  // the index tensors AdvancedIndex points into
  AdvancedIndex index;
  int64_t outer = 1, rows = 1, inner = 1;
  Shape result_shape;
};

struct AdvancedEntry {
  int64_t dim;   // first dim of the view it addresses
  int64_t span;  // dims it addresses (a mask's dim(), else 1)
  Tensor tensor;
};

Plan make_plan(const char* op, const Tensor& self, const std::vector<TensorIndex>& indices) {
  check_defined(op, self, "self");
  int64_t consumed = 0, ellipses = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const TensorIndex& ix = indices[k];
    if (ix.is_integer() || ix.is_slice()) ++consumed;
    if (ix.is_ellipsis()) ++ellipses;
    if (ix.is_tensor()) {
      const Tensor& t = ix.tensor();
      check_defined(op, t, "a tensor index");
      EMBER_CHECK(t.dtype() == DType::i64 || t.dtype() == DType::i32 || t.dtype() == DType::boolean,
                  op, ": tensors used as indices must be int64, int32 or bool, got ",
                  dtype_name(t.dtype()), " (index entry ", k, ", shape ", t.shape_str(), ")");
      consumed += t.dtype() == DType::boolean ? t.dim() : 1;
    }
  }
  EMBER_CHECK(ellipses <= 1, op, ": an index can hold only one Ellipsis, got ", ellipses);
  EMBER_CHECK(consumed <= self.dim(), op, ": too many indices for a tensor of shape ",
              self.shape_str(), ": the ", indices.size(), " index entries address ", consumed,
              " dims");
  Plan plan;
  Tensor v = self;
  int64_t dim = 0;
  std::vector<AdvancedEntry> adv;
  for (const TensorIndex& ix : indices) {
    if (ix.is_none()) {
      v = v.unsqueeze(dim++);
    } else if (ix.is_ellipsis()) {
      dim += self.dim() - consumed;
    } else if (ix.is_integer()) {
      const int64_t n = v.size(dim), i = ix.integer();
      EMBER_CHECK(i >= -n && i < n, op, ": index ", i, " is out of range for dimension ", dim,
                  " of size ", n, " (self ", self.shape_str(), ")");
      v = v.select(dim, i);
    } else if (ix.is_slice()) {
      EMBER_CHECK(ix.slice().step() > 0, op, ": slice step must be positive, got ",
                  ix.slice().step());
      v = v.slice(dim, ix.slice().start(), ix.slice().stop(), ix.slice().step());
      ++dim;
    } else {
      Tensor t = ix.tensor();
      if (t.device() != self.device()) t = t.to(self.device());
      if (t.dtype() == DType::boolean) {
        if (t.dim() == 0) {  // a 0-dim mask adds a dim of size 1 and keeps it or not
          v = v.unsqueeze(dim);
          t = t.reshape({1});
        }
        const int64_t k = t.dim();
        const Shape covered(v.sizes().begin() + dim, v.sizes().begin() + dim + k);
        EMBER_CHECK(t.sizes() == covered, op, ": the mask of shape ", t.shape_str(),
                    " does not match the shape ", shape_str(covered), " of the dims it indexes (",
                    dim, " to ", dim + k - 1, " of ", shape_str(v.sizes()), ", self ",
                    self.shape_str(), ")");
        adv.push_back({dim, k, t});
        dim += k;
      } else {
        adv.push_back({dim, 1, t});
        ++dim;
      }
    }
  }
  if (adv.empty()) {
    plan.view = v;
    plan.result_shape = v.sizes();
    return plan;
  }
  EMBER_CHECK(adv.size() <= size_t(kMaxAdvancedIndices), op, ": at most ", kMaxAdvancedIndices,
              " tensor indices are supported, got ", adv.size());
  plan.advanced = true;
  // Advanced indices separated by a basic one move to the front, as in PyTorch.
  bool adjacent = true;
  for (size_t j = 1; j < adv.size(); ++j)
    adjacent = adjacent && adv[j].dim == adv[j - 1].dim + adv[j - 1].span;
  if (!adjacent) {
    Shape order;
    std::vector<bool> taken(size_t(v.dim()), false);
    int64_t pos = 0;
    for (AdvancedEntry& e : adv) {
      for (int64_t i = 0; i < e.span; ++i) {
        order.push_back(e.dim + i);
        taken[size_t(e.dim + i)] = true;
      }
      e.dim = pos;
      pos += e.span;
    }
    for (int64_t d = 0; d < v.dim(); ++d)
      if (!taken[size_t(d)]) order.push_back(d);
    v = v.permute(order);
  }
  plan.view = v;
  plan.block_start = adv.front().dim;
  plan.block_len = adv.back().dim + adv.back().span - plan.block_start;
  // One index per entry over its (merged) dims; a mask becomes the positions of its true elements.
  std::vector<Shape> shapes;
  std::vector<int64_t> entry_size;
  for (AdvancedEntry& e : adv) {
    int64_t size = 1;
    for (int64_t i = 0; i < e.span; ++i) size *= v.size(e.dim + i);
    entry_size.push_back(size);
    if (e.tensor.dtype() == DType::boolean) {
      autograd::NoGradGuard no_grad;
      Tensor mask = e.tensor.contiguous();
      e.tensor = nonzero_flat_kernel().get(mask.device().type, mask.dtype())(mask);
    }
    shapes.push_back(e.tensor.sizes());
  }
  plan.broadcast = broadcast_shapes(op, shapes);
  const int64_t count = shape_numel(plan.broadcast);
  AdvancedIndex& ai = plan.index;
  ai.num_indices = int(adv.size());
  ai.count = count;
  int64_t stride = 1;
  for (int j = ai.num_indices - 1; j >= 0; --j) {
    ai.size[j] = entry_size[size_t(j)];
    ai.stride[j] = stride;
    stride *= entry_size[size_t(j)];
  }
  for (int j = 0; j < ai.num_indices; ++j) {
    Tensor t = adv[size_t(j)].tensor;
    if (t.numel() == 1) {
      t = t.contiguous();
      ai.elem_stride[j] = 0;
    } else {
      autograd::NoGradGuard no_grad;
      t = t.expand(plan.broadcast).contiguous();
      ai.elem_stride[j] = 1;
    }
    plan.keep_alive.push_back(t);
    ai.data[j] = t.data_ptr();
    ai.is_i64[j] = t.dtype() == DType::i64;
  }
  const Shape& vs = v.sizes();
  for (int64_t d = 0; d < plan.block_start; ++d) plan.outer *= vs[size_t(d)];
  for (int64_t d = plan.block_start; d < plan.block_start + plan.block_len; ++d)
    plan.rows *= vs[size_t(d)];
  for (size_t d = size_t(plan.block_start + plan.block_len); d < vs.size(); ++d)
    plan.inner *= vs[d];
  plan.result_shape.assign(vs.begin(), vs.begin() + plan.block_start);
  plan.result_shape.insert(plan.result_shape.end(), plan.broadcast.begin(), plan.broadcast.end());
  plan.result_shape.insert(plan.result_shape.end(), vs.begin() + plan.block_start + plan.block_len,
                           vs.end());
  return plan;
}

// Runs a kernel that reads the index tensors; a bad index it throws (the CPU kernels check every
// index first) is reported with the op and self's shape.
template <typename F>
void with_index_context(const char* op, const Tensor& self, const Plan& plan, F&& run) {
  try {
    run();
  } catch (const Error& e) {
    if (e.status() != Status::bad_param) throw;
    EMBER_THROW(bad_param, op, ": ", e.message(), "; self has shape ", self.shape_str(),
                " and the tensor indices broadcast to ", shape_str(plan.broadcast));
  }
}

Tensor linear_positions(const char* op, const Tensor& self, const Plan& plan) {
  const Device device = self.device();
  Tensor positions = empty({plan.index.count}, DType::i64, device);
  if (plan.index.count > 0)
    with_index_context(op, self, plan, [&] {
      linear_index_kernel().get(device.type, DType::i64)(positions, plan.index);
    });
  return positions;
}

// Writes values (broadcast to the indexed shape) into self at the indices; no autograd.
void index_put_raw(const char* op, const Tensor& self, const std::vector<TensorIndex>& indices,
                   const Tensor& values, bool accumulate) {
  autograd::NoGradGuard no_grad;
  check_defined(op, values, "values");
  check_same_dtype(op, self, values, "values");
  check_same_device(op, self, values, "values");
  Plan plan = make_plan(op, self, indices);
  const Shape& r = plan.result_shape;
  bool fits = values.dim() <= int64_t(r.size());
  for (int64_t i = 1; fits && i <= values.dim(); ++i)
    fits = values.size(-i) == 1 || values.size(-i) == r[r.size() - size_t(i)];
  EMBER_CHECK(fits, op, ": values of shape ", values.shape_str(),
              " do not broadcast to the indexed shape ", shape_str(r), " (self ", self.shape_str(),
              ")");
  Tensor v = plan.view;
  if (!plan.advanced) {
    if (accumulate)
      add_(v, values);
    else
      v.copy_(values);
    return;
  }
  if (plan.index.count == 0 || plan.outer * plan.inner == 0) return;
  Tensor positions = linear_positions(op, self, plan);
  Tensor src = values.expand(r).contiguous();
  write_dense(v, [&](const Tensor& dense) {
    if (accumulate)
      index_add_kernel().get(dense.device().type, dense.dtype())(dense, positions, src, plan.outer,
                                                                 plan.rows, plan.inner);
    else
      index_copy_kernel().get(dense.device().type, dense.dtype())(dense, positions, src, plan.outer,
                                                                  plan.rows, plan.inner);
  });
}

}  // namespace

Tensor index(const Tensor& self, const std::vector<TensorIndex>& indices) {
  Plan plan = make_plan("index", self, indices);
  if (!plan.advanced) return plan.view;
  Tensor in = plan.view.contiguous();
  Tensor out = empty(plan.result_shape, in.dtype(), in.device());
  if (out.numel() > 0 || (plan.index.count > 0 && plan.rows == 0))
    with_index_context("index", self, plan, [&] {
      advanced_gather_kernel().get(in.device().type, in.dtype())(out, in, plan.index, plan.outer,
                                                                 plan.rows, plan.inner);
    });
  if (autograd::needs_grad({&in})) {
    Tensor positions = linear_positions("index", self, plan);
    autograd::record_backward(
        "index", {in}, {&out},
        [positions, outer = plan.outer, rows = plan.rows, inner = plan.inner,
         in_shape = in.sizes()](const Grads& g, const auto&) {
          using namespace indexing;
          Tensor z =
              zeros({outer, rows, inner}, TensorOptions(g[0].dtype()).with_device(g[0].device()));
          Tensor gv = g[0].reshape({outer, positions.numel(), inner});
          return Grads{index_put(z, {Slice(), positions}, gv, true).reshape(in_shape)};
        });
  }
  return out;
}

Tensor index_put(const Tensor& self, const std::vector<TensorIndex>& indices, const Tensor& values,
                 bool accumulate) {
  check_defined("index_put", self, "self");
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    out = self.clone(MemoryFormat::contiguous);
  }
  index_put_raw("index_put", out, indices, values, accumulate);
  if (autograd::needs_grad({&self, &values})) {
    autograd::record_backward(
        "index_put", {self, values}, {&out},
        [indices, accumulate, values_shape = values.sizes()](const Grads& g, const auto& node) {
          Grads r(2);
          if (node.needs_input_grad(0))
            r[0] =
                accumulate
                    ? g[0]
                    : index_put(g[0], indices,
                                zeros({}, TensorOptions(g[0].dtype()).with_device(g[0].device())));
          if (node.needs_input_grad(1)) r[1] = autograd::sum_to(index(g[0], indices), values_shape);
          return r;
        });
  }
  return out;
}

Tensor& index_put_(Tensor& self, const std::vector<TensorIndex>& indices, const Tensor& values,
                   bool accumulate) {
  check_inplace("index_put_", self);
  if (autograd::needs_grad({&self, &values}))
    return assign_inplace(self, index_put(self.clone(), indices, values, accumulate));
  index_put_raw("index_put_", self, indices, values, accumulate);
  return self;
}

Tensor& index_put_(Tensor& self, const std::vector<TensorIndex>& indices, double value) {
  check_defined("index_put_", self, "self");
  return index_put_(self, indices,
                    scalar_tensor(value, TensorOptions(self.dtype()).with_device(self.device())));
}

}  // namespace ember
