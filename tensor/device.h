// Device: where a tensor lives (cpu, cuda:N). The runtime's queries about GPUs (how many, their
// properties) are in tensor/runtime/cuda_device.h.
#pragma once
#include <cstdint>
#include <string>

namespace ember {

// The kind of memory a tensor lives in: the host (CPU) or an NVIDIA GPU (CUDA).
enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
// How many DeviceTypes there are (the size of tables indexed by device type).
inline constexpr int kNumDeviceTypes = 2;

// A device, as PyTorch's torch.device: a type and, for CUDA, the GPU's index. Converts implicitly
// from a string, so `t.to("cuda:1")` works; the default is the CPU.
struct Device {
  DeviceType type = DeviceType::CPU;  // CPU or CUDA
  int index = 0;                      // GPU ordinal; 0 for the CPU

  constexpr Device() = default;
  // Device `t` with index `i` (the GPU ordinal; it is not checked against the GPUs present here).
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}
  Device(const std::string& spec);  // "cpu", "cuda", "cuda:1"; throws bad_param
  // The same, from a C string, so that string literals convert to Device.
  Device(const char* spec) : Device(std::string(spec)) {}

  // The CPU.
  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  // GPU number `index` (default 0).
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  // True for the CPU.
  bool is_cpu() const { return type == DeviceType::CPU; }
  // True for a GPU.
  bool is_cuda() const { return type == DeviceType::CUDA; }
  // "cpu" or "cuda:N" (a CUDA device always shows its index).
  std::string str() const;
  // Devices are equal when their type and index are.
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

}  // namespace ember
