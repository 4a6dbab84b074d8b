// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) reproducing
// cuRAND's device API for curandStatePhilox4_32_10_t bit for bit: curand_init(seed, subsequence,
// offset), curand4, curand_uniform4 and curand_normal4. The CPU random kernel uses it so that one
// (seed, offset) gives the same numbers on the CPU and the GPU; the element transforms shared by
// both random kernels (range mapping, bernoulli, randint) live here too, so they cannot drift.
//
// Exactness: the counter arithmetic, the uint32 draws and the uniform floats are identical to
// cuRAND everywhere. Normals are identical when this header runs on the device (it then uses the
// same __sincosf and logf as cuRAND); on the host sinf/cosf replace the device's approximate
// __sincosf, so host normals differ from the GPU's by up to about 2.4e-6 * (|n| + 1) (measured over
// 16M normals on an H200; |n| <= 6.7).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define EMBER_PHILOX_FN __host__ __device__ __forceinline__
#else
#define EMBER_PHILOX_FN inline
#endif

namespace ember::philox {

struct U32x4 {
  uint32_t x, y, z, w;
};
struct F32x4 {
  float x, y, z, w;
};
struct F32x2 {
  float x, y;
};

// Round multipliers and the Weyl increments of the key schedule (Random123's constants).
inline constexpr uint32_t kRoundMul0 = 0xD2511F53u;
inline constexpr uint32_t kRoundMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kKeyWeyl0 = 0x9E3779B9u;
inline constexpr uint32_t kKeyWeyl1 = 0xBB67AE85u;

// cuRAND writes 2^-32 as the literal 2.3283064e-10f, which rounds to exactly 2^-32 as a float.
inline constexpr float kTwoPowMinus32 = 2.3283064e-10f;
// cuRAND's float 2*pi (6.2831855f) scaled by 2^-32; the scaling by a power of two is exact.
inline constexpr float kTwoPiTimesTwoPowMinus32 = 2.3283064e-10f * 6.2831855f;

// One Philox round: two 32x32->64 multiplies whose high halves are mixed with the other two words
// and the round key; the low halves become words 1 and 3.
EMBER_PHILOX_FN U32x4 philox_round(U32x4 c, uint32_t key0, uint32_t key1) {
  const uint64_t prod0 = uint64_t(kRoundMul0) * c.x;
  const uint64_t prod1 = uint64_t(kRoundMul1) * c.z;
  U32x4 r;
  r.x = uint32_t(prod1 >> 32) ^ c.y ^ key0;
  r.y = uint32_t(prod1);
  r.z = uint32_t(prod0 >> 32) ^ c.w ^ key1;
  r.w = uint32_t(prod0);
  return r;
}

// The Philox4x32-10 bijection: ten rounds, the key bumped by the Weyl constants between rounds.
EMBER_PHILOX_FN U32x4 philox4x32_10(U32x4 counter, uint32_t key0, uint32_t key1) {
  counter = philox_round(counter, key0, key1);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 1; r < 10; ++r) {
    key0 += kKeyWeyl0;
    key1 += kKeyWeyl1;
    counter = philox_round(counter, key0, key1);
  }
  return counter;
}

// The stream position, laid out like cuRAND's state: a 128-bit counter (x least significant; x,y
// count blocks of four values inside a subsequence, z,w number the subsequence), the 64-bit key
// (the seed), the current block of four outputs and which of its lanes is handed out next.
struct State {
  U32x4 counter;
  uint32_t key0, key1;
  U32x4 block;
  uint32_t next_lane;
};

// Advances the block counter by `n` blocks. The carry out of word y is propagated the way cuRAND
// does it (comparing the added high word with the sum), including its behaviour in the corner case
// where that high word wraps to zero, so that states match even there.
EMBER_PHILOX_FN void advance_blocks(State& s, uint64_t n) {
  const uint32_t n_lo = uint32_t(n);
  uint32_t n_hi = uint32_t(n >> 32);
  s.counter.x += n_lo;
  if (s.counter.x < n_lo) ++n_hi;
  s.counter.y += n_hi;
  if (n_hi <= s.counter.y) return;
  if (++s.counter.z != 0) return;
  ++s.counter.w;
}

// Advances the block counter by one with a full 128-bit carry.
EMBER_PHILOX_FN void advance_one_block(State& s) {
  if (++s.counter.x != 0) return;
  if (++s.counter.y != 0) return;
  if (++s.counter.z != 0) return;
  ++s.counter.w;
}

