// CPU scan kernel (kernel_interface/scan.h): inclusive cumsum / cumprod / cummax / cummin along
// the middle dim of a dense [outer, len, inner] input. The reference for the CUDA scans: sums and
// products accumulate in double (floating) or int64 (integers, wrapping like PyTorch), and the
// running extremum follows PyTorch's rule (later index on ties, NaN propagates). Lines run in
// parallel on the thread pool.
#include "ember/kernel_interface/scan.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ember/cpu_kernels/wide_value.h"
#include "ember/tensor/parallel.h"

namespace ember {
namespace {

using cpu_reference::is_nan;
using cpu_reference::load_value;
using cpu_reference::store_value;
using cpu_reference::value_t;

template <typename T>
void scan_typed(const Tensor& out_t, const Tensor* indices, const Tensor& in_t, ReduceShape s,
                ScanOp op) {
  const T* in = in_t.data<T>();
  T* out = out_t.data<T>();
  int64_t* idx = indices ? indices->data<int64_t>() : nullptr;
  // Each line (o, i) is scanned by one thread, in order; ~32K elements per thread at least.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.reduce));
  parallel_for(0, s.outer * s.inner, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t line = lo; line < hi; ++line) {
      const int64_t o = line / s.inner, i = line % s.inner;
      const int64_t base = o * s.reduce * s.inner + i;
      if (op == ScanOp::sum || op == ScanOp::prod) {
        value_t<T> acc = op == ScanOp::sum ? value_t<T>(0) : value_t<T>(1);
        for (int64_t k = 0; k < s.reduce; ++k) {
          const int64_t at = base + k * s.inner;
          if (op == ScanOp::sum) {
            if constexpr (std::is_integral_v<value_t<T>>)
              acc = int64_t(uint64_t(acc) + uint64_t(load_value(in[at])));
            else
              acc += load_value(in[at]);
          } else {
            if constexpr (std::is_integral_v<value_t<T>>)
              acc = int64_t(uint64_t(acc) * uint64_t(load_value(in[at])));
            else
              acc *= load_value(in[at]);
          }
          out[at] = store_value<T>(acc);
        }
      } else {
        const bool is_max = op == ScanOp::max;
        value_t<T> best = 0;
        int64_t best_at = 0;
        for (int64_t k = 0; k < s.reduce; ++k) {
          const int64_t at = base + k * s.inner;
          const value_t<T> v = load_value(in[at]);
          if (k == 0 || is_nan(v) || (!is_nan(best) && (is_max ? v >= best : v <= best))) {
            best = v;
            best_at = k;
          }
          out[at] = in[base + best_at * s.inner];
          if (idx) idx[at] = best_at;
        }
      }
    }
  });
}

void scan_cpu(const Tensor& out, const Tensor* indices, const Tensor& in, ReduceShape shape,
              ScanOp op) {
  EMBER_INTERNAL_ASSERT(in.numel() == shape.outer * shape.reduce * shape.inner &&
                            out.numel() == in.numel() && out.dtype() == in.dtype(),
                        scan_op_name(op), ": input ", in.shape_str(), " / output ", out.shape_str(),
                        " are not a dense [", shape.outer, ", ", shape.reduce, ", ", shape.inner,
                        "] pair of one dtype");
  if (in.numel() == 0) return;
  EMBER_DISPATCH_ALL_DTYPES(in.dtype(), scan_op_name(op),
                            [&] { scan_typed<scalar_t>(out, indices, in, shape, op); });
}

}  // namespace

EMBER_REGISTER_KERNEL(scan_kernel, CPU, dispatch::kAllTypes, &scan_cpu);

}  // namespace ember
