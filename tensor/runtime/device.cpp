// The CUDA runtime queries (device count, properties, current device, synchronize). In a build
// without CUDA the queries report no GPU and calls that need one throw not_supported.
#include <memory>
#include <mutex>

#include "ember/tensor/error.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/device_errors.h"

#ifdef EMBER_WITH_CUDA
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/stream.h"
#endif

namespace ember {

namespace cuda {

bool built_with_cuda() {
#ifdef EMBER_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

// Why no GPU is visible, for check_device's message ("" when there are GPUs).
struct DeviceCountProbe {
  int count = 0;
  std::string why_none;
};

const DeviceCountProbe& probe_devices() {
  static const DeviceCountProbe probe = [] {
    DeviceCountProbe p;
#ifdef EMBER_WITH_CUDA
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      // No device, no driver or a driver too old: CI machines have the toolkit but no GPU, and
      // that must read as "no GPU", not as a failure.
      (void)cudaGetLastError();
      p.why_none = ::ember::detail::concat("cudaGetDeviceCount reported ", cudaGetErrorName(err),
                                           ": ", cudaGetErrorString(err));
    } else if (n == 0) {
      p.why_none = "the CUDA driver reports no GPU";
    } else {
      p.count = n;
    }
#else
    p.why_none = "this build of Ember has no CUDA";
#endif
    return p;
  }();
  return probe;
}

[[noreturn]] void throw_no_cuda_build(const char* what) {
  EMBER_THROW(not_supported, what,
              ": this build of Ember has no CUDA (it was built without nvcc); "
              "rebuild with the CUDA toolkit installed, or use Device::cpu()");
}

}  // namespace

int device_count() { return probe_devices().count; }

bool is_available() { return built_with_cuda() && device_count() > 0; }

void check_device(const Device& device) {
  if (device.is_cpu()) {
    EMBER_CHECK(device.index == 0, "device cpu:", device.index,
                " does not exist; the CPU is cpu:0");
    return;
  }
  if (!built_with_cuda()) throw_no_cuda_build(device.str().c_str());
  const DeviceCountProbe& probe = probe_devices();
  EMBER_CHECK(probe.count > 0, device.str(),
              " is not available: no GPU is visible to this process (", probe.why_none,
              "); run on a machine with a GPU or use Device::cpu()");
  if (device.index < 0 || device.index >= probe.count) {
    const std::string visible =
        probe.count == 1
            ? std::string("1 GPU (cuda:0)")
            : ::ember::detail::concat(probe.count, " GPUs (cuda:0 to cuda:", probe.count - 1, ")");
    EMBER_THROW(bad_param, device.str(), " is not a visible GPU: this process sees ", visible,
                "; check the device index and CUDA_VISIBLE_DEVICES");
  }
}

const DeviceProperties& device_properties(int device) {
  check_device(Device::cuda(device));
#ifdef EMBER_WITH_CUDA
  struct Cached {
    std::once_flag once;
    DeviceProperties props;
  };
  // One slot per visible GPU, filled on first use; the references handed out stay valid forever.
  static Cached* cache = new Cached[size_t(device_count())];
  Cached& slot = cache[device];
  std::call_once(slot.once, [&] {
    cudaDeviceProp prop{};
    EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    DeviceProperties& p = slot.props;
    p.name = prop.name;
    p.major = prop.major;
    p.minor = prop.minor;
    p.sm_count = prop.multiProcessorCount;
    p.total_memory = prop.totalGlobalMem;
    p.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
    p.cooperative_launch = prop.cooperativeLaunch != 0;
    EMBER_CUDA_CHECK(cudaDriverGetVersion(&p.driver_version));
    EMBER_CUDA_CHECK(cudaRuntimeGetVersion(&p.runtime_version));
  });
  return slot.props;
#else
  throw_no_cuda_build("device_properties");
#endif
}

int current_device() {
#ifdef EMBER_WITH_CUDA
  int device = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  return device;
#else
  throw_no_cuda_build("current_device");
#endif
}

void set_device(int device) {
  check_device(Device::cuda(device));
#ifdef EMBER_WITH_CUDA
  EMBER_CUDA_CHECK(cudaSetDevice(device));
#endif
}

void synchronize(int device) {
#ifdef EMBER_WITH_CUDA
  if (device == -1) device = current_device();
  check_device(Device::cuda(device));
  DeviceGuard on_device(Device::cuda(device));
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  check_device_errors(device);
#else
  (void)device;
  throw_no_cuda_build("synchronize");
#endif
}

}  // namespace cuda

}  // namespace ember
