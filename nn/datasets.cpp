// Dataset readers of nn/datasets.h: IDX (MNIST, Fashion-MNIST), CIFAR-10 binary batches and text
// corpora, read through zlib (gzread reads uncompressed files transparently). Every format error
// names the file and the byte offset where it was found.
#include "ember/nn/datasets.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <set>

#include "ember/ops/ops.h"

namespace ember::data {

namespace fs = std::filesystem;

namespace {

// A file read through zlib, tracking the offset (in decompressed bytes) for error messages.
class CompressedFile {
 public:
  explicit CompressedFile(const std::string& path) : path_(path) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    EMBER_CHECK(file_ != nullptr, "cannot open '", path, "'",
                errno != 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string());
    gzbuffer(file_, 1 << 17);
  }
  ~CompressedFile() { gzclose(file_); }
  CompressedFile(const CompressedFile&) = delete;
  CompressedFile& operator=(const CompressedFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }
  // "file 'x': byte offset N" (of the decompressed data, for compressed files).
  std::string where(uint64_t offset) const {
    return "file '" + path_ + "': byte offset " + std::to_string(offset) +
           (gzdirect(file_) ? "" : " (of the decompressed data)");
  }

  // Reads up to n bytes; fewer only at the end of the data. Corrupt compressed data throws.
  size_t read_some(void* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      const unsigned chunk = unsigned(std::min<size_t>(n - done, size_t(1) << 30));
      const int got = gzread(file_, static_cast<char*>(dst) + done, chunk);
      if (got > 0) done += size_t(got);
      int errnum = Z_OK;
      const char* message = gzerror(file_, &errnum);
      // Z_BUF_ERROR is zlib's "unexpected end of file": the compressed stream stops mid-way.
      if (got < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
        EMBER_THROW(bad_param, where(offset_ + done), ": ",
                    errnum == Z_BUF_ERROR
                        ? "the compressed data ends early (truncated .gz file)"
                        : std::string("corrupt compressed data (") + message + ")");
      }
      if (got == 0) break;
    }
    offset_ += done;
    return done;
  }

  // Reads exactly n bytes of `what`; the data ending first is a truncation error.
  void read_exact(void* dst, size_t n, const std::string& what) {
    const uint64_t start = offset_;
    const size_t got = read_some(dst, n);
    EMBER_CHECK(got == n, where(offset_), ": the file ends in the middle of ", what, " (", n,
                " bytes from offset ", start, ", only ", got, " present); it is truncated");
  }

  // True when no data is left.
  bool at_end() {
    char probe;
    return read_some(&probe, 1) == 0;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  uint64_t offset_ = 0;
};

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// The file `name` (or `name`.gz) in `folder`, for readers of datasets that ship either way.
std::string find_file(const std::string& folder, const std::string& name, const char* dataset) {
  for (const std::string& candidate : {name + ".gz", name}) {
    const fs::path p = fs::path(folder) / candidate;
    std::error_code ec;  // an unreadable folder reads as "not there", not as a filesystem_error
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  EMBER_THROW(bad_param, dataset, ": neither '", (fs::path(folder) / name).string(), ".gz' nor '",
              (fs::path(folder) / name).string(),
              "' exists; point the reader at the folder that "
              "holds the dataset's files");
}

// Pixels (bytes) to float32 in [0, 1], as torchvision's ToTensor.
void bytes_to_unit_floats(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]) / 255.0f;
}

}  // namespace

std::string default_fashion_mnist_folder() { return "/usr/share/datasets/fashion-mnist"; }
std::string default_text_corpus_path() { return "/usr/share/games/fortunes"; }

// ---- IDX
// ------------------------------------------------------------------------------------------

