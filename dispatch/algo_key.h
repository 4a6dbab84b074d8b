// AlgoKey: the exact description of one problem that the AlgoCache files an algorithm choice under
// (op and direction, sizes, layouts, dtypes, op parameters, math mode, device architecture), plus
// the small vocabulary around it: op ids, directions and the size distance the dynamic-shape policy
// uses. The key is a zeroed standard-layout POD hashed and compared as bytes (as PyTorch's
// ParamsHash does for cuDNN): no padding, so two equal problems always have equal bytes.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "ember/tensor/device.h"
#include "ember/tensor/dtype.h"

namespace ember {
class Tensor;
}

namespace ember::dispatch {

// Which computation of an op an algorithm performs. Convolutions use forward / backward_data /
// backward_filter (as cuDNN names them); ops with a single backward use `backward`.
enum class Direction : uint8_t { forward, backward_data, backward_filter, backward };
inline constexpr int kNumDirections = 4;
const char* direction_name(Direction d);
// Inverse of direction_name; throws bad_param for an unknown name.
Direction direction_from_name(std::string_view name);

// Ops are identified by name ("conv2d", "lstm"); the id is a small integer interned per process
// (files store names, never ids). Interning is thread-safe; ops call it once and keep the id.
using OpId = uint16_t;
inline constexpr int kMaxAlgoOps = 256;
OpId op_id(std::string_view name);
// The id of an op name interned before, without interning it (for names read from files).
std::optional<OpId> find_op_id(std::string_view name);
const std::string& op_name(OpId id);

// How an operand's elements are laid out (kernels choose by it; the key keeps algorithms that
// need a dense layout apart from strided views).
enum class OperandLayout : uint8_t { contiguous, channels_last, strided };
const char* operand_layout_name(OperandLayout l);

inline constexpr size_t kNoWorkspaceLimit = std::numeric_limits<size_t>::max();
// The workspace limit as stored in keys: 0 for 0, 255 for no limit, else 1 + floor(log2(limit)).
// Limits in one bucket share cache entries; a hit whose workspace exceeds the exact limit is
// re-checked (see algo_cache_lookup.cpp), so bucketing never breaks a limit.
uint8_t workspace_bucket(size_t limit_bytes);

struct alignas(16) AlgoKey {
  static constexpr int kMaxDims = 5;         // sizes of up to 5-D operands (NCDHW)
  static constexpr int kMaxSpatialDims = 3;  // stride/padding/dilation for up to 3-D convolution
  static constexpr int kNumExtra = 4;        // op parameters beyond convolution's (LSTM sizes...)

  // ---- header: 24 bytes ----
  uint16_t op;          // OpId
  uint8_t direction;    // Direction
  uint8_t device_type;  // DeviceType
  uint8_t rank;         // dims used in the size arrays
  uint8_t input_dtype;  // DType of each operand
  uint8_t weight_dtype;
  uint8_t output_dtype;
  uint8_t input_layout;  // OperandLayout of each operand
  uint8_t weight_layout;
  uint8_t output_layout;
  uint8_t alignment_bytes;   // smallest base-pointer alignment of the operands, capped at 16
  uint8_t allow_tf32;        // math mode: fp32 may run on TF32 tensor cores
  uint8_t deterministic;     // filled by the cache from the current mode
  uint8_t workspace_bucket;  // filled by the cache from the current workspace limit
  uint8_t cc_major;          // compute capability (0.0 on the CPU)
  uint8_t cc_minor;
  // 1 when a value did not fit its field (a size of 2^31 or more, a stride, padding or dilation
  // beyond 16 bits): the key no longer names one problem, so the cache never files it and such a
  // call is decided by the heuristic every time (see AlgoCache::choose).
  uint8_t oversize;
  uint16_t sm_count;  // streaming multiprocessors (0 on the CPU)
  uint16_t reserved1;
  uint16_t reserved2;
  // ---- sizes and op parameters: 104 bytes ----
  // 32-bit sizes and 16-bit spatial parameters keep the key at 128 bytes (two cache lines), half
  // of what int64 fields took: hashing, comparing and zeroing it are the lookup's main cost.
  // Write them through assign(), which flags values that do not fit.
  int32_t input_sizes[kMaxDims];
  int32_t weight_sizes[kMaxDims];
  int32_t output_sizes[kMaxDims];
  int16_t stride[kMaxSpatialDims];
  int16_t padding[kMaxSpatialDims];
  int16_t dilation[kMaxSpatialDims];
  uint16_t reserved3;
  int32_t groups;
  int32_t extra[kNumExtra];
  uint32_t reserved4;

  // Stores `value` in one of the fields above, setting `oversize` when it does not fit.
  template <typename Field>
  void assign(Field& field, int64_t value) {
    field = Field(value);
    if (int64_t(field) != value) [[unlikely]]
      oversize = 1;
  }

