// AlgoKey helpers: op-name interning, direction names, filling a key from tensors and devices,
// the readable form used in logs, and the size distance of the dynamic-shape policy.
#include "ember/dispatch/algo_key.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>
#include <vector>

#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/tensor.h"

namespace ember::dispatch {

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::forward:
      return "forward";
    case Direction::backward_data:
      return "backward_data";
    case Direction::backward_filter:
      return "backward_filter";
    case Direction::backward:
      return "backward";
  }
  return "?";
}

Direction direction_from_name(std::string_view name) {
  for (int i = 0; i < kNumDirections; ++i)
    if (name == direction_name(Direction(i))) return Direction(i);
  EMBER_THROW(bad_param, "unknown algorithm direction '", name,
              "'; expected forward, backward_data, backward_filter or backward");
}

const char* operand_layout_name(OperandLayout l) {
  switch (l) {
    case OperandLayout::contiguous:
      return "contiguous";
    case OperandLayout::channels_last:
      return "channels_last";
    case OperandLayout::strided:
      return "strided";
  }
  return "?";
}

namespace {
// The interned op names. Names are appended, never removed, and the vector is reserved up front,
// so op_name() may return a reference that stays valid while other threads intern new names.
struct OpNames {
  std::mutex mutex;
  std::vector<std::string> names;
  OpNames() { names.reserve(kMaxAlgoOps); }
};
OpNames& op_names() {
  static OpNames* table = new OpNames();  // leaked: used by static destructors and atexit saves
  return *table;
}
}  // namespace

OpId op_id(std::string_view name) {
  EMBER_CHECK(!name.empty(), "dispatch::op_id: an op name must not be empty");
  OpNames& t = op_names();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (size_t i = 0; i < t.names.size(); ++i)
    if (t.names[i] == name) return OpId(i);
  EMBER_CHECK_STATUS(t.names.size() < size_t(kMaxAlgoOps), internal, "dispatch::op_id: more than ",
                     kMaxAlgoOps, " op names interned (while adding '", name,
                     "'); raise kMaxAlgoOps in dispatch/algo_key.h");
  t.names.emplace_back(name);
  return OpId(t.names.size() - 1);
}

std::optional<OpId> find_op_id(std::string_view name) {
  OpNames& t = op_names();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (size_t i = 0; i < t.names.size(); ++i)
    if (t.names[i] == name) return OpId(i);
  return std::nullopt;
}

const std::string& op_name(OpId id) {
  OpNames& t = op_names();
  std::lock_guard<std::mutex> lock(t.mutex);
  EMBER_INTERNAL_ASSERT(id < t.names.size(), "op id ", id, " was never interned");
  return t.names[id];
}

uint8_t workspace_bucket(size_t limit_bytes) {
  if (limit_bytes == kNoWorkspaceLimit) return 255;
  if (limit_bytes == 0) return 0;
  int log2 = 63 - __builtin_clzll(uint64_t(limit_bytes));
  return uint8_t(1 + log2);
}

