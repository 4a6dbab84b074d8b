// Random numbers on the CPU: the Philox4x32-10 host implementation (tensor/philox.h) against known
// answers and cuRAND's stream layout, the element transforms, the CPU random_kernel through a
// Tensor, and the Generator's (seed, offset) bookkeeping. CPU/GPU equality is in
// tests/cuda/test_random_cuda.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ember/kernel_interface/random.h"
#include "ember/tensor/philox.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace {

using ember::philox::F32x4;
using ember::philox::U32x4;
namespace philox = ember::philox;

bool same(const U32x4& a, const U32x4& b) {
  return a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w;
}

// Value number `index` of subsequence `subsequence`, straight from the definition of the stream:
// block k of a subsequence is Philox(counter = (k, subsequence), key = seed).
uint32_t stream_value(uint64_t seed, uint64_t subsequence, uint64_t index) {
  const uint64_t block = index / 4;
  const U32x4 counter{uint32_t(block), uint32_t(block >> 32), uint32_t(subsequence),
                      uint32_t(subsequence >> 32)};
  return philox::lane(philox::philox4x32_10(counter, uint32_t(seed), uint32_t(seed >> 32)),
                      int(index % 4));
}

struct Moments {
  double mean = 0, var = 0, min = INFINITY, max = -INFINITY;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= double(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= double(v.size() - 1);
  return m;
}

constexpr uint64_t kSeed = 0x0123456789abcdefull;

}  // namespace

