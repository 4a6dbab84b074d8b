// Fuzz target: the CIFAR-10 binary reader (data::CIFAR10, test split: test_batch.bin). Every
// example of a dataset that loads must be readable; every failure an ember::Error.
#include "fuzz_support.h"

using namespace ember;

namespace ember_fuzz {
void write_seeds(const std::string& dir) {
  std::string two;  // two records: a label byte, then 3 x 32 x 32 pixel bytes
  for (int r = 0; r < 2; ++r) {
    two.push_back(char(r == 0 ? 3 : 9));
    for (int i = 0; i < 3 * 32 * 32; ++i) two.push_back(char((i * 7 + r) & 0xff));
  }
  write_text(dir + "/two_records.bin", two);
  write_text(dir + "/one_record.bin", two.substr(0, 3073));
  write_text(dir + "/truncated.bin", two.substr(0, 3073 + 100));
}
}  // namespace ember_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = ember_fuzz::scratch_dir() + "/cifar";
  std::filesystem::create_directories(dir);
  ember_fuzz::write_file("cifar/test_batch.bin", data, size);
  ember_fuzz::expect_only_ember_errors("data::CIFAR10", [&] {
    data::CIFAR10 cifar(dir, data::Split::test);
    const int64_t n = cifar.size();
    for (int64_t i : {int64_t(0), n - 1})
      if (i >= 0 && i < n)
        for (const Tensor& t : cifar.get(i)) ember_fuzz::touch(t);
  });
  return 0;
}
