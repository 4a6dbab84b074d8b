// Fuzz target: the IDX reader (data::read_idx) and the MNIST dataset built on it. An input that
// starts with "MNIST" is split into an images file (its length: the next 4 bytes, little-endian)
// and a labels file, which data::MNIST reads as the test split; any other input is one IDX file.
// Every example of a dataset that loads must be readable; every failure an ember::Error.
#include <cstring>

#include "fuzz_support.h"

using namespace ember;

namespace {
std::string idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string s{char(0), char(0), char(type), char(dims.size())};
  for (uint32_t d : dims)
    for (int b = 3; b >= 0; --b) s.push_back(char((d >> (8 * b)) & 0xff));
  return s + payload;
}

std::string mnist_input(const std::string& images, const std::string& labels) {
  std::string s = "MNIST";
  const uint32_t n = uint32_t(images.size());
  for (int b = 0; b < 4; ++b) s.push_back(char((n >> (8 * b)) & 0xff));
  return s + images + labels;
}

void check_dataset(const data::Dataset& d) {
  const int64_t n = d.size();
  for (int64_t i : {int64_t(0), n / 2, n - 1})
    if (i >= 0 && i < n)
      for (const Tensor& t : d.get(i)) ember_fuzz::touch(t);
}
}  // namespace

namespace ember_fuzz {
void write_seeds(const std::string& dir) {
  const std::string pixels(2 * 28 * 28, char(0x80));
  write_text(dir + "/u8_images.idx", idx_bytes(0x08, {2, 28, 28}, pixels));
  write_text(dir + "/u8_labels.idx", idx_bytes(0x08, {3}, std::string("\x01\x02\x09", 3)));
  write_text(dir + "/i8.idx", idx_bytes(0x09, {2, 2}, std::string("\xff\x01\x7f\x80", 4)));
  write_text(dir + "/i16.idx", idx_bytes(0x0B, {3}, std::string("\x01\x00\xff\xff\x7f\x00", 6)));
  write_text(dir + "/i32.idx",
             idx_bytes(0x0C, {2}, std::string("\x00\x00\x00\x05\xff\xff\xff\xfe", 8)));
  write_text(dir + "/f32.idx",
             idx_bytes(0x0D, {1, 2}, std::string("\x3f\x80\x00\x00\x40\x00\x00\x00", 8)));
  write_text(dir + "/f64.idx",
             idx_bytes(0x0E, {1}, std::string("\x3f\xf0\x00\x00\x00\x00\x00\x00", 8)));
  write_text(dir + "/zero_dim.idx", idx_bytes(0x08, {0, 28, 28}, ""));
  write_text(dir + "/mnist_pair", mnist_input(idx_bytes(0x08, {2, 28, 28}, pixels),
                                              idx_bytes(0x08, {2}, std::string("\x03\x07", 2))));
}
}  // namespace ember_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 9 && std::memcmp(data, "MNIST", 5) == 0) {
    uint32_t n = 0;
    for (int b = 0; b < 4; ++b) n |= uint32_t(data[5 + b]) << (8 * b);
    const size_t images = std::min<size_t>(n, size - 9);
    const std::string dir = ember_fuzz::scratch_dir() + "/mnist";
    std::filesystem::create_directories(dir);
    ember_fuzz::write_file("mnist/t10k-images-idx3-ubyte", data + 9, images);
    ember_fuzz::write_file("mnist/t10k-labels-idx1-ubyte", data + 9 + images, size - 9 - images);
    ember_fuzz::expect_only_ember_errors("data::MNIST", [&] {
      data::MNIST mnist(dir, data::Split::test);
      check_dataset(mnist);
    });
    return 0;
  }
  const std::string path = ember_fuzz::write_file("in.idx", data, size);
  ember_fuzz::expect_only_ember_errors("data::read_idx",
                                       [&] { ember_fuzz::touch(data::read_idx(path)); });
  return 0;
}
