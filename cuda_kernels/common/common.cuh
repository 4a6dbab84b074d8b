// Device-side building blocks shared by the CUDA kernels of cuda_kernels/: the device scalar type
// of each DType and the dispatch switches over it (every dtype, or a set of floating dtypes), the
// accumulation type and conversions (f16/bf16 go through float, as ember::Half/BFloat16 do on the
// host), 16-byte aligned vectors, a fast 32-bit divmod, the offset calculator that turns a flat
// index into per-operand byte offsets over the dims of an ElementwiseIter, and launch helpers
// (current stream, grids sized to the SM count or to one thread per item, values computed once
// per device, the dynamic shared-memory opt-in). Include only from .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <type_traits>
#include <utility>

#include "ember/tensor/device.h"
#include "ember/tensor/dtype.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/stream.h"
#include "ember/tensor/tensor_iter.h"

namespace ember::cuda {

// Threads per block of the elementwise, index and reduce kernels.
inline constexpr int kBlockThreads = 256;
// Blocks per SM the grid-stride kernels are sized for by default (with __launch_bounds__(
// kBlockThreads, kBlocksPerSm) the compiler keeps registers low enough for that many to be
// resident). Scattered (strided) accesses do better with few threads in flight; dense streams
// ask grid_for for more.
inline constexpr int kBlocksPerSm = 4;

// ---- device scalar types ----------------------------------------------------------------------

template <typename T>
inline constexpr bool is_reduced_float_v =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename T>
inline constexpr bool is_device_floating_v =
    is_reduced_float_v<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;

// The type arithmetic happens in: float for f16/bf16/f32, double for f64, int64 for the integral
// types (so i32/u8 wrap exactly like their own arithmetic once stored back; bool computes as 0/1).
template <typename T>
using OpMath = std::conditional_t<std::is_same_v<T, double>, double,
                                  std::conditional_t<is_device_floating_v<T>, float, int64_t>>;

// The two bfloat16 values of a 32-bit word (as loaded: the lower-addressed one in the low half)
// widened to float exactly, one instruction each (a shift, a mask).
__device__ __forceinline__ float bf16_low_as_float(uint32_t word) {
  return __uint_as_float(word << 16);
}
__device__ __forceinline__ float bf16_high_as_float(uint32_t word) {
  return __uint_as_float(word & 0xffff0000u);
}

// Value conversion between device scalar types, matching the host: 16-bit floats convert through
// float (so double -> half rounds twice, exactly like ember::Half(float(d))), bool is `!= 0`,
// floating to uint8 goes through int64 (so it wraps), everything else is a C++ conversion.
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __half>) {
    return convert<To>(__half2float(v));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, uint8_t> && std::is_floating_point_v<From>) {
    return static_cast<uint8_t>(static_cast<int64_t>(v));  // -1.0 wraps to 255, as on the CPU
  } else {
    return static_cast<To>(v);
  }
}

template <typename T>
__device__ __forceinline__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

// N elements loaded or stored as one access (16 bytes for the elementwise vector paths).
template <typename T, int N>
struct alignas(sizeof(T) * N) AlignedVec {
  T v[N];
};

// ---- dispatch ---------------------------------------------------------------------------------

// Every dtype dispatch in the CUDA backend has one form: f(T{}) with T the DEVICE type of the
// runtime dtype (float, double, __half, __nv_bfloat16, int32_t, int64_t, uint8_t, bool); the callee
// names it as `using scalar_t = decltype(tag);`. dispatch_all_dtypes takes every dtype,
// dispatch_floating (below) a chosen set of floating ones.
template <typename F>
void dispatch_all_dtypes(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::f64:
      f(double{});
      return;
    case DType::f16:
      f(__half{});
      return;
    case DType::bf16:
      f(__nv_bfloat16{});
      return;
    case DType::i32:
      f(int32_t{});
      return;
    case DType::i64:
      f(int64_t{});
      return;
    case DType::u8:
      f(uint8_t{});
      return;
    case DType::boolean:
      f(bool{});
      return;
  }
  EMBER_THROW(internal, op, ": unknown dtype code ", int(dtype));
}

// The floating dtypes one dispatch_floating call compiles its lambda for. Each one is a template
// instantiation of the caller's kernels (CI compiles on two cores), so a call site names only the
// types its kernels are built for.
enum class FloatingTypes : uint8_t {
  all,       // float32, float64, float16, bfloat16
  no_f64,    // float32, float16, bfloat16 (float64 stays on the CPU or another algorithm)
  f32_bf16,  // float32, bfloat16
};