namespace {
// Whether strides are those of a dense tensor whose dims, innermost first, are `order`; size-1
// dims may have any stride (as Tensor::is_contiguous). Allocation-free and without early exits:
// this runs for every operand of every lookup.
bool dense_in_order(const int64_t* sizes, const int64_t* strides, const int* order, int n) {
  int64_t expect = 1;
  bool dense = true;
  for (int i = 0; i < n; ++i) {
    const int d = order[i];
    dense &= sizes[d] == 1 || strides[d] == expect;
    expect *= std::max<int64_t>(sizes[d], 1);
  }
  return dense;
}

[[gnu::always_inline]] inline OperandLayout layout_of(const int64_t* sizes, const int64_t* strides,
                                                      int n) {
  if (n == 4) {
    // The common case (NCHW activations and filters), straight-line: both dense orders checked
    // at once, without the order tables' indirect loads.
    const int64_t c = std::max<int64_t>(sizes[1], 1), h = std::max<int64_t>(sizes[2], 1),
                  w = std::max<int64_t>(sizes[3], 1);
    auto ok = [&](int d, int64_t expect) { return sizes[d] == 1 || strides[d] == expect; };
    if (ok(3, 1) & ok(2, w) & ok(1, w * h) & ok(0, w * h * c)) return OperandLayout::contiguous;
    if (ok(1, 1) & ok(3, c) & ok(2, c * w) & ok(0, c * w * h)) return OperandLayout::channels_last;
    return OperandLayout::strided;
  }
  static constexpr int kRowMajor[6][AlgoKey::kMaxDims] = {
      {}, {0}, {1, 0}, {2, 1, 0}, {3, 2, 1, 0}, {4, 3, 2, 1, 0}};  // W, H, (D), C, N
  static constexpr int kChannelsLast4[4] = {1, 3, 2, 0};           // C innermost, then W, H, N
  static constexpr int kChannelsLast5[5] = {1, 4, 3, 2, 0};        // C, W, H, D, N
  if (dense_in_order(sizes, strides, kRowMajor[n], n)) return OperandLayout::contiguous;
  if ((n == 4 && dense_in_order(sizes, strides, kChannelsLast4, 4)) ||
      (n == 5 && dense_in_order(sizes, strides, kChannelsLast5, 5)))
    return OperandLayout::channels_last;
  return OperandLayout::strided;
}

uint8_t alignment_of(const void* p) {
  auto bits = reinterpret_cast<uintptr_t>(p);
  if (bits == 0) return 16;  // empty tensors: nothing is loaded through the pointer
  uintptr_t lowest = bits & (~bits + 1);
  return uint8_t(lowest >= 16 ? 16 : lowest);
}
}  // namespace

namespace {
// The errors of describe(), out of line so that its hot path keeps a small frame.
[[gnu::cold, gnu::noinline]] void throw_bad_operand(const Tensor& t) {
  EMBER_CHECK(t.defined(), "AlgoKey::describe: the operand tensor is undefined");
  EMBER_THROW(bad_param, "AlgoKey::describe: operand has ", t.dim(), " dims (shape ", t.shape_str(),
              "); algorithm keys hold at most ", AlgoKey::kMaxDims);
}

// One operand into the key: its sizes, dtype and layout, and the key's rank and alignment. Inlined
// into both describe() forms; straight from the TensorImpl, because the Tensor accessors are
// out-of-line calls that each re-check definedness, and this runs for every operand of every
// lookup.
[[gnu::always_inline]] inline void describe_operand(AlgoKey& key, int32_t* sizes, uint8_t& dtype,
                                                    uint8_t& layout, const Tensor& t) {
  const TensorImpl* impl_ptr = t.impl();
  if (impl_ptr == nullptr || impl_ptr->sizes.size() > size_t(AlgoKey::kMaxDims)) [[unlikely]]
    throw_bad_operand(t);
  const TensorImpl& impl = *impl_ptr;
  const int n = int(impl.sizes.size());
  const int64_t* shape = impl.sizes.data();
  bool empty = false, oversize = false;
  for (int i = 0; i < n; ++i) {
    sizes[i] = int32_t(shape[i]);
    empty |= shape[i] == 0;
    oversize |= shape[i] > std::numeric_limits<int32_t>::max();
  }
  for (int i = n; i < AlgoKey::kMaxDims; ++i) sizes[i] = 0;
  key.oversize |= uint8_t(oversize);
  dtype = uint8_t(impl.dtype);
  layout = uint8_t(layout_of(shape, impl.strides.data(), n));
  if (uint8_t(n) > key.rank) key.rank = uint8_t(n);
  const char* first = static_cast<const char*>(impl.storage->data.ptr);
  if (impl.offset != 0) first += impl.offset * int64_t(element_size(impl.dtype));
  const uint8_t align = empty ? uint8_t(16) : alignment_of(first);
  if (key.alignment_bytes == 0 || align < key.alignment_bytes) key.alignment_bytes = align;
}
}  // namespace

void AlgoKey::describe(Operand which, const Tensor& t) {
  switch (which) {
    case Operand::input:
      describe_operand(*this, input_sizes, input_dtype, input_layout, t);
      break;
    case Operand::weight:
      describe_operand(*this, weight_sizes, weight_dtype, weight_layout, t);
      break;
    case Operand::output:
      describe_operand(*this, output_sizes, output_dtype, output_layout, t);
      break;
  }
}