// Moves `n` subsequences ahead (words z,w; as in cuRAND no carry leaves word w).
EMBER_PHILOX_FN void advance_subsequences(State& s, uint64_t n) {
  const uint32_t n_lo = uint32_t(n);
  uint32_t n_hi = uint32_t(n >> 32);
  s.counter.z += n_lo;
  if (s.counter.z < n_lo) ++n_hi;
  s.counter.w += n_hi;
}

// Skips `n` 32-bit values within the subsequence (cuRAND's skipahead).
EMBER_PHILOX_FN void skip_values(State& s, uint64_t n) {
  s.next_lane += uint32_t(n & 3);
  uint64_t blocks = n / 4;
  if (s.next_lane > 3) {
    blocks += 1;
    s.next_lane -= 4;
  }
  advance_blocks(s, blocks);
  s.block = philox4x32_10(s.counter, s.key0, s.key1);
}

// curand_init(seed, subsequence, offset, &state): subsequences are 2^66 values apart and `offset`
// counts 32-bit values from the start of the subsequence.
EMBER_PHILOX_FN State init(uint64_t seed, uint64_t subsequence, uint64_t offset) {
  State s;
  s.counter = U32x4{0, 0, 0, 0};
  s.key0 = uint32_t(seed);
  s.key1 = uint32_t(seed >> 32);
  s.next_lane = 0;
  // cuRAND also evaluates the block after the subsequence jump, but skip_values always replaces it.
  advance_subsequences(s, subsequence);
  skip_values(s, offset);
  return s;
}

// Four consecutive values starting at lane `first_lane` of block `cur`, continuing into `nxt`.
EMBER_PHILOX_FN U32x4 four_from(const U32x4& cur, const U32x4& nxt, uint32_t first_lane) {
  switch (first_lane) {
    case 1:
      return U32x4{cur.y, cur.z, cur.w, nxt.x};
    case 2:
      return U32x4{cur.z, cur.w, nxt.x, nxt.y};
    case 3:
      return U32x4{cur.w, nxt.x, nxt.y, nxt.z};
    default:
      return cur;
  }
}

// curand4: the next four 32-bit values. When the position is not at a block boundary they span
// the current block and the next one.
EMBER_PHILOX_FN U32x4 next4(State& s) {
  const U32x4 cur = s.block;
  advance_one_block(s);
  s.block = philox4x32_10(s.counter, s.key0, s.key1);
  return four_from(cur, s.block, s.next_lane);
}

// What curand4 returns first after curand_init(seed, subsequence, offset), evaluating only the
// blocks it uses (one when offset is a multiple of 4); the random kernels draw each group this way.
EMBER_PHILOX_FN U32x4 draw4(uint64_t seed, uint64_t subsequence, uint64_t offset) {
  State s;
  s.counter = U32x4{0, 0, 0, 0};
  s.key0 = uint32_t(seed);
  s.key1 = uint32_t(seed >> 32);
  s.next_lane = uint32_t(offset & 3);
  advance_subsequences(s, subsequence);
  advance_blocks(s, offset / 4);
  const U32x4 cur = philox4x32_10(s.counter, s.key0, s.key1);
  if (s.next_lane == 0) return cur;
  advance_one_block(s);
  return four_from(cur, philox4x32_10(s.counter, s.key0, s.key1), s.next_lane);
}

// cuRAND's uint32 -> float in (0, 1]: (x + 1/2) * 2^-32 rounded to float. The product with 2^-32 is
// exact, so only the final addition rounds, on the host and the device alike (fused or not).
EMBER_PHILOX_FN float uniform_from_bits(uint32_t bits) {
  return float(bits) * kTwoPowMinus32 + kTwoPowMinus32 / 2.0f;
}

// cuRAND's Box-Muller for one pair: the radius from the first value (as a (0, 1] uniform), the
// angle from the second (in (0, 2*pi]); returns (r*sin, r*cos). On the device nvcc fuses the
// angle's multiply-add, so the host spells the fused form out.
EMBER_PHILOX_FN F32x2 box_muller(uint32_t radius_bits, uint32_t angle_bits) {
  const float u = uniform_from_bits(radius_bits);
#if defined(__CUDA_ARCH__)
  const float angle =
      fmaf(float(angle_bits), kTwoPiTimesTwoPowMinus32, kTwoPiTimesTwoPowMinus32 / 2.0f);
  const float radius = sqrtf(-2.0f * logf(u));
  float sin_a, cos_a;
  __sincosf(angle, &sin_a, &cos_a);
#else
  const float angle =
      std::fma(float(angle_bits), kTwoPiTimesTwoPowMinus32, kTwoPiTimesTwoPowMinus32 / 2.0f);
  const float radius = std::sqrt(-2.0f * std::log(u));
  const float sin_a = std::sin(angle);
  const float cos_a = std::cos(angle);
#endif
  return F32x2{sin_a * radius, cos_a * radius};
}