namespace detail {
[[noreturn]] inline void throw_unsupported_floating(DType dtype, FloatingTypes types,
                                                    const char* op, const char* algorithm) {
  const char* use = types == FloatingTypes::all      ? "float32, float64, float16 or bfloat16"
                    : types == FloatingTypes::no_f64 ? "float32, float16 or bfloat16"
                                                     : "float32 or bfloat16";
  EMBER_THROW(not_supported, op, algorithm != nullptr ? " " : "",
              algorithm != nullptr ? algorithm : "", ": dtype ", dtype_name(dtype),
              " is not supported on CUDA; use ", use);
}
}  // namespace detail

// f(T{}) with T the device type of `dtype` (float, double, __half, __nv_bfloat16) when `types`
// holds it; any other dtype throws not_supported naming `op` and, when not null, its `algorithm`
// ("conv2d implicit_gemm: dtype float64 is not supported on CUDA; use ...").
template <FloatingTypes types = FloatingTypes::all, typename F>
void dispatch_floating(DType dtype, const char* op, const char* algorithm, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::bf16:
      f(__nv_bfloat16{});
      return;
    case DType::f16:
      if constexpr (types != FloatingTypes::f32_bf16) {
        f(__half{});
        return;
      }
      break;
    case DType::f64:
      if constexpr (types == FloatingTypes::all) {
        f(double{});
        return;
      }
      break;
    default:
      break;
  }
  detail::throw_unsupported_floating(dtype, types, op, algorithm);
}

template <FloatingTypes types = FloatingTypes::all, typename F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  dispatch_floating<types>(dtype, op, nullptr, std::forward<F>(f));
}

// Loads element 0 of `p`, stored as `dtype`, converted to T (a uniform runtime switch: the
// generic copy path uses it so that it needs one instantiation per output dtype only).
template <typename T>
__device__ __forceinline__ T load_as(const char* p, DType dtype) {
  switch (dtype) {
    case DType::f32:
      return convert<T>(*reinterpret_cast<const float*>(p));
    case DType::f64:
      return convert<T>(*reinterpret_cast<const double*>(p));
    case DType::f16:
      return convert<T>(*reinterpret_cast<const __half*>(p));
    case DType::bf16:
      return convert<T>(*reinterpret_cast<const __nv_bfloat16*>(p));
    case DType::i32:
      return convert<T>(*reinterpret_cast<const int32_t*>(p));
    case DType::i64:
      return convert<T>(*reinterpret_cast<const int64_t*>(p));
    case DType::u8:
      return convert<T>(*reinterpret_cast<const uint8_t*>(p));
    case DType::boolean:
      return convert<T>(*reinterpret_cast<const bool*>(p));
  }
  return T();
}

// ---- index math -------------------------------------------------------------------------------

