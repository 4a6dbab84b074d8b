// Device parsing and printing.
#include "ember/tensor/device.h"

#include <charconv>
#include <string>
#include <string_view>

#include "ember/tensor/error.h"

namespace ember {

namespace {

[[noreturn]] void throw_bad_device_spec(const std::string& spec, const char* why) {
  EMBER_THROW(bad_param, "Device: cannot parse \"", spec, "\": ", why,
              "; expected \"cpu\", \"cuda\" or \"cuda:N\" with N a GPU index, e.g. \"cuda:1\"");
}

// The index after "cuda:" or "cpu:": decimal digits only (no sign, no spaces).
int parse_device_index(const std::string& spec, std::string_view digits) {
  if (digits.empty()) throw_bad_device_spec(spec, "the index after ':' is missing");
  int index = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec == std::errc::result_out_of_range) throw_bad_device_spec(spec, "the index is too large");
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.front() == '-' ||
      digits.front() == '+')
    throw_bad_device_spec(spec, "the index is not a non-negative integer");
  return index;
}

}  // namespace

Device::Device(const std::string& spec) {
  std::string_view text = spec;
  const size_t colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  const bool has_index = colon != std::string_view::npos;
  if (kind == "cpu") {
    type = DeviceType::CPU;
    index = 0;
    if (has_index && parse_device_index(spec, text.substr(colon + 1)) != 0)
      throw_bad_device_spec(spec, "the CPU has only index 0");
  } else if (kind == "cuda") {
    type = DeviceType::CUDA;
    // "cuda" names GPU 0, like Device::cuda(); parsing never consults the runtime.
    index = has_index ? parse_device_index(spec, text.substr(colon + 1)) : 0;
  } else {
    throw_bad_device_spec(spec, "unknown device type");
  }
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return "cuda:" + std::to_string(index);
}

}  // namespace ember