TEST_CASE("philox4x32_10 reproduces the Random123 known-answer vectors") {
  struct Case {
    U32x4 counter;
    uint32_t key0, key1;
    U32x4 expected;
  };
  const Case cases[] = {
      {{0, 0, 0, 0}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       0xffffffff,
       0xffffffff,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       0xa4093822,
       0x299f31d0,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case& c : cases) {
    const U32x4 got = philox::philox4x32_10(c.counter, c.key0, c.key1);
    CHECK(same(got, c.expected));
  }
}

TEST_CASE("philox init lays out the counter and key like curand_init") {
  struct Case {
    uint64_t seed, subsequence, offset;
    U32x4 counter;
    uint32_t next_lane;
  };
  const Case cases[] = {
      {0, 0, 0, {0, 0, 0, 0}, 0},
      {1, 2, 3, {0, 0, 2, 0}, 3},
      {7, 0x1'0000'0000ull, 4 * 0x1'0000'0000ull + 1, {0, 1, 0, 1}, 1},
      {kSeed,
       0xfedcba9876543210ull,
       0x1111222233334446ull,
       {0x8cccd111, 0x04444888, 0x76543210, 0xfedcba98},
       2},
  };
  for (const Case& c : cases) {
    const philox::State s = philox::init(c.seed, c.subsequence, c.offset);
    CHECK(same(s.counter, c.counter));
    CHECK(s.next_lane == c.next_lane);
    CHECK(s.key0 == uint32_t(c.seed));
    CHECK(s.key1 == uint32_t(c.seed >> 32));
    CHECK(same(s.block, philox::philox4x32_10(c.counter, s.key0, s.key1)));
  }
  // Random123's zero vector is the first draw of seed 0, subsequence 0, offset 0.
  philox::State zero = philox::init(0, 0, 0);
  CHECK(same(philox::next4(zero), {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
}

TEST_CASE("philox draws follow the stream: offsets in 32-bit values, block carries") {
  const uint64_t subsequences[] = {0, 1, 12345, 0xffffffffull, 0xffffffffffffffffull};
  const uint64_t offsets[] = {0,
                              1,
                              2,
                              3,
                              4,
                              5,
                              6,
                              7,
                              1001,
                              4 * 0xffffffffull + 2,
                              4 * 0xffffffffull + 3,
                              (uint64_t(1) << 63) + 5};
  for (uint64_t q : subsequences) {
    for (uint64_t k : offsets) {
      CAPTURE(q);
      CAPTURE(k);
      philox::State s = philox::init(kSeed, q, k);
      const U32x4 first = philox::next4(s);
      const U32x4 second = philox::next4(s);  // consecutive curand4 calls continue the stream
      for (int l = 0; l < 4; ++l) {
        CHECK(philox::lane(first, l) == stream_value(kSeed, q, k + uint64_t(l)));
        CHECK(philox::lane(second, l) == stream_value(kSeed, q, k + 4 + uint64_t(l)));
      }
      CHECK(same(philox::draw4(kSeed, q, k), first));
    }
  }
}

TEST_CASE("philox uniform and Box-Muller conversions match cuRAND's arithmetic") {
  // (x + 1/2) * 2^-32 rounded to float: (0, 1], with 1 reached by the top 128 values (those that
  // round to 2^32 as floats).
  CHECK(philox::uniform_from_bits(0) == std::ldexp(1.0f, -33));
  CHECK(philox::uniform_from_bits(0x80000000u) == 0.5f);
  CHECK(philox::uniform_from_bits(0xffffffffu) == 1.0f);
  CHECK(philox::uniform_from_bits(0xffffff80u) == 1.0f);
  CHECK(philox::uniform_from_bits(0xffffff7fu) == 1.0f - std::ldexp(1.0f, -24));
  // Below 2^-9 the float keeps every bit: values stay distinct.
  CHECK(philox::uniform_from_bits(1) == 3 * std::ldexp(1.0f, -33));
  // The radius comes from the first value, the angle from the second; outputs are (r sin, r cos).
  // u = 0.5, angle = pi/2: (sqrt(2 ln 2), 0). u = 0.25, angle = pi: (0, -sqrt(4 ln 2)).
  const philox::F32x2 quarter_turn = philox::box_muller(0x80000000u, 0x40000000u);
  CHECK(quarter_turn.x == doctest::Approx(std::sqrt(2 * std::log(2.0))).epsilon(1e-6));
  CHECK(std::fabs(quarter_turn.y) < 1e-6);
  const philox::F32x2 half_turn = philox::box_muller(0x40000000u, 0x80000000u);
  CHECK(std::fabs(half_turn.x) < 1e-6);
  CHECK(half_turn.y == doctest::Approx(-std::sqrt(4 * std::log(2.0))).epsilon(1e-6));
  // normal4: lanes (x, y) from the pair (bits.x, bits.y), lanes (z, w) from (bits.z, bits.w).
  const U32x4 bits{0x80000000u, 0x40000000u, 0x40000000u, 0x80000000u};
  const F32x4 n = philox::normal4_from_bits(bits);
  CHECK(n.x == quarter_turn.x);
  CHECK(n.y == quarter_turn.y);
  CHECK(n.z == half_turn.x);
  CHECK(n.w == half_turn.y);
}

TEST_CASE("philox uniforms and normals have sane statistics and depend on seed and offset") {
  const int64_t n = 100000;
  std::vector<double> u, z;
  for (int64_t g = 0; g < n / 4; ++g) {
    const U32x4 bits = philox::draw4(kSeed, uint64_t(g), 0);
    const F32x4 uf = philox::uniform4_from_bits(bits);
    const F32x4 nf = philox::normal4_from_bits(bits);
    for (int l = 0; l < 4; ++l) {
      u.push_back(philox::lane(uf, l));
      z.push_back(philox::lane(nf, l));
    }
  }
  const Moments mu = moments(u);
  CHECK(mu.min > 0);
  CHECK(mu.max <= 1);
  CHECK(mu.mean == doctest::Approx(0.5).epsilon(0.01));  // sd of the mean ~0.0009
  CHECK(mu.var == doctest::Approx(1.0 / 12).epsilon(0.02));
  const Moments mz = moments(z);
  CHECK(std::fabs(mz.mean) < 0.02);  // sd of the mean ~0.003
  CHECK(std::sqrt(mz.var) == doctest::Approx(1.0).epsilon(0.02));
  CHECK(mz.max < 7);  // Box-Muller from float uniforms never exceeds ~6.7
  CHECK(mz.min > -7);

  // Same (seed, subsequence, offset): same numbers; another seed or offset: different ones.
  CHECK(same(philox::draw4(kSeed, 5, 8), philox::draw4(kSeed, 5, 8)));
  CHECK(!same(philox::draw4(kSeed, 5, 8), philox::draw4(kSeed + 1, 5, 8)));
  CHECK(!same(philox::draw4(kSeed, 5, 8), philox::draw4(kSeed, 5, 12)));
  CHECK(!same(philox::draw4(kSeed, 5, 8), philox::draw4(kSeed, 6, 8)));
}

TEST_CASE("randint and bernoulli transforms") {
  struct RangeCase {
    uint32_t bits;
    uint64_t range;
    uint64_t expected;
  };
  const RangeCase ranges[] = {
      {0, 10, 0},
      {0xffffffffu, 10, 9},
      {0x80000000u, 10, 5},
      {0xffffffffu, 1, 0},
      {12345u, uint64_t(1) << 32, 12345u},
      {0xffffffffu, uint64_t(1) << 32, 0xffffffffu},
      {0x19999999u, 10, 0},
      {0x1999999au, 10, 1},
  };
  for (const RangeCase& c : ranges) CHECK(philox::randint_from_bits(c.bits, c.range) == c.expected);

  // Every value of a small range appears about equally often.
  std::vector<int64_t> counts(7, 0);
  for (int64_t g = 0; g < 25000; ++g) {
    const U32x4 bits = philox::draw4(kSeed, uint64_t(g), 4);
    for (int l = 0; l < 4; ++l)
      ++counts[size_t(philox::randint_from_bits(philox::lane(bits, l), 7))];
  }
  for (int64_t c : counts) CHECK(double(c) == doctest::Approx(100000.0 / 7).epsilon(0.05));

  // bernoulli uses the half-open uniform: p = 0 never fires, p = 1 always does (even for u == 1).
  CHECK(philox::to_half_open(1.0f) == 0.0f);
  CHECK(!philox::bernoulli_from_uniform(std::ldexp(1.0f, -33), 0.0));
  CHECK(philox::bernoulli_from_uniform(1.0f, 1.0));
  CHECK(!philox::bernoulli_from_uniform(0.5f, 0.5));
  int64_t fired = 0;
  for (int64_t g = 0; g < 25000; ++g) {
    const F32x4 u = philox::uniform4_from_bits(philox::draw4(kSeed, uint64_t(g), 8));
    for (int l = 0; l < 4; ++l) fired += philox::bernoulli_from_uniform(philox::lane(u, l), 0.3);
  }
  CHECK(double(fired) / 100000 == doctest::Approx(0.3).epsilon(0.03));
}

// ---- the CPU random_kernel through a Tensor ---------------------------------------------------

namespace {
ember::RandomParams params(ember::RandomKind kind, double a, double b, uint64_t offset) {
  ember::RandomParams p;
  p.kind = kind;
  p.a = a;
  p.b = b;
  p.seed = kSeed;
  p.offset = offset;
  return p;
}
void fill(const ember::Tensor& t, const ember::RandomParams& p) {
  ember::random_kernel().get(ember::DeviceType::CPU, t.dtype())(t, p);
}
}  // namespace

TEST_CASE("CPU random_kernel: element i takes lane i % 4 of subsequence i / 4") {
  using ember::DType;
  using ember::RandomKind;
  for (int64_t n : {1, 7, 1001}) {
    for (uint64_t offset : {uint64_t(0), uint64_t(4), uint64_t(6)}) {
      CAPTURE(n);
      CAPTURE(offset);
      ember::Tensor t = ember::empty({n}, DType::f32);
      fill(t, params(RandomKind::uniform, -2, 3, offset));
      const float* v = t.data<float>();
      for (int64_t i = 0; i < n; ++i) {
        const float u = philox::lane(
            philox::uniform4_from_bits(philox::draw4(kSeed, uint64_t(i / 4), offset)), int(i % 4));
        REQUIRE(v[i] == std::fma(5.0f, philox::to_half_open(u), -2.0f));
      }
    }
  }
  // Normals (f64) use the same lanes: mean a, standard deviation b.
  ember::Tensor z = ember::empty({10}, DType::f64);
  fill(z, params(RandomKind::normal, 1.5, 2, 0));
  const double* zv = z.data<double>();
  for (int64_t i = 0; i < 10; ++i) {
    const float n = philox::lane(
        philox::normal4_from_bits(philox::draw4(kSeed, uint64_t(i / 4), 0)), int(i % 4));
    CHECK(zv[i] == std::fma(2.0, double(n), 1.5));
  }
  // A transposed (non-contiguous) output gets the same values at the same logical positions.
  ember::Tensor dense = ember::empty({3, 5}, DType::f32);
  fill(dense, params(RandomKind::uniform, 0, 1, 0));
  ember::Tensor base = ember::empty({5, 3}, DType::f32);
  ember::Tensor transposed = ember::make_view(base, {3, 5}, {1, 3}, 0);
  fill(transposed, params(RandomKind::uniform, 0, 1, 0));
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c)
      CHECK(base.data<float>()[c * 3 + r] == dense.data<float>()[r * 5 + c]);
}

TEST_CASE("CPU random_kernel: ranges, rates and dtypes") {
  using ember::DType;
  using ember::RandomKind;
  const int64_t n = 40000;
  // uniform stays in [a, b) for every floating dtype, even where rounding would reach b.
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const std::string dtype = ember::dtype_name(dt);
    CAPTURE(dtype);
    ember::Tensor t = ember::empty({n}, dt);
    fill(t, params(RandomKind::uniform, 1, 2, 0));
    const std::vector<double> v = t.to_vector();
    const Moments m = moments(v);
    CHECK(m.min >= 1);
    CHECK(m.max < 2);
    CHECK(m.mean == doctest::Approx(1.5).epsilon(0.01));
  }
  // randint: every value of [-3, 4) and nothing else.
  for (DType dt : {DType::i64, DType::i32, DType::f32}) {
    const std::string dtype = ember::dtype_name(dt);
    CAPTURE(dtype);
    ember::Tensor t = ember::empty({n}, dt);
    fill(t, params(RandomKind::randint, -3, 4, 8));
    std::vector<int64_t> counts(7, 0);
    for (double x : t.to_vector()) {
      REQUIRE(x >= -3);
      REQUIRE(x < 4);
      REQUIRE(x == std::floor(x));
      ++counts[size_t(x + 3)];
    }
    for (int64_t c : counts) CHECK(c > 0);
  }
  // bernoulli: 0/1 at rate p for bool, u8 and float outputs.
  for (DType dt : {DType::boolean, DType::u8, DType::f32}) {
    const std::string dtype = ember::dtype_name(dt);
    CAPTURE(dtype);
    ember::Tensor t = ember::empty({n}, dt);
    fill(t, params(RandomKind::bernoulli, 0.25, 0, 12));
    double ones = 0;
    for (double x : t.to_vector()) {
      REQUIRE((x == 0 || x == 1));
      ones += x;
    }
    CHECK(ones / double(n) == doctest::Approx(0.25).epsilon(0.04));
  }
  // Kinds an integral output cannot hold, and randint ranges wider than 2^32, are refused.
  ember::Tensor ints = ember::empty({4}, DType::i32);
  CHECK_THROWS_AS(fill(ints, params(RandomKind::normal, 0, 1, 0)), ember::Error);
  ember::Tensor wide = ember::empty({4}, DType::i64);
  CHECK_THROWS_AS(fill(wide, params(RandomKind::randint, 0, 1e11, 0)), ember::Error);
}

TEST_CASE("Generator: reserve hands out and advances (seed, offset)") {
  ember::Generator gen(ember::Device::cpu(), 42);
  CHECK(gen.seed() == 42);
  CHECK(gen.offset() == 0);
  const ember::PhiloxState first = gen.reserve();
  CHECK(first.seed == 42);
  CHECK(first.offset == 0);
  CHECK(first.device_offset == nullptr);
  CHECK(gen.reserve(8).offset == 4);
  CHECK(gen.offset() == 12);
  gen.set_offset(100);
  CHECK(gen.reserve().offset == 100);
  gen.manual_seed(7);
  CHECK(gen.seed() == 7);
  CHECK(gen.offset() == 0);
  // CPU generators take no part in CUDA graphs.
  CHECK_THROWS_AS(gen.capture_begin(), ember::Error);
  CHECK_THROWS_AS(gen.capture_end(), ember::Error);

  // The default CPU generator is one object; ember::manual_seed reseeds it.
  ember::Generator& cpu = ember::default_generator(ember::Device::cpu());
  CHECK(&cpu == &ember::default_generator(ember::Device::cpu()));
  ember::manual_seed(1234);
  CHECK(cpu.seed() == 1234);
  CHECK(cpu.offset() == 0);
  const uint64_t draw_a = cpu.reserve().offset;
  ember::manual_seed(1234);
  CHECK(cpu.reserve().offset == draw_a);
}
