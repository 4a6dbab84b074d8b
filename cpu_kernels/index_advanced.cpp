// CPU kernels of advanced indexing (x.index / index_put_ with tensor indices) and nonzero: the
// positions of the nonzero bytes of a mask, their coordinates, the gather of rows at the linear
// position that several broadcast index tensors name, and that linear position itself. Negative
// indices are wrapped once (as PyTorch does); an index still out of range throws bad_param naming
// the index, the dim size and the op.
#include <cstring>

#include "ember/cpu_kernels/index_helpers.h"
#include "ember/kernel_interface/indexing.h"

namespace ember {
namespace {

Tensor nonzero_flat_cpu(const Tensor& mask) {
  EMBER_INTERNAL_ASSERT(mask.is_contiguous() && mask.element_size() == 1,
                        "nonzero_flat: mask must be dense bool/uint8");
  const uint8_t* m = static_cast<const uint8_t*>(mask.data_ptr());
  const int64_t n = mask.numel();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += m[i] != 0;
  Tensor out = empty({count}, DType::i64, mask.device());
  int64_t* o = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    if (m[i] != 0) *o++ = i;
  return out;
}

void unravel_index_cpu(const Tensor& out, const Tensor& flat, const Shape& sizes) {
  const int64_t n = flat.numel(), nd = int64_t(sizes.size());
  EMBER_INTERNAL_ASSERT(out.numel() == n * nd && flat.is_contiguous() && out.is_contiguous(),
                        "unravel_index: out ", out.shape_str(), " vs flat ", flat.shape_str());
  const int64_t* f = flat.data<int64_t>();
  int64_t* o = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = f[i];
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t s = sizes[size_t(d)];
      o[i * nd + d] = rest % s;
      rest /= s;
    }
  }
}

// The linear position of element i of the index tensors (checked, negatives wrapped).
int64_t linear_position(const AdvancedIndex& ix, int64_t i) {
  int64_t pos = 0;
  for (int j = 0; j < ix.num_indices; ++j) {
    const int64_t e = i * ix.elem_stride[j];
    int64_t v = ix.is_i64[j] ? static_cast<const int64_t*>(ix.data[j])[e]
                             : int64_t(static_cast<const int32_t*>(ix.data[j])[e]);
    const int64_t size = ix.size[j];
    if (v < 0) v += size;
    if (v < 0 || v >= size) [[unlikely]] {
      const int64_t shown = v < 0 ? v - size : v;
      EMBER_THROW(bad_param, "index ", shown, " is out of range for an indexed dimension of size ",
                  size, " (tensor index ", j, "); valid indices are ", -size, " to ", size - 1);
    }
    pos += v * ix.stride[j];
  }
  return pos;
}

void advanced_gather_cpu(const Tensor& out, const Tensor& in, const AdvancedIndex& ix,
                         int64_t outer, int64_t rows, int64_t inner) {
  EMBER_INTERNAL_ASSERT(out.is_contiguous() && in.is_contiguous() &&
                            in.numel() == outer * rows * inner &&
                            out.numel() == outer * ix.count * inner,
                        "advanced_gather: in ", in.shape_str(), ", out ", out.shape_str());
  std::vector<int64_t> pos(size_t(ix.count));
  for (int64_t i = 0; i < ix.count; ++i) pos[size_t(i)] = linear_position(ix, i);
  const size_t run = size_t(inner) * out.element_size();
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < ix.count; ++i)
      std::memcpy(dst + size_t(o * ix.count + i) * run,
                  src + size_t(o * rows + pos[size_t(i)]) * run, run);
}

void linear_index_cpu(const Tensor& out, const AdvancedIndex& ix) {
  EMBER_INTERNAL_ASSERT(out.is_contiguous() && out.numel() == ix.count && out.dtype() == DType::i64,
                        "linear_index: out ", out.shape_str());
  int64_t* o = out.data<int64_t>();
  for (int64_t i = 0; i < ix.count; ++i) o[i] = linear_position(ix, i);
}

}  // namespace

EMBER_REGISTER_KERNEL(nonzero_flat_kernel, CPU,
                      (std::initializer_list<DType>{DType::boolean, DType::u8}), &nonzero_flat_cpu);
EMBER_REGISTER_KERNEL(unravel_index_kernel, CPU, {DType::i64}, &unravel_index_cpu);
EMBER_REGISTER_KERNEL(advanced_gather_kernel, CPU, dispatch::kAllTypes, &advanced_gather_cpu);
EMBER_REGISTER_KERNEL(linear_index_kernel, CPU, {DType::i64}, &linear_index_cpu);

}  // namespace ember
