// Device (cpu, cuda:N) and the runtime queries every backend needs (is CUDA available, how many
// GPUs, the properties that key algorithm choices). The queries answer "no GPU" in a CPU-only build.
#pragma once
#include <cstdint>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // GPU ordinal; 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}
  Device(const std::string& spec);  // "cpu", "cuda", "cuda:1"; throws bad_param
  Device(const char* spec) : Device(std::string(spec)) {}

  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

namespace cuda {
// True when Ember was built with CUDA and at least one GPU is visible.
bool is_available();
int device_count();
bool built_with_cuda();
// Properties used by algorithm-cache keys and the persisted cache's stamp.
struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;
  int sm_count = 0;
  size_t total_memory = 0;
  size_t shared_memory_per_block_optin = 0;
  bool cooperative_launch = false;  // cudaLaunchCooperativeKernel works (grid-wide barriers)
  int driver_version = 0, runtime_version = 0;
};
const DeviceProperties& device_properties(int device);
// Throws bad_param when `device` is not a visible GPU, saying how many there are.
void check_device(const Device& device);
int current_device();
void set_device(int device);
void synchronize(int device = -1);  // -1: the current device
}  // namespace cuda

}  // namespace ember
