// Fuzz target: the text-corpus reader (data::TextCorpus on a file). When the corpus loads, its
// tokens must decode back to its text and a SequenceDataset over them must serve its examples;
// every failure must be an ember::Error. The first byte picks strip_fortune_separators.
#include "fuzz_support.h"

using namespace ember;

namespace ember_fuzz {
void write_seeds(const std::string& dir) {
  write_text(dir + "/fortunes",
             std::string("\x01") + "A fortune.\n%\nAnother one,\n  indented.\n%\n");
  write_text(dir + "/plain", std::string("\x00", 1) + "hello world\nthe quick brown fox\n");
  write_text(dir + "/utf8", std::string("\x01") + "caf\xc3\xa9 \xe2\x82\xac 100%\n%%\n%\n");
  write_text(dir + "/empty", std::string("\x01"));
}
}  // namespace ember_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool strip = data[0] & 1;
  const std::string path = ember_fuzz::write_file("corpus.txt", data + 1, size - 1);
  ember_fuzz::expect_only_ember_errors("data::TextCorpus", [&] {
    data::TextCorpus corpus(path, data::TextCorpusOptions().strip_fortune_separators(strip));
    Tensor tokens = corpus.tokens();
    if (corpus.decode(tokens) != corpus.text()) {
      std::printf("ember fuzz: decode(encode(text)) differs from the text\n");
      std::fflush(stdout);
      std::abort();
    }
    data::SequenceDataset seq(tokens, 3);
    if (seq.size() > 0) {
      for (const Tensor& t : seq.get(seq.size() - 1)) ember_fuzz::touch(t);
    }
  });
  return 0;
}
