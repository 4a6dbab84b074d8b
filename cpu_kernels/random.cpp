// The CPU random_kernel (see kernel_interface/): uniform, normal, bernoulli and randint fills drawn
// from Philox4x32-10 exactly as the CUDA kernel draws them with cuRAND (tensor/philox.h). Element i
// of the output, in logical order, takes lane i % 4 of the four values of subsequence i / 4 at the
// params' offset, so one (seed, offset) gives the same tensor on both backends.
#include "ember/kernel_interface/random.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ember/kernel_interface/random_samplers.h"
#include "ember/tensor/philox.h"

namespace ember {
namespace {

// Maps logical element indices to memory offsets (in elements). Contiguous outputs map i -> i;
// others walk their sizes like an odometer, so dense non-contiguous outputs (channels_last,
// transposed) still get element i's value at logical position i.
class LogicalWalker {
 public:
  explicit LogicalWalker(const Tensor& t)
      : sizes_(t.sizes()),
        strides_(t.strides()),
        contiguous_(t.is_contiguous()),
        index_(t.sizes().size(), 0) {}
  // Memory offset of the next logical element (call once per element, in order).
  int64_t next() {
    if (contiguous_) return linear_++;
    const int64_t at = memory_;
    for (int64_t d = int64_t(sizes_.size()) - 1; d >= 0; --d) {
      memory_ += strides_[d];
      if (++index_[d] < sizes_[d]) break;
      memory_ -= strides_[d] * sizes_[d];
      index_[d] = 0;
    }
    return at;
  }

 private:
  const Shape& sizes_;
  const Shape& strides_;
  bool contiguous_;
  std::vector<int64_t> index_;
  int64_t linear_ = 0, memory_ = 0;
};

template <typename T>
constexpr bool kIsFloating = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                             std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The four output values of one group (subsequence) of the fill.
template <typename T>
void group_values(const RandomParams& p, uint64_t group, uint64_t randint_range, T values[4]) {
  const philox::U32x4 bits = philox::draw4(p.seed, group, p.offset);
  switch (p.kind) {
    case RandomKind::uniform: {
      if constexpr (kIsFloating<T>) {
        const philox::F32x4 u = philox::uniform4_from_bits(bits);
        for (int l = 0; l < 4; ++l) {
          const float v = philox::to_half_open(philox::lane(u, l));
          if constexpr (std::is_same_v<T, double>) {
            const double out = philox::affine(v, p.b - p.a, p.a);
            values[l] = out >= p.b ? philox::next_below(out) : out;
          } else {
            T out = T(philox::affine(v, float(p.b - p.a), float(p.a)));
            // Rounding to the output type can reach b: keep [a, b) (see philox::next_below).
            if (double(out) >= p.b) {
              if constexpr (std::is_same_v<T, float>)
                out = philox::next_below(out);
              else
                out.bits = philox::next_below_bits16(out.bits);
            }
            values[l] = out;
          }
        }
      }
      break;
    }
    case RandomKind::normal: {
      if constexpr (kIsFloating<T>) {
        const philox::F32x4 n = philox::normal4_from_bits(bits);
        for (int l = 0; l < 4; ++l) {
          if constexpr (std::is_same_v<T, double>)
            values[l] = philox::affine(philox::lane(n, l), p.b, p.a);
          else
            values[l] = T(philox::affine(philox::lane(n, l), float(p.b), float(p.a)));
        }
      }
      break;
    }
    case RandomKind::bernoulli: {
      const philox::F32x4 u = philox::uniform4_from_bits(bits);
      for (int l = 0; l < 4; ++l)
        values[l] = T(philox::bernoulli_from_uniform(philox::lane(u, l), p.a) ? 1.0f : 0.0f);
      break;
    }
    case RandomKind::randint: {
      for (int l = 0; l < 4; ++l) {
        const int64_t v =
            int64_t(p.a) + int64_t(philox::randint_from_bits(philox::lane(bits, l), randint_range));
        if constexpr (std::is_same_v<T, double>)
          values[l] = double(v);
        else if constexpr (kIsFloating<T>)
          values[l] = T(float(v));
        else
          values[l] = static_cast<T>(v);
      }
      break;
    }
    case RandomKind::exponential:
    case RandomKind::geometric:
    case RandomKind::cauchy:
    case RandomKind::log_normal: {
      if constexpr (kIsFloating<T>) {
        const philox::F32x4 d = p.kind == RandomKind::log_normal ? philox::normal4_from_bits(bits)
                                                                 : philox::uniform4_from_bits(bits);
        for (int l = 0; l < 4; ++l) {
          const double v =
              random_samplers::transform_draw(p.kind, double(philox::lane(d, l)), p.a, p.b);
          if constexpr (std::is_same_v<T, double>)
            values[l] = v;
          else
            values[l] = T(float(v));
        }
      }
      break;
    }
  }
}

template <typename T>
void random_fill(const Tensor& out, const RandomParams& p) {
  EMBER_INTERNAL_ASSERT(
      p.device_offset == nullptr,
      "random_kernel: a CPU fill got a device offset (CPU generators never capture)");
  if constexpr (!kIsFloating<T>) {
    EMBER_CHECK_STATUS(p.kind == RandomKind::randint || p.kind == RandomKind::bernoulli,
                       not_supported, "random_kernel: ", random_kind_name(p.kind),
                       " values need a floating output, got dtype ", dtype_name(out.dtype()),
                       "; fill a float32/float64/float16/bfloat16 tensor instead");
  }
  uint64_t randint_range = 0;
  if (p.kind == RandomKind::randint) {
    const int64_t low = int64_t(p.a), high = int64_t(p.b);
    EMBER_CHECK(high > low && uint64_t(high) - uint64_t(low) <= philox::kMaxRandintRange,
                "randint: the range [", low, ", ", high, ") must hold between 1 and 2^32 values; ",
                "split a wider range into a high and a low draw");
    randint_range = uint64_t(high) - uint64_t(low);
  }
  const int64_t numel = out.numel();
  if (numel == 0) return;
  T* data = static_cast<T*>(out.data_ptr());
  LogicalWalker walker(out);
  T values[4];
  const int64_t groups = (numel + 3) / 4;
  for (int64_t g = 0; g < groups; ++g) {
    group_values<T>(p, uint64_t(g), randint_range, values);
    const int64_t count = std::min<int64_t>(4, numel - 4 * g);
    for (int64_t l = 0; l < count; ++l) data[walker.next()] = values[l];
  }
}

void random_cpu(const Tensor& out, const RandomParams& p) {
  EMBER_DISPATCH_ALL_DTYPES(out.dtype(), "random_kernel", [&] { random_fill<scalar_t>(out, p); });
}

// Every dtype: floating outputs take all four kinds, integral ones randint and bernoulli (the
// kernel says so when asked for another kind).
EMBER_REGISTER_KERNEL(random_kernel, CPU, dispatch::kAllTypes, random_cpu);

}  // namespace
}  // namespace ember
