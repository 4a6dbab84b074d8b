// The kernel registry: for each op, a table from (device type, dtype) to the kernel that runs it.
// Tables are declared beside the op (kernel_interface/), defined once, and filled by registrations
// that live beside the kernels themselves (cpu_kernels/*.cpp, cuda_kernels/*.cu), not in a central
// switch. A missing entry is a not_supported error naming the op, the device and the dtype.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "ember/tensor/device.h"
#include "ember/tensor/dtype.h"
#include "ember/tensor/error.h"
#include "ember/tensor/runtime/cuda_device.h"

namespace ember::dispatch {

const char* device_type_name(DeviceType t);

// Every table registers its name here so tests can list which (op, device, dtype) have kernels.
struct KernelTableInfo {
  const char* op;
  bool (*has)(DeviceType, DType);
};
std::vector<KernelTableInfo>& kernel_tables();

inline constexpr std::initializer_list<DType> kFloatingTypes = {DType::f32, DType::f64, DType::f16,
                                                                DType::bf16};
inline constexpr std::initializer_list<DType> kAllTypes = {DType::f32,  DType::f64,    DType::f16,
                                                           DType::bf16, DType::i32,    DType::i64,
                                                           DType::u8,   DType::boolean};

template <typename Fn>
class KernelTable {
 public:
  explicit KernelTable(const char* op) : op_(op) {}
  void set(DeviceType device, std::initializer_list<DType> dtypes, Fn fn) {
    for (DType t : dtypes) table_[int(device)][int(t)] = fn;
  }
  bool has(DeviceType device, DType dtype) const {
    return table_[int(device)][int(dtype)] != nullptr;
  }
  Fn get(DeviceType device, DType dtype) const {
    Fn fn = table_[int(device)][int(dtype)];
    if (!fn) [[unlikely]] {
      bool built = device != DeviceType::CUDA || cuda::built_with_cuda();
      EMBER_THROW(not_supported, op_, ": no kernel for dtype ", dtype_name(dtype), " on ",
                  device_type_name(device),
                  built ? "; convert the tensor to a supported dtype or device"
                        : " (this build of Ember has no CUDA backend)");
    }
    return fn;
  }
  const char* op() const { return op_; }

 private:
  const char* op_;
  Fn table_[kNumDeviceTypes][kNumDTypes] = {};
};

}  // namespace ember::dispatch

// In a header: declares the table accessor `name()` for kernels of type Fn.
#define EMBER_DECLARE_KERNEL(name, Fn) ::ember::dispatch::KernelTable<Fn>& name();
// In one .cpp: defines it (a function-local static, so registration order never matters).
#define EMBER_DEFINE_KERNEL(name, Fn)                                                         \
  ::ember::dispatch::KernelTable<Fn>& name() {                                                \
    static ::ember::dispatch::KernelTable<Fn>* table = [] {                                   \
      auto* t = new ::ember::dispatch::KernelTable<Fn>(#name);                                \
      ::ember::dispatch::kernel_tables().push_back(                                           \
          {#name, [](::ember::DeviceType d, ::ember::DType x) { return name().has(d, x); }}); \
      return t;                                                                               \
    }();                                                                                      \
    return *table;                                                                            \
  }
#define EMBER_CONCAT_INNER(a, b) a##b
#define EMBER_CONCAT(a, b) EMBER_CONCAT_INNER(a, b)
// Beside a kernel: registers `fn` for the given device type and dtypes at library load.
#define EMBER_REGISTER_KERNEL(name, device_type, dtypes, fn)         \
  static const bool EMBER_CONCAT(ember_registered_, __LINE__) = [] { \
    name().set(::ember::DeviceType::device_type, dtypes, fn);        \
    return true;                                                     \
  }()