Tensor read_idx(const std::string& path) {
  CompressedFile file(path);
  uint8_t magic[4];
  file.read_exact(magic, 4, "the IDX magic number");
  EMBER_CHECK(magic[0] == 0 && magic[1] == 0, file.where(0),
              ": not an IDX file (the magic number "
              "starts with bytes ",
              int(magic[0]), " ", int(magic[1]), ", not 0 0)");
  size_t file_elem = 0;
  DType dtype = DType::u8;
  switch (magic[2]) {
    case 0x08:
      file_elem = 1;
      dtype = DType::u8;
      break;
    case 0x09:
      file_elem = 1;
      dtype = DType::i32;
      break;
    case 0x0B:
      file_elem = 2;
      dtype = DType::i32;
      break;
    case 0x0C:
      file_elem = 4;
      dtype = DType::i32;
      break;
    case 0x0D:
      file_elem = 4;
      dtype = DType::f32;
      break;
    case 0x0E:
      file_elem = 8;
      dtype = DType::f64;
      break;
    default:
      EMBER_THROW(bad_param, file.where(2), ": unknown IDX data type code 0x", std::hex,
                  int(magic[2]), std::dec,
                  " (known: 0x08 ubyte, 0x09 byte, 0x0B short, 0x0C int, "
                  "0x0D float, 0x0E double)");
  }
  const int ndim = magic[3];
  EMBER_CHECK(ndim >= 1, file.where(3), ": the IDX header declares 0 dimensions");
  std::vector<uint8_t> dims_bytes(size_t(ndim) * 4);
  file.read_exact(dims_bytes.data(), dims_bytes.size(), "the IDX dimension sizes");
  Shape shape;
  uint64_t numel = 1, bound = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t size = big_endian_u32(&dims_bytes[size_t(d) * 4]);
    EMBER_CHECK(size <= uint32_t(INT32_MAX), file.where(4 + uint64_t(d) * 4), ": dimension ", d,
                " has the impossible size ", size);
    shape.push_back(int64_t(size));
    // Checked, so that a product that wraps (to 0, say) cannot pass; sizes of 0 count as 1 here,
    // as in the tensor's strides, and the count itself is the product below.
    EMBER_CHECK(!__builtin_mul_overflow(bound, std::max<uint64_t>(size, 1), &bound) &&
                    bound <= (uint64_t(1) << 40),
                file.where(4 + uint64_t(d) * 4), ": the header declares more than 2^40 elements (",
                shape_str(shape), "...); the file is corrupt");
    numel *= size;
  }
  const uint64_t data_start = file.offset();
  const uint64_t data_bytes = numel * file_elem;
  // Read in pieces that double (from 1 MiB), so that a corrupt header claiming a huge size fails
  // on truncation after allocating about twice what the file holds, never what it claims.
  std::vector<uint8_t> raw;
  while (raw.size() < data_bytes) {
    const uint64_t grow = std::max<uint64_t>(raw.size(), uint64_t(1) << 20);
    const size_t piece = size_t(std::min<uint64_t>(data_bytes - raw.size(), grow));
    const size_t before = raw.size();
    raw.resize(before + piece);
    const size_t got = file.read_some(raw.data() + before, piece);
    EMBER_CHECK(got == piece, file.where(file.offset()),
                ": the file ends in the middle of the data: "
                "the header (shape ",
                shape_str(shape), ") promises ", data_bytes, " bytes from offset ", data_start,
                " but only ", before + got, " are present; it is truncated");
  }
  EMBER_CHECK(file.at_end(), file.where(data_start + data_bytes), ": unexpected data after the ",
              numel, " elements the header declares (shape ", shape_str(shape), ")");

  Tensor out = empty(shape, dtype, Device::cpu());
  const uint8_t* p = raw.data();
  const int64_t n = int64_t(numel);
  switch (magic[2]) {
    case 0x08:
      if (n > 0) std::memcpy(out.data_ptr(), p, size_t(n));  // both pointers are null when n == 0
      break;
    case 0x09: {
      int32_t* o = out.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) o[i] = int32_t(int8_t(p[i]));
      break;
    }
    case 0x0B: {
      int32_t* o = out.data<int32_t>();
      for (int64_t i = 0; i < n; ++i)
        o[i] = int32_t(int16_t(uint16_t((p[2 * i] << 8) | p[2 * i + 1])));
      break;
    }
    case 0x0C:
    case 0x0D: {  // 4-byte big-endian words, reinterpreted as int32 or float32
      uint32_t* o = static_cast<uint32_t*>(out.data_ptr());
      for (int64_t i = 0; i < n; ++i) o[i] = big_endian_u32(p + 4 * i);
      break;
    }
    case 0x0E: {
      uint64_t* o = static_cast<uint64_t*>(out.data_ptr());
      for (int64_t i = 0; i < n; ++i)
        o[i] = (uint64_t(big_endian_u32(p + 8 * i)) << 32) | big_endian_u32(p + 8 * i + 4);
      break;
    }
  }
  return out;
}

// ---- MNIST
// ------------------------------------------------------------------------------------------

