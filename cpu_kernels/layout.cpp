// CPU kernel behind layout_transpose_kernel (kernel_interface/layout.h): a batched transpose of
// dense memory in square cache blocks, so that both the reads and the writes of a block stay within
// a few cache lines per row. Values are moved as element-sized words, so one instantiation serves
// every dtype of a size. Blocks of rows run in parallel on the thread pool.
#include "ember/kernel_interface/layout.h"

#include <algorithm>
#include <cstdint>

#include "ember/tensor/parallel.h"

namespace ember {
namespace {

constexpr int64_t kBlock = 32;

template <typename Word>
void transpose_words(void* dst_ptr, const void* src_ptr, int64_t batch, int64_t rows,
                     int64_t cols) {
  auto* dst = static_cast<Word*>(dst_ptr);
  const auto* src = static_cast<const Word*>(src_ptr);
  const int64_t plane = rows * cols;
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock;
  // Items are (matrix, block of kBlock rows); ~32K elements per thread at least, as the
  // elementwise kernels. Each item writes its own output columns.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, kBlock * cols));
  parallel_for(0, batch * row_blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t b = item / row_blocks;
      const int64_t r0 = item % row_blocks * kBlock;
      const Word* s = src + b * plane;
      Word* d = dst + b * plane;
      const int64_t r1 = std::min(rows, r0 + kBlock);
      for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
        const int64_t c1 = std::min(cols, c0 + kBlock);
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) d[c * rows + r] = s[r * cols + c];
      }
    }
  });
}

void layout_transpose_cpu(const Tensor& dst, const Tensor& src, int64_t batch, int64_t rows,
                          int64_t cols) {
  EMBER_INTERNAL_ASSERT(dst.numel() == batch * rows * cols && src.numel() == dst.numel() &&
                            dst.dtype() == src.dtype(),
                        "layout_transpose_kernel: dst ", dst.shape_str(), " and src ",
                        src.shape_str(), " do not hold [", batch, ", ", rows, ", ", cols, "]");
  switch (dst.element_size()) {
    case 1:
      transpose_words<uint8_t>(dst.data_ptr(), src.data_ptr(), batch, rows, cols);
      break;
    case 2:
      transpose_words<uint16_t>(dst.data_ptr(), src.data_ptr(), batch, rows, cols);
      break;
    case 4:
      transpose_words<uint32_t>(dst.data_ptr(), src.data_ptr(), batch, rows, cols);
      break;
    case 8:
      transpose_words<uint64_t>(dst.data_ptr(), src.data_ptr(), batch, rows, cols);
      break;
    default:
      EMBER_INTERNAL_ASSERT(false, "layout_transpose_kernel: element size ", dst.element_size());
  }
}

}  // namespace

EMBER_REGISTER_KERNEL(layout_transpose_kernel, CPU, dispatch::kAllTypes, &layout_transpose_cpu);

}  // namespace ember