// The one integer divider of the CUDA backend: division by a divisor fixed for a launch with a
// multiply-high and a shift (Granlund-Montgomery, as in PyTorch's IntDivider), valid for
// dividends and divisors below 2^31. FastDivmod64 below is the same divider for launches whose
// values may reach 2^31: it takes FastDivmod's path when the launch allows (use32) and divides in
// 64 bits otherwise.
struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t magic = 1;
  uint32_t shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    shift = 0;
    while (shift < 32 && (uint64_t(1) << shift) < d) ++shift;
    const uint64_t one = 1;
    magic = uint32_t(((one << 32) * ((one << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return (__umulhi(n, magic) + n) >> shift;
  }
};

// FastDivmod for launches with 64-bit sizes: use32 (uniform over the grid) selects FastDivmod's
// 32-bit path, else 64-bit division by `divisor`.
struct FastDivmod64 {
  int64_t divisor = 1;
  FastDivmod fast;
  FastDivmod64() = default;
  FastDivmod64(int64_t d, bool use32) : divisor(d) {
    if (use32) fast = FastDivmod(uint32_t(d));
  }
  __device__ __forceinline__ int64_t div(int64_t n, bool use32) const {
    return use32 ? int64_t(fast.div(uint32_t(n))) : n / divisor;
  }
  // q = n / divisor, r = n % divisor.
  __device__ __forceinline__ void divmod(int64_t n, bool use32, int64_t& q, int64_t& r) const {
    q = div(n, use32);
    r = n - q * divisor;
  }
};

// Byte offsets of NARGS operands for a flat index over up to kMaxIterDims dims. Dims are stored
// innermost first. The flat index is split with 32-bit fast divmods when the loop has fewer than
// 2^31 elements (use32, a uniform branch) and with 64-bit division otherwise. The outermost dim
// needs no division, so a 1-D loop costs one multiply per operand.
template <int NARGS>
struct OffsetCalc {
  int ndim = 0;
  bool use32 = true;
  int64_t sizes[kMaxIterDims] = {};
  FastDivmod divs[kMaxIterDims] = {};
  int64_t strides[kMaxIterDims][NARGS] = {};

  // Every dim index below is a compile-time constant after unrolling, so the struct stays in the
  // kernel's parameter space instead of being copied to local memory.
  __device__ __forceinline__ void get(int64_t linear, int64_t (&off)[NARGS]) const {
#pragma unroll
    for (int k = 0; k < NARGS; ++k) off[k] = 0;
    if (ndim == 0) return;
    if (use32) {
      uint32_t rest = uint32_t(linear);
#pragma unroll
      for (int d = 0; d < kMaxIterDims; ++d) {
        if (d == ndim - 1) {
#pragma unroll
          for (int k = 0; k < NARGS; ++k) off[k] += int64_t(rest) * strides[d][k];
          break;
        }
        const uint32_t q = divs[d].div(rest);
        const uint32_t r = rest - q * divs[d].divisor;
#pragma unroll
        for (int k = 0; k < NARGS; ++k) off[k] += int64_t(r) * strides[d][k];
        rest = q;
      }
    } else {
      int64_t rest = linear;
#pragma unroll
      for (int d = 0; d < kMaxIterDims; ++d) {
        if (d == ndim - 1) {
#pragma unroll
          for (int k = 0; k < NARGS; ++k) off[k] += rest * strides[d][k];
          break;
        }
        const int64_t q = rest / sizes[d];
        const int64_t r = rest - q * sizes[d];
#pragma unroll
        for (int k = 0; k < NARGS; ++k) off[k] += r * strides[d][k];
        rest = q;
      }
    }
  }
};

// The first NARGS operands of `iter` (missing ones get stride 0).
template <int NARGS>
OffsetCalc<NARGS> make_offset_calc(const ElementwiseIter& iter) {
  OffsetCalc<NARGS> oc;
  oc.ndim = iter.ndim;
  oc.use32 = iter.numel <= std::numeric_limits<int32_t>::max();
  for (int d = 0; d < iter.ndim; ++d) {
    const int src = iter.ndim - 1 - d;  // ElementwiseIter keeps the innermost dim last
    oc.sizes[d] = iter.sizes[src];
    if (oc.use32) oc.divs[d] = FastDivmod(uint32_t(iter.sizes[src]));
    for (int k = 0; k < NARGS; ++k)
      oc.strides[d][k] = k < iter.num_operands ? iter.strides[k][src] : 0;
  }
  return oc;
}

// ---- host helpers -----------------------------------------------------------------------------

inline cudaStream_t stream_of(Device device) {
  return static_cast<cudaStream_t>(current_stream(device).handle);
}

// Blocks for `work_items` items handled kBlockThreads at a time: enough to cover them, capped at
// `blocks_per_sm` blocks per SM of the device (the kernels loop over the rest), at least one.
inline unsigned grid_for(int64_t work_items, int device, int blocks_per_sm = kBlocksPerSm) {
  const int64_t sms = device_properties(device).sm_count;
  const int64_t cap = std::max<int64_t>(sms, 1) * blocks_per_sm;
  const int64_t needed = (work_items + kBlockThreads - 1) / kBlockThreads;
  return unsigned(std::max<int64_t>(1, std::min(needed, cap)));
}

// The largest grid.x a launch may ask for.
inline constexpr int64_t kMaxGridX = 2147483647;

// Blocks of kBlockThreads for one thread per item, uncapped (at least one): for kernels whose
// threads each take their item and exit, so blocks are placed as SMs free up (a capped grid larger
// than what is resident at once would leave a second, thinly occupied wave). Such kernels do not
// loop, so the items must fit one grid: kMaxGridX blocks are 2^39 items (16-byte vectors: far past
// any device's memory), checked. The dense elementwise and activation kernels take a 16-byte
// vector per thread this way: on large tensors it streams faster than a grid-stride loop over a
// full grid (docs/perf-notes.md, "Elementwise and activations").
inline unsigned blocks_for(int64_t items) {
  const int64_t blocks = std::max<int64_t>(1, (items + kBlockThreads - 1) / kBlockThreads);
  EMBER_INTERNAL_ASSERT(blocks <= kMaxGridX, "blocks_for: ", items, " items need ", blocks,
                        " blocks, past the grid limit");
  return unsigned(blocks);
}

// One value of type V per visible GPU, computed by `compute(device)` on the first get() for that
// device and kept for the life of the process (devices of different kinds get their own values).
// Thread-safe; after the first call a get() is one atomic load. Meant for function-local statics:
// the slots are never freed, so a get() from another static's destructor stays valid.
template <typename V>
class PerDevice {
 public:
  PerDevice() : count_(std::max(device_count(), 0)), slots_(new Slot[size_t(count_)]) {}

  template <typename Compute>
  const V& get(int device, Compute&& compute) {
    EMBER_INTERNAL_ASSERT(device >= 0 && device < count_, "PerDevice: device ", device, " of ",
                          count_);
    Slot& slot = slots_[device];
    std::call_once(slot.once, [&] { slot.value = compute(device); });
    return slot.value;
  }

 private:
  struct Slot {
    std::once_flag once;
    V value{};
  };
  int count_;
  Slot* slots_;
};

// What the dynamic shared-memory opt-in prefers for the split between L1 and shared memory.
enum class SharedCarveout : uint8_t {
  driver_default,  // the driver picks per launch
  max_shared,      // the largest shared memory (for tiles sized to fit several blocks per SM)
};

namespace detail {
// Sets `kernel`'s dynamic shared-memory limit to all `device` allows (its opt-in maximum per block,
// less the kernel's static shared memory) and returns that limit in bytes.
inline int set_max_dynamic_shared_memory(const void* kernel, int device, SharedCarveout carveout) {
  DeviceGuard guard(Device::cuda(device));  // function attributes belong to the current device
  int optin = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  EMBER_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const int dynamic_limit = std::max(optin - int(attributes.sharedSizeBytes), 0);
  EMBER_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic_limit));
  if (carveout == SharedCarveout::max_shared)
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          int(cudaSharedmemCarveoutMaxShared)));
  return dynamic_limit;
}
}  // namespace detail

