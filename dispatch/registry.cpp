// The list of kernel tables, for introspection and tests.
#include "ember/dispatch/registry.h"

namespace ember::dispatch {

const char* device_type_name(DeviceType t) { return t == DeviceType::CUDA ? "cuda" : "cpu"; }

std::vector<KernelTableInfo>& kernel_tables() {
  static std::vector<KernelTableInfo> tables;
  return tables;
}

}  // namespace ember::dispatch