MNIST::MNIST(const std::string& folder, Split split) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string images_path = find_file(folder, prefix + "-images-idx3-ubyte", "MNIST");
  const std::string labels_path = find_file(folder, prefix + "-labels-idx1-ubyte", "MNIST");
  const Tensor images = read_idx(images_path);
  const Tensor labels = read_idx(labels_path);
  EMBER_CHECK(images.dtype() == DType::u8 && images.dim() == 3, "MNIST: '", images_path, "' holds ",
              dtype_name(images.dtype()), " ", images.shape_str(),
              "; expected unsigned "
              "byte images [N, rows, cols]");
  EMBER_CHECK(labels.dtype() == DType::u8 && labels.dim() == 1, "MNIST: '", labels_path, "' holds ",
              dtype_name(labels.dtype()), " ", labels.shape_str(),
              "; expected unsigned byte labels [N]");
  EMBER_CHECK(labels.size(0) == images.size(0), "MNIST: '", labels_path, "' has ", labels.size(0),
              " labels but '", images_path, "' has ", images.size(0), " images");
  const int64_t n = images.size(0);
  const uint8_t* label_bytes = labels.data<uint8_t>();
  Tensor targets = empty({n}, DType::i64, Device::cpu());
  int64_t* t = targets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    // The labels follow an 8-byte header (magic and one size).
    EMBER_CHECK(label_bytes[i] < kNumClasses, "MNIST: file '", labels_path, "': byte offset ",
                8 + i, ": label ", int(label_bytes[i]), " is not a class in [0, ", kNumClasses,
                ")");
    t[i] = label_bytes[i];
  }
  Tensor pixels = empty({n, 1, images.size(1), images.size(2)}, DType::f32, Device::cpu());
  bytes_to_unit_floats(images.data<uint8_t>(), pixels.data<float>(), images.numel());
  set_tensors({pixels, targets});
}

// ---- CIFAR-10
// -----------------------------------------------------------------------------------------

CIFAR10::CIFAR10(const std::string& folder, Split split) {
  constexpr size_t kImageBytes = 3 * 32 * 32, kRecordBytes = 1 + kImageBytes;
  std::vector<std::string> names;
  if (split == Split::train)
    for (int k = 1; k <= 5; ++k) names.push_back("data_batch_" + std::to_string(k) + ".bin");
  else
    names.push_back("test_batch.bin");
  std::vector<uint8_t> labels, pixels;
  for (const std::string& name : names) {
    const std::string path = find_file(folder, name, "CIFAR10");
    CompressedFile file(path);
    // Pieces that double from 64 KiB: a small (or corrupt) file costs little, a 30 MB batch file a
    // few reallocations.
    std::vector<uint8_t> bytes;
    for (;;) {
      const size_t before = bytes.size();
      const size_t piece = std::max<size_t>(before, size_t(1) << 16);
      bytes.resize(before + piece);
      const size_t got = file.read_some(bytes.data() + before, piece);
      bytes.resize(before + got);
      if (got == 0) break;
    }
    EMBER_CHECK(!bytes.empty(), file.where(0), ": the file is empty");
    const size_t whole = bytes.size() / kRecordBytes * kRecordBytes;
    EMBER_CHECK(whole == bytes.size(), file.where(whole),
                ": the file ends in the middle of a record ", "(records are ", kRecordBytes,
                " bytes: a label byte and 3x32x32 pixels; ", bytes.size() - whole,
                " bytes are left over); it is truncated");
    for (size_t r = 0; r < bytes.size(); r += kRecordBytes) {
      EMBER_CHECK(bytes[r] < kNumClasses, file.where(r), ": label ", int(bytes[r]),
                  " is not a class in [0, ", kNumClasses,
                  "); is this the binary CIFAR-10 release?");
      labels.push_back(bytes[r]);
      pixels.insert(pixels.end(), bytes.begin() + std::ptrdiff_t(r + 1),
                    bytes.begin() + std::ptrdiff_t(r + kRecordBytes));
    }
  }
  const int64_t n = int64_t(labels.size());
  Tensor images = empty({n, 3, 32, 32}, DType::f32, Device::cpu());
  bytes_to_unit_floats(pixels.data(), images.data<float>(), int64_t(pixels.size()));
  Tensor targets = empty({n}, DType::i64, Device::cpu());
  std::copy(labels.begin(), labels.end(), targets.data<int64_t>());
  set_tensors({images, targets});
}

// ---- text
// -------------------------------------------------------------------------------------------

