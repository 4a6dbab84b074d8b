// Device: where a tensor lives (cpu, cuda:N). The runtime's queries about GPUs (how many, their
// properties) are in tensor/runtime/cuda_device.h.
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

}  // namespace ember