void AlgoKey::describe(const Tensor& input, const Tensor& weight, const Tensor& output) {
  describe_operand(*this, input_sizes, input_dtype, input_layout, input);
  describe_operand(*this, weight_sizes, weight_dtype, weight_layout, weight);
  describe_operand(*this, output_sizes, output_dtype, output_layout, output);
}

void set_device_architecture(AlgoKey& key, int device_index) {
  const cuda::DeviceProperties& props = cuda::device_properties(device_index);
  key.cc_major = uint8_t(props.major);
  key.cc_minor = uint8_t(props.minor);
  key.sm_count = uint16_t(props.sm_count);
}

namespace {
template <typename Int>
void print_sizes(std::ostream& os, const Int* sizes, int rank) {
  os << '[';
  for (int i = 0; i < rank; ++i) os << (i ? "," : "") << int64_t(sizes[i]);
  os << ']';
}
void print_spatial(std::ostream& os, const int16_t* v) {
  int n = AlgoKey::kMaxSpatialDims;
  while (n > 1 && v[n - 1] == 0) --n;  // unused trailing spatial dims are zero
  print_sizes(os, v, n);
}
}  // namespace

std::string AlgoKey::to_string() const {
  std::ostringstream os;
  os << op_name(op) << '.' << direction_name(Direction(direction)) << ' '
     << (DeviceType(device_type) == DeviceType::CUDA ? "cuda" : "cpu");
  if (DeviceType(device_type) == DeviceType::CUDA)
    os << " cc=" << int(cc_major) << '.' << int(cc_minor) << " sms=" << sm_count;
  auto operand = [&](const char* label, const int32_t* sizes, uint8_t dt, uint8_t lay) {
    os << ' ' << label << '=';
    print_sizes(os, sizes, rank);
    os << ' ' << dtype_name(DType(dt)) << ' ' << operand_layout_name(OperandLayout(lay));
  };
  operand("in", input_sizes, input_dtype, input_layout);
  operand("w", weight_sizes, weight_dtype, weight_layout);
  operand("out", output_sizes, output_dtype, output_layout);
  os << " stride=";
  print_spatial(os, stride);
  os << " pad=";
  print_spatial(os, padding);
  os << " dil=";
  print_spatial(os, dilation);
  os << " groups=" << groups;
  bool any_extra = false;
  for (int32_t e : extra) any_extra |= e != 0;
  if (any_extra) {
    os << " extra=";
    print_sizes(os, extra, kNumExtra);
  }
  os << " align=" << int(alignment_bytes) << " tf32=" << int(allow_tf32)
     << " deterministic=" << int(deterministic) << " ws_bucket=";
  if (workspace_bucket == 255)
    os << "unlimited";
  else
    os << int(workspace_bucket);
  if (oversize) os << " oversize (values beyond the key's fields: not cached)";
  return os.str();
}

double size_distance(const AlgoKey& a, const AlgoKey& b) {
  AlgoKey a_shape_free = a, b_shape_free = b;
  for (AlgoKey* k : {&a_shape_free, &b_shape_free}) {
    std::memset(k->input_sizes, 0, sizeof(k->input_sizes));
    std::memset(k->weight_sizes, 0, sizeof(k->weight_sizes));
    std::memset(k->output_sizes, 0, sizeof(k->output_sizes));
  }
  if (a_shape_free != b_shape_free) return std::numeric_limits<double>::infinity();
  double d = 0;
  auto add = [&](const int32_t* x, const int32_t* y) {
    for (int i = 0; i < AlgoKey::kMaxDims; ++i)
      d += std::fabs(std::log1p(double(x[i])) - std::log1p(double(y[i])));
  };
  add(a.input_sizes, b.input_sizes);
  add(a.weight_sizes, b.weight_sizes);
  add(a.output_sizes, b.output_sizes);
  return d;
}

AlgoKey size_class_key(const AlgoKey& key) {
  AlgoKey c = key;
  auto round_up = [](int32_t v) -> int32_t {
    if (v <= 1) return v;
    uint32_t p = 1;
    while (p < uint32_t(v) && p < (1u << 30)) p <<= 1;
    return int32_t(p);
  };
  for (int32_t* sizes : {c.input_sizes, c.output_sizes})
    for (int i = 0; i < AlgoKey::kMaxDims; ++i)
      if (i != 1) sizes[i] = round_up(sizes[i]);
  return c;
}

}  // namespace ember::dispatch
