// Host-side 16-bit float types: Half (IEEE fp16) and BFloat16, stored as raw bits and converted
// through float with round-to-nearest-even. Bit-compatible with CUDA's __half / __nv_bfloat16.
#pragma once
#include <cstdint>
#include <cstring>

namespace ember {

// The IEEE bits of a float, and the float of 32 bits (memcpy, so no aliasing issue): the
// conversions below work on these.
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The C++ element type of DType::bf16 (torch.bfloat16): the upper 16 bits of a float32 (8 exponent
// bits, 7 mantissa bits), so it has float32's range at about 3 significant digits. Arithmetic goes
// through float: a BFloat16 converts to and from float implicitly.
struct BFloat16 {
  uint16_t bits = 0;  // the raw bits (sign, 8 exponent bits, 7 mantissa bits); 0 is +0.0
  BFloat16() = default;
  // `f` rounded to the nearest bfloat16 (ties to even); NaN stays a quiet NaN.
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a numeric type
  // The exact float value (every bfloat16 is a float).
  operator float() const { return bits_float(uint32_t(bits) << 16); }
  // The bits of `f` rounded to bfloat16 (ties to even; NaN stays a quiet NaN).
  static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return uint16_t(u >> 16);
  }
};

// The C++ element type of DType::f16 (torch.float16): IEEE 754 binary16 (5 exponent bits, 10
// mantissa bits; largest finite 65504, subnormals down to 2^-24). Arithmetic goes through float: a
// Half converts to and from float implicitly.
struct Half {
  uint16_t bits = 0;  // the raw IEEE binary16 bits; 0 is +0.0
  Half() = default;
  // `f` rounded to the nearest half (ties to even); beyond 65504 it overflows to infinity.
  Half(float f) : bits(from_float(f)) {}  // NOLINT
  // The exact float value (every half is a float).
  operator float() const { return to_float(bits); }

  // The binary16 bits of `f`: round to nearest even, overflow to +-inf, gradual underflow to
  // subnormals and zero, NaN stays a quiet NaN.
  static uint16_t from_float(float f) {
    uint32_t x = float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0u));
    if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow to inf
    if (x < 0x38800000u) {                                  // subnormal or zero
      if (x < 0x33000000u) return uint16_t(sign);
      uint32_t e = x >> 23;
      uint32_t m = (x & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - e;  // 14 + (113 - e) ... aligns to 2^-24 units
      uint32_t half_m = m >> shift;
      uint32_t rem = m & ((1u << shift) - 1);
      uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (half_m & 1u))) ++half_m;
      return uint16_t(sign | half_m);
    }
    uint32_t e = (x >> 23) - 112;
    uint32_t m = x & 0x7fffffu;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  // The float value of the binary16 bits `h` (exact, subnormals and infinities included).
  static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
      if (m == 0) return bits_float(sign);
      float f = float(m) * (1.0f / 16777216.0f);  // m * 2^-24
      return sign ? -f : f;
    }
    if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
    return bits_float(sign | ((e + 112) << 23) | (m << 13));
  }
};

}  // namespace ember
