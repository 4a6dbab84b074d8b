// Dataset readers: MNIST / Fashion-MNIST (IDX files, gzipped or not), CIFAR-10 (the binary
// release), and a text corpus for character models (a file or a folder; by default the fortune
// cookies of Debian's `fortunes` package). Files are read with zlib, which reads uncompressed files
// transparently. A malformed file (bad magic, impossible header, truncated or corrupt data,
// out-of-range labels, binary data in a text corpus) throws ember::Error naming the file and the
// byte offset (in the decompressed data for .gz files) of the problem.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ember/nn/data.h"
#include "ember/nn/image_folder.h"  // IWYU pragma: export

namespace ember::data {

// Which part of a dataset to read, as torchvision's train=True / False.
enum class Split { train, test };

// Where Debian's dataset-fashion-mnist package installs its four .gz files.
std::string default_fashion_mnist_folder();  // /usr/share/datasets/fashion-mnist
// Where Debian's fortunes package installs its fortune files.
std::string default_text_corpus_path();  // /usr/share/games/fortunes

// Reads an IDX file (http://yann.lecun.com/exdb/mnist/: magic 0 0 <type> <ndim>, ndim big-endian
// uint32 sizes, then big-endian data) into a CPU tensor of its shape. Types: unsigned byte -> u8,
// signed byte and short -> i32 (Ember has no 8/16-bit integers), int -> i32, float -> f32,
// double -> f64. Data after the last element is an error too.
Tensor read_idx(const std::string& path);

// MNIST or Fashion-MNIST from `folder` holding {train,t10k}-{images-idx3,labels-idx1}-ubyte, each
// with or without .gz. Examples: image float32 [1, 28, 28] in [0, 1], label int64 in [0, 10).
class MNIST : public TensorDataset {
 public:
  // Reads the split's two files (errors naming a missing or malformed file).
  explicit MNIST(const std::string& folder = default_fashion_mnist_folder(),
                 Split split = Split::train);
  // All images, [N, 1, 28, 28] float32 in [0, 1].
  const Tensor& images() const { return tensors()[0]; }
  // All labels, [N] int64.
  const Tensor& targets() const { return tensors()[1]; }
  static constexpr int64_t kNumClasses = 10;  // labels lie in [0, kNumClasses)
};

// CIFAR-10's binary release ("cifar-10-batches-bin"): data_batch_1..5.bin (train) or
// test_batch.bin, records of one label byte and 3x32x32 pixel bytes (channel planes).
// Examples: image float32 [3, 32, 32] in [0, 1], label int64 in [0, 10).
class CIFAR10 : public TensorDataset {
 public:
  // Reads the split's batch files from `folder` (errors naming a missing or malformed file).
  explicit CIFAR10(const std::string& folder, Split split = Split::train);
  // All images, [N, 3, 32, 32] float32 in [0, 1].
  const Tensor& images() const { return tensors()[0]; }
  // All labels, [N] int64.
  const Tensor& targets() const { return tensors()[1]; }
  static constexpr int64_t kNumClasses = 10;  // labels lie in [0, kNumClasses)
};

// The options of TextCorpus.
struct TextCorpusOptions {
  // Turns the "%" lines that separate fortune(6) cookies into empty lines.
  EMBER_ARG(bool, strip_fortune_separators) = true;
};

// A byte-level text corpus: a file, or every regular file of a folder in name order (skipping
// hidden files and fortune(6)'s *.dat index files, and reading a file once when several names,
// e.g. fortunes' *.u8 symlinks, lead to it). The vocabulary is the sorted set of bytes present.
// A NUL byte means the file is not text: an error naming the file and the offset.
class TextCorpus {
 public:
  // Reads the file or folder at `path` (errors when it cannot be read or is not text).
  explicit TextCorpus(const std::string& path = default_text_corpus_path(),
                      const TextCorpusOptions& options = {});
  // The whole text, files concatenated in order.
  const std::string& text() const { return text_; }
  // The files read, in order.
  const std::vector<std::string>& files() const { return files_; }
  // Token id -> byte; vocab_size() ids in all.
  const std::string& vocabulary() const { return vocabulary_; }
  int64_t vocab_size() const { return int64_t(vocabulary_.size()); }
  // int64 [len] ids of `s` (a byte outside the vocabulary is an error) and back.
  Tensor encode(const std::string& s) const;
  std::string decode(const Tensor& ids) const;
  // The whole text encoded.
  Tensor tokens() const { return encode(text_); }

 private:
  std::string text_, vocabulary_;
  std::vector<std::string> files_;
  int16_t id_of_byte_[256];
};

// Next-token windows of a token sequence: example i is (tokens[i*L .. i*L+L), tokens[i*L+1 ..
// i*L+L+1)) for L = seq_len, both int64 [L]; the windows do not overlap and a final partial window
// is dropped.
class SequenceDataset : public Dataset {
 public:
  // tokens: 1-D [T] of integer ids (kept as contiguous CPU int64); seq_len > 0. size() is
  // (T - 1) / seq_len.
  SequenceDataset(Tensor tokens, int64_t seq_len);
  int64_t size() const override;
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices, const BatchAllocator& alloc) const override;
  // L, the window length.
  int64_t seq_len() const { return seq_len_; }

 private:
  Tensor tokens_;  // int64, contiguous, CPU
  int64_t seq_len_;
};

}  // namespace ember::data