// Lets `kernel` launch with as much dynamic shared memory as `device` allows (above 48 KiB a kernel
// must opt in), and returns that many bytes. The attribute is set once per (kernel, device), to the
// device's maximum rather than a per-problem size: later calls make no driver call, and two host
// threads launching the kernel with different sizes cannot undo each other's setting.
template <auto kernel, SharedCarveout carveout = SharedCarveout::driver_default>
int opt_in_max_dynamic_shared_memory(int device) {
  static PerDevice<int> limits;
  return limits.get(device, [](int d) {
    return detail::set_max_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), d,
                                                 carveout);
  });
}

// True when operand `op` is dense in the loop order (flat index i is at byte i * element size).
inline bool operand_is_flat(const ElementwiseIter& iter, int op) {
  int64_t expect = int64_t(element_size(iter.dtypes[op]));
  for (int d = iter.ndim - 1; d >= 0; --d) {
    if (iter.sizes[d] == 1) continue;
    if (iter.strides[op][d] != expect) return false;
    expect *= iter.sizes[d];
  }
  return true;
}

// True when operand `op` is one value broadcast over the whole loop (stride 0 everywhere).
inline bool operand_is_broadcast_scalar(const ElementwiseIter& iter, int op) {
  for (int d = 0; d < iter.ndim; ++d)
    if (iter.sizes[d] != 1 && iter.strides[op][d] != 0) return false;
  return true;
}

// Blocks per SM for a strided loop: a dense or broadcast innermost dim streams like a contiguous
// loop and wants many threads; an operand read across rows (a transposed input) does better with
// few accesses in flight: 2 blocks per SM for such an operand beat both 1 and 4, while a
// misaligned flat add wants 32 (docs/perf-notes.md, "Elementwise and activations").
inline int strided_blocks_per_sm(const ElementwiseIter& iter) {
  if (iter.ndim == 0) return kBlocksPerSm;
  for (int k = 0; k < iter.num_operands; ++k) {
    const int64_t inner = iter.strides[k][iter.ndim - 1];
    if (inner != 0 && inner != int64_t(element_size(iter.dtypes[k]))) return 2;
  }
  return 32;
}

inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace ember::cuda
