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

ElementwiseIter make_elementwise_iter(const char* op, const Tensor& out,
                                      const std::vector<Tensor>& inputs) {
  ElementwiseIter it;
  const int nops = 1 + int(inputs.size());
  EMBER_INTERNAL_ASSERT(nops <= kMaxIterOperands, "too many operands for ", op);
  it.num_operands = nops;
  it.device = out.device();
  const Shape& shape = out.sizes();
  const int nd = int(shape.size());
  EMBER_CHECK(nd <= 64, op, ": too many dims");

  // Byte strides of each operand over out's dims (0 where an input broadcasts).
  std::vector<std::vector<int64_t>> st(size_t(nops), std::vector<int64_t>(size_t(nd), 0));
  auto fill = [&](int k, const Tensor& t) {
    EMBER_CHECK(t.device() == out.device(), op, ": expected all tensors on ", out.device().str(),
                " but operand ", k, " is on ", t.device().str(), "; move it with .to(device)");
    const int td = int(t.dim());
    EMBER_CHECK(td <= nd, op, ": input of shape ", t.shape_str(), " does not broadcast to ",
                shape_str(shape));
    const int64_t es = int64_t(t.element_size());
    for (int i = 0; i < td; ++i) {
      int64_t sz = t.sizes()[size_t(i)];
      int64_t o = shape[size_t(nd - td + i)];
      EMBER_CHECK(sz == o || sz == 1, op, ": input of shape ", t.shape_str(),
                  " does not broadcast to ", shape_str(shape));
      st[size_t(k)][size_t(nd - td + i)] = sz == 1 ? 0 : t.strides()[size_t(i)] * es;
    }
    it.data[k] = static_cast<char*>(t.data_ptr());
    it.dtypes[k] = t.dtype();
  };
  fill(0, out);
  for (size_t i = 0; i < inputs.size(); ++i) fill(int(i) + 1, inputs[i]);

  // Order dims by the output's strides (largest first) so channels_last and transposed outputs
  // iterate in memory order; ties keep the logical order.
  std::vector<int> perm;
  for (int d = 0; d < nd; ++d)
    if (shape[size_t(d)] != 1) perm.push_back(d);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int a, int b) { return st[0][size_t(a)] > st[0][size_t(b)]; });
  // Then coalesce neighbours that are contiguous for every operand.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(static_cast<size_t>(nops));
  for (int d : perm) {
    sizes.push_back(shape[size_t(d)]);
    for (int k = 0; k < nops; ++k) strides[size_t(k)].push_back(st[size_t(k)][size_t(d)]);
  }
  std::vector<int64_t> cs;
  std::vector<std::vector<int64_t>> cst(static_cast<size_t>(nops));
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!cs.empty()) {
      bool can = true;
      for (int k = 0; k < nops; ++k)
        if (cst[size_t(k)].back() != strides[size_t(k)][d] * sizes[d]) can = false;
      if (can) {
        cs.back() *= sizes[d];
        for (int k = 0; k < nops; ++k) cst[size_t(k)].back() = strides[size_t(k)][d];
        continue;
      }
    }
    cs.push_back(sizes[d]);
    for (int k = 0; k < nops; ++k) cst[size_t(k)].push_back(strides[size_t(k)][d]);
  }
  EMBER_CHECK(int(cs.size()) <= kMaxIterDims, op, ": the operands' layouts need ", cs.size(),
              " loop dims after coalescing; at most ", kMaxIterDims,
              " are supported: make an input .contiguous() first");
  it.ndim = int(cs.size());
  it.numel = shape_numel(shape);
  for (int d = 0; d < it.ndim; ++d) {
    it.sizes[d] = cs[size_t(d)];
    for (int k = 0; k < nops; ++k) it.strides[k][d] = cst[size_t(k)][size_t(d)];
  }
  return it;
}

}  // namespace ember