// curand_uniform4: four floats in (0, 1].
EMBER_PHILOX_FN F32x4 uniform4_from_bits(const U32x4& b) {
  return F32x4{uniform_from_bits(b.x), uniform_from_bits(b.y), uniform_from_bits(b.z),
               uniform_from_bits(b.w)};
}
EMBER_PHILOX_FN F32x4 uniform4(State& s) { return uniform4_from_bits(next4(s)); }

// curand_normal4: lanes (x, y) from the pair (bits.x, bits.y), lanes (z, w) from (bits.z, bits.w).
EMBER_PHILOX_FN F32x4 normal4_from_bits(const U32x4& b) {
  const F32x2 first = box_muller(b.x, b.y);
  const F32x2 second = box_muller(b.z, b.w);
  return F32x4{first.x, first.y, second.x, second.y};
}
EMBER_PHILOX_FN F32x4 normal4(State& s) { return normal4_from_bits(next4(s)); }

EMBER_PHILOX_FN uint32_t lane(const U32x4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
EMBER_PHILOX_FN float lane(const F32x4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// ---- element transforms shared by the CPU and CUDA random kernels -----------------------------
// Every one is written with explicit fused multiply-adds where it multiplies and adds, so that the
// host and nvcc (which fuses on its own) round identically.

// cuRAND's uniforms lie in (0, 1]; ops want [0, 1). Like PyTorch, map exactly 1 to 0.
EMBER_PHILOX_FN float to_half_open(float u) { return u == 1.0f ? 0.0f : u; }

// Rounding low + range * u to the output type can land on `high` (or just above a `high` that the
// type cannot hold). Both kernels then store the next value below instead, the one rounding down
// would have given, so uniform outputs stay in [low, high) without piling up anywhere else.
EMBER_PHILOX_FN float next_below(float v) {
#if defined(__CUDA_ARCH__)
  return nextafterf(v, -INFINITY);
#else
  return std::nextafter(v, -INFINITY);
#endif
}
EMBER_PHILOX_FN double next_below(double v) {
#if defined(__CUDA_ARCH__)
  return nextafter(v, -INFINITY);
#else
  return std::nextafter(v, double(-INFINITY));
#endif
}
// The same for the raw bits of a finite fp16 or bf16 value (sign-magnitude: step the magnitude up
// for negatives and zeros, down for positives).
EMBER_PHILOX_FN uint16_t next_below_bits16(uint16_t bits) {
  if ((bits & 0x7fffu) == 0) return 0x8001u;
  return (bits & 0x8000u) ? uint16_t(bits + 1) : uint16_t(bits - 1);
}

// low + range * u in float (f32, f16, bf16 outputs) or double (f64 outputs).
EMBER_PHILOX_FN float affine(float u, float range, float low) {
#if defined(__CUDA_ARCH__)
  return fmaf(range, u, low);
#else
  return std::fma(range, u, low);
#endif
}
EMBER_PHILOX_FN double affine(float u, double range, double low) {
#if defined(__CUDA_ARCH__)
  return fma(range, double(u), low);
#else
  return std::fma(range, double(u), low);
#endif
}

// randint over `range` = high - low values (1 <= range <= 2^32): floor(bits * range / 2^32), i.e.
// floor(u * range) for u = bits / 2^32 in [0, 1), computed exactly in integers.
inline constexpr uint64_t kMaxRandintRange = uint64_t(1) << 32;
EMBER_PHILOX_FN uint64_t randint_from_bits(uint32_t bits, uint64_t range) {
  return (uint64_t(bits) * range) >> 32;
}

// bernoulli(p): 1 when the half-open uniform is below p, so p = 0 never and p = 1 always fires.
EMBER_PHILOX_FN bool bernoulli_from_uniform(float u, double p) {
  return double(to_half_open(u)) < p;
}

}  // namespace ember::philox
