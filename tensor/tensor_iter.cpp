// Broadcasting and the construction of ElementwiseIter (dims sorted and coalesced, byte strides).
#include "ember/tensor/tensor_iter.h"

#include <algorithm>
#include <numeric>

namespace ember {

Shape broadcast_shapes(const char* op, const std::vector<Shape>& shapes) {
  size_t nd = 0;
  for (const Shape& s : shapes) nd = std::max(nd, s.size());
  Shape out(nd, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[nd - s.size() + i];
      int64_t d = s[i];
      if (o == 1) {
        o = d;
      } else if (d != 1 && d != o) {
        std::string all;
        for (const Shape& t : shapes) all += (all.empty() ? "" : " and ") + shape_str(t);
        EMBER_THROW(bad_param, op, ": shapes ", all, " cannot be broadcast together (dimension ",
                    i - s.size() + nd, ": ", o, " vs ", d, ")");
      }
    }
  }
  return out;
}

bool ElementwiseIter::is_contiguous() const {
  for (int op = 0; op < num_operands; ++op) {
    int64_t expect = int64_t(element_size(dtypes[op]));
    for (int d = ndim - 1; d >= 0; --d) {
      if (sizes[d] == 1) continue;
      if (strides[op][d] != expect) return false;
      expect *= sizes[d];
    }
  }
  return true;
}

int64_t ElementwiseIter::offset_of(int op, int64_t linear) const {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    int64_t i = linear % sizes[d];
    linear /= sizes[d];
    off += i * strides[op][d];
  }
  return off;
}

namespace {

// The loop over `out` and the `n` tensors at `inputs`. Allocation-free (fixed arrays of
// kMaxIterOperands x up to 64 dims): it runs once per elementwise op, so for small tensors it is
// much of the op's host time.
ElementwiseIter build_iter(const char* op, const Tensor& out, const Tensor* const* inputs, int n) {
  ElementwiseIter it;
  const int nops = 1 + n;
  EMBER_INTERNAL_ASSERT(nops <= kMaxIterOperands, "too many operands for ", op);
  it.num_operands = nops;
  it.device = out.device();
  const Shape& shape = out.sizes();
  const int nd = int(shape.size());
  constexpr int kMaxDims = 64;
  EMBER_CHECK(nd <= kMaxDims, op, ": too many dims");

  // Byte strides of each operand over out's dims (0 where an input broadcasts).
  int64_t st[kMaxIterOperands][kMaxDims];
  auto fill = [&](int k, const Tensor& t) {
    EMBER_CHECK(t.device() == out.device(), op, ": expected all tensors on ", out.device().str(),
                " but operand ", k, " is on ", t.device().str(), "; move it with .to(device)");
    const int td = int(t.dim());
    EMBER_CHECK(td <= nd, op, ": input of shape ", t.shape_str(), " does not broadcast to ",
                shape_str(shape));
    const int64_t es = int64_t(t.element_size());
    const Shape& sizes = t.sizes();
    const Shape& strides = t.strides();
    for (int i = 0; i < nd - td; ++i) st[k][i] = 0;
    for (int i = 0; i < td; ++i) {
      int64_t sz = sizes[size_t(i)];
      int64_t o = shape[size_t(nd - td + i)];
      EMBER_CHECK(sz == o || sz == 1, op, ": input of shape ", t.shape_str(),
                  " does not broadcast to ", shape_str(shape));
      st[k][nd - td + i] = sz == 1 ? 0 : strides[size_t(i)] * es;
    }
    it.data[k] = static_cast<char*>(t.data_ptr());
    it.dtypes[k] = t.dtype();
  };
  fill(0, out);
  for (int i = 0; i < n; ++i) fill(i + 1, *inputs[i]);

  // Order dims by the output's strides (largest first) so channels_last and transposed outputs
  // iterate in memory order; ties keep the logical order.
  int perm[kMaxDims];
  int np = 0;
  for (int d = 0; d < nd; ++d)
    if (shape[size_t(d)] != 1) perm[np++] = d;
  // (a stable insertion sort: std::stable_sort may allocate a buffer, and np is small)
  for (int j = 1; j < np; ++j) {
    const int d = perm[j];
    int i = j;
    for (; i > 0 && st[0][perm[i - 1]] < st[0][d]; --i) perm[i] = perm[i - 1];
    perm[i] = d;
  }
  // Then coalesce neighbours that are contiguous for every operand.
  int64_t cs[kMaxDims];
  int64_t cst[kMaxIterOperands][kMaxDims];
  int nc = 0;
  for (int j = 0; j < np; ++j) {
    const int d = perm[j];
    const int64_t size = shape[size_t(d)];
    if (nc > 0) {
      bool can = true;
      for (int k = 0; k < nops; ++k)
        if (cst[k][nc - 1] != st[k][d] * size) can = false;
      if (can) {
        cs[nc - 1] *= size;
        for (int k = 0; k < nops; ++k) cst[k][nc - 1] = st[k][d];
        continue;
      }
    }
    cs[nc] = size;
    for (int k = 0; k < nops; ++k) cst[k][nc] = st[k][d];
    ++nc;
  }
  EMBER_CHECK(nc <= kMaxIterDims, op, ": the operands' layouts need ", nc,
              " loop dims after coalescing; at most ", kMaxIterDims,
              " are supported: make an input .contiguous() first");
  it.ndim = nc;
  it.numel = shape_numel(shape);
  for (int d = 0; d < it.ndim; ++d) {
    it.sizes[d] = cs[d];
    for (int k = 0; k < nops; ++k) it.strides[k][d] = cst[k][d];
  }
  return it;
}

}  // namespace

ElementwiseIter make_elementwise_iter(const char* op, const Tensor& out,
                                      std::initializer_list<Tensor> inputs) {
  const Tensor* ptrs[kMaxIterOperands];
  int n = 0;
  for (const Tensor& t : inputs) {
    EMBER_INTERNAL_ASSERT(n + 1 < kMaxIterOperands, "too many operands for ", op);
    ptrs[n++] = &t;
  }
  return build_iter(op, out, ptrs, n);
}

ElementwiseIter make_elementwise_iter(const char* op, const Tensor& out,
                                      const std::vector<Tensor>& inputs) {
  EMBER_INTERNAL_ASSERT(inputs.size() < size_t(kMaxIterOperands), "too many operands for ", op);
  const Tensor* ptrs[kMaxIterOperands];
  for (size_t i = 0; i < inputs.size(); ++i) ptrs[i] = &inputs[i];
  return build_iter(op, out, ptrs, int(inputs.size()));
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

}  // namespace ember
