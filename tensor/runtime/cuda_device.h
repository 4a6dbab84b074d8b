// The CUDA device queries every backend needs: is CUDA available, how many GPUs, the properties
// that key algorithm choices, the current device. They answer "no GPU" in a build without CUDA.
#pragma once
#include <cstddef>
#include <string>

#include "ember/tensor/device.h"

namespace ember {

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