TextCorpus::TextCorpus(const std::string& path, const TextCorpusOptions& options) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> entries;
    // increment(ec), not a range-for: its operator++ throws std::filesystem_error.
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::directory_entry& entry = *it;
      const std::string name = entry.path().filename().string();
      if (name.empty() || name[0] == '.' || entry.path().extension() == ".dat") continue;
      std::error_code file_ec;
      if (!fs::is_regular_file(entry.path(), file_ec)) continue;  // follows symlinks
      entries.push_back(entry.path());
    }
    EMBER_CHECK(!ec, "TextCorpus: cannot list '", path, "' (", ec.message(), ")");
    std::sort(entries.begin(), entries.end());
    std::set<fs::path> seen;
    for (const fs::path& p : entries) {
      std::error_code canon_ec;
      const fs::path canon = fs::canonical(p, canon_ec);
      if (seen.insert(canon_ec ? p : canon).second) files_.push_back(p.string());
    }
  } else {
    EMBER_CHECK(fs::is_regular_file(path, ec), "TextCorpus: '", path,
                "' is neither a file nor a "
                "folder; give a text file or a folder of them");
    files_.push_back(path);
  }
  for (const std::string& f : files_) {
    CompressedFile file(f);
    std::string bytes;
    for (;;) {  // pieces that double from 64 KiB, as the CIFAR reader's
      const size_t before = bytes.size();
      const size_t piece = std::max<size_t>(before, size_t(1) << 16);
      bytes.resize(before + piece);
      const size_t got = file.read_some(bytes.data() + before, piece);
      bytes.resize(before + got);
      if (got == 0) break;
    }
    const size_t nul = bytes.find('\0');
    EMBER_CHECK(nul == std::string::npos, "TextCorpus: ", file.where(nul),
                ": a NUL byte; this is "
                "binary data, not text (remove the file from the corpus folder)");
    if (options.strip_fortune_separators()) {
      std::string kept;
      kept.reserve(bytes.size());
      size_t start = 0;
      while (start < bytes.size()) {
        size_t end = bytes.find('\n', start);
        const bool has_newline = end != std::string::npos;
        if (!has_newline) end = bytes.size();
        if (bytes.compare(start, end - start, "%") != 0) kept.append(bytes, start, end - start);
        if (has_newline) kept.push_back('\n');
        start = end + 1;
      }
      bytes.swap(kept);
    }
    if (!bytes.empty() && bytes.back() != '\n') bytes.push_back('\n');
    text_ += bytes;
  }
  EMBER_CHECK(!text_.empty(), "TextCorpus: '", path, "' holds no text");
  bool present[256] = {};
  for (unsigned char c : text_) present[c] = true;
  std::fill(std::begin(id_of_byte_), std::end(id_of_byte_), int16_t(-1));
  for (int b = 0; b < 256; ++b)
    if (present[b]) {
      id_of_byte_[b] = int16_t(vocabulary_.size());
      vocabulary_.push_back(char(b));
    }
}

Tensor TextCorpus::encode(const std::string& s) const {
  Tensor out = empty({int64_t(s.size())}, DType::i64, Device::cpu());
  int64_t* ids = out.data<int64_t>();
  for (size_t i = 0; i < s.size(); ++i) {
    const int id = id_of_byte_[uint8_t(s[i])];
    EMBER_CHECK(id >= 0, "TextCorpus::encode: byte ", int(uint8_t(s[i])), " at position ", i,
                " is not in the corpus vocabulary");
    ids[i] = id;
  }
  return out;
}

std::string TextCorpus::decode(const Tensor& ids) const {
  EMBER_CHECK(ids.defined() && !is_floating(ids.dtype()),
              "TextCorpus::decode: expected integer ids");
  std::string out;
  for (double v : ids.to_vector()) {
    EMBER_CHECK(v >= 0 && v < double(vocabulary_.size()), "TextCorpus::decode: id ", v,
                " is outside the vocabulary [0, ", vocabulary_.size(), ")");
    out.push_back(vocabulary_[size_t(v)]);
  }
  return out;
}

SequenceDataset::SequenceDataset(Tensor tokens, int64_t seq_len) : seq_len_(seq_len) {
  EMBER_CHECK(tokens.defined() && tokens.dim() == 1, "SequenceDataset: tokens must be 1-D, got ",
              tokens.defined() ? tokens.shape_str() : "undefined");
  EMBER_CHECK(seq_len > 0, "SequenceDataset: seq_len ", seq_len, " must be positive");
  tokens_ = tokens.detach().to(Device::cpu(), DType::i64).contiguous();
}

int64_t SequenceDataset::size() const {
  return std::max<int64_t>(0, (tokens_.numel() - 1) / seq_len_);
}

Example SequenceDataset::get(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(), "SequenceDataset::get: index ", index,
              " is out of range [0, ", size(), ")");
  return {tokens_.narrow(0, index * seq_len_, seq_len_),
          tokens_.narrow(0, index * seq_len_ + 1, seq_len_)};
}

Batch SequenceDataset::get_batch(const std::vector<int64_t>& indices,
                                 const BatchAllocator& alloc) const {
  const int64_t n = int64_t(indices.size());
  Tensor inputs = alloc({n, seq_len_}, DType::i64), targets = alloc({n, seq_len_}, DType::i64);
  const int64_t* src = tokens_.data<int64_t>();
  const size_t row = size_t(seq_len_) * sizeof(int64_t);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t index = indices[size_t(i)];
    EMBER_CHECK(index >= 0 && index < size(), "SequenceDataset::get_batch: index ", index,
                " is out of range [0, ", size(), ")");
    std::memcpy(inputs.data<int64_t>() + i * seq_len_, src + index * seq_len_, row);
    std::memcpy(targets.data<int64_t>() + i * seq_len_, src + index * seq_len_ + 1, row);
  }
  return {inputs, targets};
}

}  // namespace ember::data