  // Every byte starts at zero (keys are hashed and compared as bytes; the static_asserts below
  // rule out padding). Eight explicit 16-byte stores: zero-initialized members compiled to
  // `rep stos`, whose start-up cost was most of building a key.
  AlgoKey() {
    typedef long long Zero16 __attribute__((vector_size(16), may_alias));
    auto* p = reinterpret_cast<Zero16*>(this);
    p[0] = p[1] = p[2] = p[3] = p[4] = p[5] = p[6] = p[7] = Zero16{};
  }

  bool operator==(const AlgoKey& o) const { return std::memcmp(this, &o, sizeof(AlgoKey)) == 0; }
  bool operator!=(const AlgoKey& o) const { return !(*this == o); }

  // 64-bit hash of the bytes: eight independent multiply-rotate lanes over 8-byte words (so the
  // hot lookup is four short dependency chains deep, not one long chain), then a final avalanche.
  uint64_t hash() const {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(this);
    return hash_words([p](size_t at) {
      uint64_t v;
      std::memcpy(&v, p + at, 8);
      return v;
    });
  }
  // The hash of a key whose 8-byte word at byte offset `at` is word(at), for every at < sizeof:
  // lets a caller hash a key with some words replaced without building the copy.
  template <typename Word>
  static uint64_t hash_words(Word word);

  // Fills sizes, dtype and layout of one operand from a tensor (at most kMaxDims dims) and lowers
  // alignment_bytes to the tensor's base-pointer alignment. Sets rank to the largest rank seen.
  enum class Operand : uint8_t { input, weight, output };
  void describe(Operand which, const Tensor& t);
  // The same for all three operands in one call (what a key builder on the hot path uses).
  void describe(const Tensor& input, const Tensor& weight, const Tensor& output);

  // One line for logs: "conv2d.forward cpu in=[2,3,7,7] f32 contiguous w=[...] ... groups=1 ...".
  std::string to_string() const;
};

static_assert(std::is_standard_layout_v<AlgoKey>, "AlgoKey is hashed as bytes");
static_assert(std::is_trivially_copyable_v<AlgoKey>, "AlgoKey is hashed as bytes");
static_assert(std::has_unique_object_representations_v<AlgoKey>,
              "AlgoKey must have no padding: every byte takes part in hash and equality");
static_assert(sizeof(AlgoKey) % 64 == 0, "AlgoKey::hash walks eight 8-byte lanes");
static_assert(sizeof(AlgoKey) == 128,
              "AlgoKey is two cache lines; keep it so (see the size fields)");

// Always inlined: as an instantiation in the shared library it was an interposable call through
// the PLT on every lookup.
template <typename Word>
[[gnu::always_inline]] inline uint64_t AlgoKey::hash_words(Word word) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  auto mix = [](uint64_t lane, uint64_t w) {
    uint64_t x = (lane ^ w) * kMul;
    return (x << 29) | (x >> 35);
  };
  // Lane seeds: digits of pi, so that no lane starts at zero.
  uint64_t lane[8] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                      0x082EFA98EC4E6C89ull, 0x452821E638D01377ull, 0xBE5466CF34E90C6Cull,
                      0xC0AC29B7C97C50DDull, 0x3F84D5B5B5470917ull};
  for (size_t i = 0; i < sizeof(AlgoKey); i += 64)
    for (size_t l = 0; l < 8; ++l) lane[l] = mix(lane[l], word(i + 8 * l));
  // Odd, distinct lane weights: a word moved to another lane changes the hash.
  uint64_t h = 0;
  for (size_t l = 0; l < 8; ++l) h ^= lane[l] * (2 * l + 1);
  h ^= h >> 31;
  h *= kMul;
  h ^= h >> 29;
  return h;
}

// Fills compute capability and SM count of CUDA device `device_index` (make_algo_key's slow part).
void set_device_architecture(AlgoKey& key, int device_index);

// A key for `op`/`direction` on `device` with the device's architecture filled in (compute
// capability and SM count of the GPU; zeros on the CPU); everything else zero. Inline: every key
// builder starts here, on every lookup.
inline AlgoKey make_algo_key(OpId op, Direction direction, Device device) {
  AlgoKey key;
  key.op = op;
  key.direction = uint8_t(direction);
  key.device_type = uint8_t(device.type);
  if (device.is_cuda()) set_device_architecture(key, device.index);
  return key;
}

// The dynamic-shape policy's distance between two keys: infinity unless they are equal in every
// field but the three size arrays; otherwise the sum over sizes of |ln(1 + a) - ln(1 + b)|, so
// doubling a dimension costs the same at every scale.
double size_distance(const AlgoKey& a, const AlgoKey& b);

// Adaptive mode's size class of a key: the key with every input and output size except dim 1
// (the channels, or the features of a [batch, features] operand) rounded up to a power of two;
// weights, parameters, dtypes and layouts stay exact. So batches 65..128 share a class, and
// resolutions 17..32 or 33..64; a conv layer's class never mixes channel counts or kernel sizes.
// Keys of one class are close enough that one's timed choice is a good provisional choice for
// another (it is used only where it applies, and replaced once the exact key is timed).
AlgoKey size_class_key(const AlgoKey& key);

}  // namespace ember::dispatch
