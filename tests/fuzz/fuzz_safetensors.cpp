// Fuzz target: the safetensors reader (nn::load_checkpoint) on arbitrary bytes. A valid file must
// give tensors whose every byte can be read; anything else must be an ember::Error.
#include "fuzz_support.h"

using namespace ember;

namespace ember_fuzz {
void write_seeds(const std::string& dir) {
  manual_seed(1);
  nn::save_checkpoint(dir + "/f32_i64.safetensors",
                      {{"w", randn({3, 4})}, {"step", full({}, 7.0, TensorOptions(DType::i64))}},
                      {{"format", "pt"}});
  nn::save_checkpoint(dir + "/all_dtypes.safetensors",
                      {{"f64", randn({2}).to(DType::f64)},
                       {"f16", randn({2, 2}).to(DType::f16)},
                       {"bf16", randn({3}).to(DType::bf16)},
                       {"i32", arange(5, TensorOptions(DType::i32))},
                       {"u8", full({4}, 200, TensorOptions(DType::u8))},
                       {"bool", full({1, 2}, 1, TensorOptions(DType::boolean))}});
  nn::save_checkpoint(dir + "/empty_and_scalar.safetensors",
                      {{"empty", zeros({0, 3})}, {"scalar", full({}, 2.5)}}, {{"note", "x"}});
  nn::save_checkpoint(dir + "/no_tensors.safetensors", {});
}
}  // namespace ember_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ember_fuzz::write_file("in.safetensors", data, size);
  ember_fuzz::expect_only_ember_errors("load_checkpoint", [&] {
    nn::LoadedTensors loaded = nn::load_checkpoint(path);
    for (const auto& named : loaded.tensors) ember_fuzz::touch(named.second);
  });
  return 0;
}
