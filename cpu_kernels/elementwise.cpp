// CPU elementwise kernels: where, and copy (dtype conversion). Unary and binary ops are in
// elementwise_unary.cpp and elementwise_binary.cpp; the loop they share, and why these kernels use
// the exact library math, in elementwise_loop.h.
#include "ember/cpu_kernels/elementwise_loop.h"

namespace ember {
namespace {

using namespace cpu_elementwise;

template <typename T>
void where_loop(const ElementwiseIter& iter) {
  for_each_row(iter, [](char* const* p, const int64_t* s, int64_t n) {
    constexpr int64_t kSize = sizeof(T);
    if (s[0] == kSize && s[1] == 1 && s[2] == kSize && s[3] == kSize) {
      T* out = reinterpret_cast<T*>(p[0]);
      const bool* cond = reinterpret_cast<const bool*>(p[1]);
      const T* a = reinterpret_cast<const T*>(p[2]);
      const T* b = reinterpret_cast<const T*>(p[3]);
      for (int64_t i = 0; i < n; ++i) out[i] = cond[i] ? a[i] : b[i];
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            *reinterpret_cast<const T*>(c ? p[2] + i * s[2] : p[3] + i * s[3]);
      }
    }
  });
}

void where_cpu(const ElementwiseIter& iter) {
  EMBER_INTERNAL_ASSERT(iter.num_operands == 4,
                        "where expects (out, cond, a, b), the iterator has ", iter.num_operands,
                        " operands");
  EMBER_INTERNAL_ASSERT(iter.dtypes[1] == DType::boolean && iter.dtypes[2] == iter.dtypes[0] &&
                            iter.dtypes[3] == iter.dtypes[0],
                        "where: operand dtypes (", dtype_name(iter.dtypes[0]), ", ",
                        dtype_name(iter.dtypes[1]), ", ", dtype_name(iter.dtypes[2]), ", ",
                        dtype_name(iter.dtypes[3]), "), expected (T, bool, T, T)");
  EMBER_DISPATCH_ALL_DTYPES(iter.dtypes[0], "where", [&] { where_loop<scalar_t>(iter); });
}

template <typename To, typename From>
void copy_loop(const ElementwiseIter& iter) {
  for_each_row(iter, [](char* const* p, const int64_t* s, int64_t n) {
    if (s[0] == int64_t(sizeof(To)) && s[1] == int64_t(sizeof(From))) {
      To* out = reinterpret_cast<To*>(p[0]);
      const From* in = reinterpret_cast<const From*>(p[1]);
      for (int64_t i = 0; i < n; ++i) out[i] = convert_value<To>(in[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<To*>(p[0] + i * s[0]) =
            convert_value<To>(*reinterpret_cast<const From*>(p[1] + i * s[1]));
    }
  });
}

void copy_cpu(const ElementwiseIter& iter) {
  EMBER_INTERNAL_ASSERT(iter.num_operands == 2, "copy expects (out, in), the iterator has ",
                        iter.num_operands, " operands");
  EMBER_DISPATCH_ALL_DTYPES(iter.dtypes[0], "copy", [&] {
    using out_t = scalar_t;
    EMBER_DISPATCH_ALL_DTYPES(iter.dtypes[1], "copy", [&] { copy_loop<out_t, scalar_t>(iter); });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(where_kernel, CPU, dispatch::kAllTypes, &where_cpu);
EMBER_REGISTER_KERNEL(copy_kernel, CPU, dispatch::kAllTypes, &copy_cpu);

}  // namespace ember
