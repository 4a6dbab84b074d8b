// CPU embedding_bag kernels (the reference for cuda_kernels/indexing/embedding_bag.cu): the
// forward reduces each bag's rows (sum, mean, max) in float (f32/f16/bf16) or double (f64); the
// backward ACCUMULATES into the zero-filled grad_weight, entry by entry in entry order (so the
// result is bitwise repeatable), split over columns across threads, and writes
// grad_per_sample_weights. Every index is checked before anything is written.
#include "ember/kernel_interface/embedding_bag.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ember/cpu_kernels/index_helpers.h"
#include "ember/tensor/parallel.h"

namespace ember {
namespace {

using namespace cpu_index;

struct BagLayout {
  IndexReader idx;
  const int64_t* bounds;
  int64_t num_indices, num_bags, dim;
  int64_t begin(int64_t b) const { return std::clamp<int64_t>(bounds[b], 0, num_indices); }
  int64_t end(int64_t b) const {
    return std::max(begin(b), std::clamp<int64_t>(bounds[b + 1], 0, num_indices));
  }
};

BagLayout bag_layout(const EmbeddingBagArgs& a) {
  const IndexReader idx = index_reader("embedding_bag", a.indices);
  const int64_t rows = a.weight.size(0);
  for (int64_t i = 0; i < a.indices.numel(); ++i)
    check_index_value("embedding_bag", idx[i], rows, 0);
  return BagLayout{idx, a.bounds.data<int64_t>(), a.indices.numel(), a.num_bags, a.weight.size(1)};
}

template <typename T>
void forward_typed(const EmbeddingBagArgs& a) {
  using C = compute_t<T>;
  const BagLayout L = bag_layout(a);
  const T* w = static_cast<const T*>(a.weight.data_ptr());
  const T* psw = a.per_sample_weights.defined()
                     ? static_cast<const T*>(a.per_sample_weights.data_ptr())
                     : nullptr;
  T* out = static_cast<T*>(a.output.data_ptr());
  int64_t* count = a.bag_count.data<int64_t>();
  int64_t* max_rows = a.mode == EmbeddingBagMode::max ? a.max_rows.data<int64_t>() : nullptr;
  const int64_t D = L.dim;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, D));
  parallel_for(0, L.num_bags, grain, [&](int64_t lo, int64_t hi) {
    std::vector<C> acc(static_cast<size_t>(D));
    for (int64_t b = lo; b < hi; ++b) {
      std::fill(acc.begin(), acc.end(), C(0));
      int64_t* arg = max_rows ? max_rows + b * D : nullptr;
      if (arg) std::fill(arg, arg + D, int64_t(-1));
      int64_t n = 0;
      for (int64_t i = L.begin(b); i < L.end(b); ++i) {
        const int64_t r = L.idx[i];
        if (r == a.padding_idx) continue;
        const T* row = w + r * D;
        if (arg) {
          for (int64_t d = 0; d < D; ++d)
            if (n == 0 || C(row[d]) > acc[size_t(d)]) {
              acc[size_t(d)] = C(row[d]);
              arg[d] = r;
            }
        } else {
          const C s = psw ? C(psw[i]) : C(1);
          for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += s * C(row[d]);
        }
        ++n;
      }
      count[b] = n;
      const C scale = a.mode == EmbeddingBagMode::mean && n > 0 ? C(1) / C(n) : C(1);
      for (int64_t d = 0; d < D; ++d) out[b * D + d] = T(acc[size_t(d)] * scale);
    }
  });
}

template <typename T>
void backward_typed(const EmbeddingBagArgs& a) {
  using C = compute_t<T>;
  const BagLayout L = bag_layout(a);
  const T* g = static_cast<const T*>(a.grad_output.data_ptr());
  const T* w = static_cast<const T*>(a.weight.data_ptr());
  const T* psw = a.per_sample_weights.defined()
                     ? static_cast<const T*>(a.per_sample_weights.data_ptr())
                     : nullptr;
  const int64_t* count = a.bag_count.data<int64_t>();
  T* gw = static_cast<T*>(a.grad_weight.data_ptr());
  const int64_t D = L.dim;
  if (a.mode == EmbeddingBagMode::max) {
    const int64_t* max_rows = a.max_rows.data<int64_t>();
    // Each column is one thread's: rows are visited in bag order.
    parallel_for(0, D, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t b = 0; b < L.num_bags; ++b)
        for (int64_t d = lo; d < hi; ++d) {
          const int64_t r = max_rows[b * D + d];
          if (r >= 0) gw[r * D + d] = T(C(gw[r * D + d]) + C(g[b * D + d]));
        }
    });
  } else {
    parallel_for(0, D, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t b = 0; b < L.num_bags; ++b) {
        if (count[b] == 0) continue;
        const C bag_scale = a.mode == EmbeddingBagMode::mean ? C(1) / C(count[b]) : C(1);
        for (int64_t i = L.begin(b); i < L.end(b); ++i) {
          const int64_t r = L.idx[i];
          if (r == a.padding_idx) continue;
          const C s = psw ? bag_scale * C(psw[i]) : bag_scale;
          for (int64_t d = lo; d < hi; ++d)
            gw[r * D + d] = T(C(gw[r * D + d]) + s * C(g[b * D + d]));
        }
      }
    });
  }
  if (!a.grad_per_sample_weights.defined()) return;
  T* gpsw = static_cast<T*>(a.grad_per_sample_weights.data_ptr());
  parallel_for(0, L.num_bags, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b)
      for (int64_t i = L.begin(b); i < L.end(b); ++i) {
        const int64_t r = L.idx[i];
        C dot = 0;
        if (r != a.padding_idx)
          for (int64_t d = 0; d < D; ++d) dot += C(g[b * D + d]) * C(w[r * D + d]);
        gpsw[i] = T(dot);
      }
  });
}

void embedding_bag_forward_cpu(const EmbeddingBagArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.weight.dtype(), "embedding_bag",
                                 [&] { forward_typed<scalar_t>(a); });
}
void embedding_bag_backward_cpu(const EmbeddingBagArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.weight.dtype(), "embedding_bag",
                                 [&] { backward_typed<scalar_t>(a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(embedding_bag_forward_kernel, CPU, dispatch::kFloatingTypes,
                      &embedding_bag_forward_cpu);
EMBER_REGISTER_KERNEL(embedding_bag_backward_kernel, CPU, dispatch::kFloatingTypes,
                      &embedding_bag_backward_cpu);

}  // namespace ember
