// Data loading on the CPU: IDX parsing of small files written here (plain and gzip), the errors for
// truncated, corrupt and malformed files (naming the file and the byte offset), MNIST / CIFAR-10 /
// text-corpus readers, the DataLoader (order, seeded shuffles, drop_last, workers, errors from
// workers), the batch transforms, and the real Fashion-MNIST and fortunes files when the Debian
// packages are installed (skipped otherwise).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/data.h"
#include "ember/nn/datasets.h"
#include "ember/nn/transforms.h"
#include "support/errors.h"
#include "support/temp_dir.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
namespace fs = std::filesystem;

namespace {

struct TempDir : ember::test::TempDir {
  TempDir() : ember::test::TempDir("ember_data_test") {}
};

// A gzip file holding `data` in stored (uncompressed) deflate blocks: valid input for any gzip
// reader, written without zlib.
std::string gzip_stored(const std::string& data) {
  auto crc32 = [](const std::string& bytes) {
    uint32_t crc = 0xffffffffu;
    for (unsigned char b : bytes) {
      crc ^= b;
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
  };
  std::string out = {'\x1f', '\x8b', '\x08', '\0', '\0', '\0', '\0', '\0', '\0', '\xff'};
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, data.size() - pos);
    out.push_back(pos + n == data.size() ? '\x01' : '\x00');  // BFINAL, BTYPE 00 (stored)
    for (uint32_t v : {uint32_t(n), uint32_t(~n & 0xffffu)}) {
      out.push_back(char(v & 0xff));
      out.push_back(char((v >> 8) & 0xff));
    }
    out.append(data, pos, n);
    pos += n;
  } while (pos < data.size());
  for (uint32_t v : {crc32(data), uint32_t(data.size())})
    for (int k = 0; k < 4; ++k) out.push_back(char((v >> (8 * k)) & 0xff));
  return out;
}

std::string be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
}

std::string idx_file(uint8_t type, const std::vector<uint32_t>& dims, const std::string& payload) {
  std::string out = {'\0', '\0', char(type), char(dims.size())};
  for (uint32_t d : dims) out += be32(d);
  return out + payload;
}

std::string byte_string(const std::vector<int>& values) {
  std::string s;
  for (int v : values) s.push_back(char(v));
  return s;
}

}  // namespace

TEST_CASE("read_idx: every element type, plain and gzipped") {
  TempDir dir;
  const std::string u8_payload = byte_string({0, 1, 2, 250, 251, 252});
  for (bool gz : {false, true}) {
    CAPTURE(gz);
    auto write = [&](const std::string& name, const std::string& bytes) {
      return dir.write(name + (gz ? ".gz" : ""), gz ? gzip_stored(bytes) : bytes);
    };
    Tensor u8 = data::read_idx(write("u8", idx_file(0x08, {2, 3}, u8_payload)));
    CHECK(u8.dtype() == DType::u8);
    CHECK(u8.sizes() == Shape{2, 3});
    CHECK(u8.to_vector() == std::vector<double>{0, 1, 2, 250, 251, 252});

    Tensor i8 = data::read_idx(write("i8", idx_file(0x09, {2}, byte_string({0x7f, 0x80}))));
    CHECK(i8.dtype() == DType::i32);
    CHECK(i8.to_vector() == std::vector<double>{127, -128});

    Tensor i16 =
        data::read_idx(write("i16", idx_file(0x0B, {2}, byte_string({0x01, 0x02, 0xff, 0xfe}))));
    CHECK(i16.to_vector() == std::vector<double>{258, -2});

    Tensor i32 = data::read_idx(write("i32", idx_file(0x0C, {1}, be32(0xfffffffeu))));
    CHECK(i32.to_vector() == std::vector<double>{-2});

    Tensor f32 = data::read_idx(
        write("f32", idx_file(0x0D, {1, 1, 2}, be32(0x3fc00000u) + be32(0xc0200000u))));
    CHECK(f32.sizes() == Shape{1, 1, 2});
    CHECK(f32.to_vector() == std::vector<double>{1.5, -2.5});

    Tensor f64 = data::read_idx(write("f64", idx_file(0x0E, {1}, be32(0x400c0000u) + be32(0))));
    CHECK(f64.to_vector() == std::vector<double>{3.5});

    // A large gzip file spans several stored blocks.
    std::string big(200000, '\0');
    for (size_t k = 0; k < big.size(); ++k) big[k] = char(k * 7 % 256);
    Tensor large = data::read_idx(write("big", idx_file(0x08, {200000}, big)));
    CHECK(large.numel() == 200000);
    CHECK(large.to_vector()[199999] == double(199999 * 7 % 256));
  }
}

TEST_CASE("read_idx: malformed files name the file and the byte offset") {
  TempDir dir;
  const std::string good = idx_file(0x08, {4, 2}, byte_string({1, 2, 3, 4, 5, 6, 7, 8}));
  struct Case {
    const char* name;
    std::string bytes;
    std::vector<std::string> expect;  // parts of the message
  };
  std::string bad_crc = gzip_stored(good);
  bad_crc[bad_crc.size() - 6] ^= 0x55;  // a byte of the CRC-32 trailer
  const Case cases[] = {
      {"truncated_data",
       good.substr(0, good.size() - 3),
       {"byte offset 17", "truncated", "8 bytes from offset 12"}},
      {"truncated_header", good.substr(0, 7), {"byte offset", "dimension sizes", "truncated"}},
      {"bad_magic", "\x01\x02\x08\x01" + be32(1) + "x", {"byte offset 0", "not an IDX file"}},
      {"bad_type", idx_file(0x42, {1}, "x"), {"byte offset 2", "0x42"}},
      {"zero_dims", std::string("\0\0\x08\0", 4), {"byte offset 3", "0 dimensions"}},
      {"trailing_data", good + "zz", {"byte offset 20", "unexpected data"}},
      {"truncated_gz",
       gzip_stored(good).substr(0, 25),
       {"truncated_gz", "byte offset", "truncated .gz"}},
      {"corrupt_gz", bad_crc, {"corrupt_gz", "corrupt compressed data", "decompressed"}},
      {"empty", "", {"byte offset 0", "magic"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = dir.write(c.name, c.bytes);
    const std::string message = error_of([&] { data::read_idx(path); });
    CAPTURE(message);
    CHECK(contains(message, path));
    for (const std::string& part : c.expect) CHECK(contains(message, part));
  }
  CHECK(
      contains(error_of([&] { data::read_idx((dir.path / "missing").string()); }), "cannot open"));
}

TEST_CASE("MNIST reader: files of a folder, labels checked") {
  TempDir dir;
  std::string pixels;
  for (int k = 0; k < 3 * 2 * 2; ++k) pixels.push_back(char(k * 20));
  dir.write("t10k-images-idx3-ubyte.gz", gzip_stored(idx_file(0x08, {3, 2, 2}, pixels)));
  dir.write("t10k-labels-idx1-ubyte", idx_file(0x08, {3}, byte_string({7, 0, 9})));
  data::MNIST test(dir.path.string(), data::Split::test);
  CHECK(test.size() == 3);
  CHECK(test.images().sizes() == Shape{3, 1, 2, 2});
  CHECK(test.images().to_vector()[5] == doctest::Approx(100.0 / 255.0));
  CHECK(test.targets().dtype() == DType::i64);
  CHECK(test.targets().to_vector() == std::vector<double>{7, 0, 9});

  const std::string labels =
      dir.write("t10k-labels-idx1-ubyte", idx_file(0x08, {3}, byte_string({7, 12, 9})));
  const std::string message =
      error_of([&] { data::MNIST bad(dir.path.string(), data::Split::test); });
  CHECK(contains(message, labels));
  CHECK(contains(message, "byte offset 9"));
  CHECK(contains(message, "label 12"));
  CHECK(contains(error_of([&] { data::MNIST none(dir.path.string(), data::Split::train); }),
                 "train-images-idx3-ubyte.gz"));
}

TEST_CASE("CIFAR-10 reader: records, truncation, bad labels") {
  TempDir dir;
  std::string records;
  for (int r = 0; r < 3; ++r) {
    records.push_back(char(r + 3));
    for (int k = 0; k < 3072; ++k) records.push_back(char((k + r) % 256));
  }
  dir.write("test_batch.bin", records);
  data::CIFAR10 test(dir.path.string(), data::Split::test);
  CHECK(test.size() == 3);
  CHECK(test.images().sizes() == Shape{3, 3, 32, 32});
  CHECK(test.targets().to_vector() == std::vector<double>{3, 4, 5});
  CHECK(test.images().to_vector()[3072 + 1024] ==
        doctest::Approx(double((1024 + 1) % 256) / 255.0));

  dir.write("test_batch.bin", records.substr(0, records.size() - 100));
  std::string message = error_of([&] { data::CIFAR10 bad(dir.path.string(), data::Split::test); });
  CHECK(contains(message, "test_batch.bin"));
  CHECK(contains(message, "byte offset 6146"));
  records[3073] = char(10);
  dir.write("test_batch.bin", records);
  message = error_of([&] { data::CIFAR10 bad(dir.path.string(), data::Split::test); });
  CHECK(contains(message, "byte offset 3073"));
  CHECK(contains(message, "label 10"));
}

TEST_CASE("TextCorpus: folders, fortune separators, vocabulary, NUL bytes") {
  TempDir dir;
  dir.write("b.txt", "one\n%\ntwo");
  dir.write("a.txt", "abc\n");
  dir.write("a.txt.dat", "\x01\x02 binary index");
  dir.write(".hidden", "zzz");
  fs::create_symlink(dir.path / "a.txt", dir.path / "a.u8");
  data::TextCorpus corpus(dir.path.string());
  CHECK(corpus.files().size() == 2);
  CHECK(corpus.text() == "abc\none\n\ntwo\n");
  CHECK(corpus.vocabulary() == "\nabcenotw");
  CHECK(corpus.decode(corpus.tokens()) == corpus.text());
  CHECK(corpus.encode("cab").to_vector() == std::vector<double>{3, 1, 2});
  CHECK(contains(error_of([&] { corpus.encode("q"); }), "not in the corpus vocabulary"));

  data::TextCorpus raw(dir.write("c.txt", "x\n%\n"),
                       data::TextCorpusOptions().strip_fortune_separators(false));
  CHECK(raw.text() == "x\n%\n");

  const std::string bad = dir.write("d.txt", std::string("text\0more", 9));
  const std::string message = error_of([&] { data::TextCorpus t(bad); });
  CHECK(contains(message, bad));
  CHECK(contains(message, "byte offset 4"));
  CHECK(contains(message, "NUL"));

  data::SequenceDataset seq(arange(10, TensorOptions(DType::i64)), 3);
  CHECK(seq.size() == 3);  // windows 0-2, 3-5, 6-8 (each needs one more token for its target)
  data::Example e = seq.get(2);
  CHECK(e[0].to_vector() == std::vector<double>{6, 7, 8});
  CHECK(e[1].to_vector() == std::vector<double>{7, 8, 9});
}

// ---- DataLoader ---------------------------------------------------------------------------------

namespace {

std::shared_ptr<data::TensorDataset> numbered(int64_t n) {
  Tensor x = arange(double(n)).reshape({n, 1});
  Tensor y = arange(0, double(10 * n), 10, TensorOptions(DType::i64));
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
}

// One epoch's field-0 values, batch by batch; `paired`: check field 1 is still 10x field 0.
std::vector<std::vector<double>> epoch_batches(data::DataLoader& loader, bool paired = true) {
  std::vector<std::vector<double>> out;
  for (data::Batch& b : loader) {
    const std::vector<double> xs = b[0].to_vector(), ys = b[1].to_vector();
    if (paired)
      for (size_t k = 0; k < xs.size(); ++k) CHECK(ys[k] == xs[k] * 10);
    out.push_back(xs);
  }
  return out;
}

}  // namespace

TEST_CASE("DataLoader: order, batching, drop_last") {
  auto ds = numbered(10);
  data::DataLoader loader(ds, data::DataLoaderOptions(3));
  CHECK(loader.num_batches() == 4);
  CHECK(epoch_batches(loader) ==
        std::vector<std::vector<double>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}});
  data::DataLoader dropping(ds, data::DataLoaderOptions(3).drop_last(true));
  CHECK(dropping.num_batches() == 3);
  CHECK(epoch_batches(dropping).size() == 3);
  data::Batch first = *data::DataLoader(ds, data::DataLoaderOptions(4)).next();
  CHECK(first[0].sizes() == Shape{4, 1});
  CHECK(first[1].dtype() == DType::i64);
}

TEST_CASE("DataLoader: seeded shuffles, identical with any number of workers") {
  auto ds = numbered(50);
  auto opts = data::DataLoaderOptions(8).shuffle(true).seed(1234).transform(
      [](const Tensor& x, uint64_t seed) { return x + double(seed % 1000); });
  data::DataLoader serial(ds, opts);
  data::DataLoader threaded(ds, data::DataLoaderOptions(opts).num_workers(3).prefetch_factor(1));
  std::set<std::vector<double>> epochs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto a = epoch_batches(serial, false), b = epoch_batches(threaded, false);
    CHECK(a == b);
    epochs.insert(a[0]);
    // Without the transform's offset, an epoch is a permutation of the dataset.
    std::vector<int64_t> order = serial.epoch_order(epoch);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t k = 0; k < 50; ++k) CHECK(sorted[size_t(k)] == k);
  }
  CHECK(epochs.size() == 3);  // each epoch has its own order (and transform seeds)
  CHECK(serial.epoch() == 2);
  serial.set_epoch(1);
  data::DataLoader other(ds, opts);
  other.set_epoch(1);
  CHECK(epoch_batches(serial, false) == epoch_batches(other, false));
  CHECK(data::DataLoader(ds, data::DataLoaderOptions(8).shuffle(true).seed(99)).epoch_order(0) !=
        serial.epoch_order(0));

  // Leaving an epoch early and starting the next one.
  serial.start_epoch();
  CHECK(serial.next().has_value());
  CHECK(epoch_batches(serial, false).size() == 7);
}

TEST_CASE("DataLoader: errors from datasets reach the consumer") {
  struct Flaky : data::Dataset {
    int64_t size() const override { return 10; }
    data::Example get(int64_t index) const override {
      EMBER_CHECK(index != 7, "Flaky: example ", index, " is unreadable");
      return {full({2}, double(index))};
    }
  };
  for (int64_t workers : {0, 2}) {
    CAPTURE(workers);
    data::DataLoader loader(std::make_shared<Flaky>(),
                            data::DataLoaderOptions(3).num_workers(workers));
    loader.start_epoch();
    CHECK(loader.next()->at(0).to_vector() == std::vector<double>{0, 0, 1, 1, 2, 2});
    CHECK(loader.next().has_value());
    CHECK(contains(error_of([&] { loader.next(); }), "example 7 is unreadable"));
  }
  struct Ragged : data::Dataset {
    int64_t size() const override { return 2; }
    data::Example get(int64_t index) const override { return {zeros({index + 1})}; }
  };
  data::DataLoader ragged(std::make_shared<Ragged>(), data::DataLoaderOptions(2));
  CHECK(contains(error_of([&] { ragged.next(); }), "must agree"));
  CHECK(contains(error_of([&] { data::DataLoader bad(numbered(3), data::DataLoaderOptions(0)); }),
                 "batch_size"));
}

// ---- transforms
// -------------------------------------------------------------------------------------

TEST_CASE("transforms: random crop with padding, horizontal flip, normalize") {
  const int64_t n = 16;
  Tensor images = arange(double(n * 2 * 4 * 5)).reshape({n, 2, 4, 5}) + 1;  // no zeros inside
  const std::vector<double> pixels = images.to_vector();

  data::RandomCrop crop(4, 5, 2);
  Tensor cropped = crop(images, 7);
  CHECK(cropped.sizes() == images.sizes());
  CHECK(max_abs_diff(cropped, crop(images, 7)) == 0);  // a function of the seed
  CHECK(max_abs_diff(cropped, crop(images, 8)) > 0);
  // Each image is a window of its zero-padded self at some offset, the same for both channels.
  const std::vector<double> out = cropped.to_vector();
  std::set<std::pair<int, int>> offsets;
  for (int64_t i = 0; i < n; ++i) {
    int matches = 0;
    for (int top = 0; top <= 4; ++top)
      for (int left = 0; left <= 4; ++left) {
        bool same = true;
        for (int c = 0; c < 2 && same; ++c)
          for (int y = 0; y < 4 && same; ++y)
            for (int x = 0; x < 5 && same; ++x) {
              const int sy = top + y - 2, sx = left + x - 2;
              const double expect = sy < 0 || sy >= 4 || sx < 0 || sx >= 5
                                        ? 0.0
                                        : pixels[size_t(((i * 2 + c) * 4 + sy) * 5 + sx)];
              same = out[size_t(((i * 2 + c) * 4 + y) * 5 + x)] == expect;
            }
        if (same) {
          ++matches;
          offsets.insert({top, left});
        }
      }
    CHECK(matches == 1);
  }
  CHECK(offsets.size() > 3);  // offsets vary from image to image
  CHECK(max_abs_diff(data::RandomCrop(4, 5, 0)(images, 3), images) == 0);  // nothing to choose
  CHECK(contains(error_of([&] { data::RandomCrop(9, 0)(images, 0); }), "does not fit"));

  CHECK(max_abs_diff(data::RandomHorizontalFlip(0.0)(images, 1), images) == 0);
  Tensor mirrored = data::RandomHorizontalFlip(1.0)(images, 1);
  CHECK(mirrored.to_vector()[0] == pixels[4]);
  CHECK(mirrored.to_vector()[4] == pixels[0]);
  const std::vector<double> half = data::RandomHorizontalFlip(0.5)(images, 5).to_vector();
  const std::vector<double> all = mirrored.to_vector();
  int flipped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t base = size_t(i * 40);
    const bool as_is =
        std::equal(half.begin() + base, half.begin() + base + 40, pixels.begin() + base);
    const bool as_mirror =
        std::equal(half.begin() + base, half.begin() + base + 40, all.begin() + base);
    CHECK((as_is || as_mirror));
    flipped += as_mirror;
  }
  CHECK(flipped > 0);
  CHECK(flipped < n);

  Tensor normalized = data::Normalize({1.0, 2.0}, {2.0, 4.0})(images);
  CHECK(normalized.to_vector()[0] == doctest::Approx((pixels[0] - 1.0) / 2.0));
  CHECK(normalized.to_vector()[20] == doctest::Approx((pixels[20] - 2.0) / 4.0));
  CHECK(
      contains(error_of([&] { data::Normalize({0.5}, {0.5})(images.to(DType::u8)); }), "float32"));

  data::Transform pipeline = data::compose(
      {data::RandomCrop(4, 5, 1), data::RandomHorizontalFlip(), data::Normalize({0.5}, {0.25})});
  CHECK(max_abs_diff(pipeline(images, 11), pipeline(images, 11)) == 0);
}

// ---- the real datasets, when installed
// -------------------------------------------------------------

TEST_CASE("Fashion-MNIST from Debian's dataset-fashion-mnist (skipped when not installed)") {
  const std::string folder = data::default_fashion_mnist_folder();
  if (!fs::exists(fs::path(folder) / "t10k-images-idx3-ubyte.gz")) return;
  data::MNIST test(folder, data::Split::test);
  CHECK(test.size() == 10000);
  CHECK(test.images().sizes() == Shape{10000, 1, 28, 28});
  std::vector<int> per_class(10, 0);
  for (double label : test.targets().to_vector()) ++per_class[size_t(label)];
  for (int count : per_class) CHECK(count == 1000);  // the test split is balanced
  const double mean = ember::mean(test.images()).item();
  CHECK(mean > 0.25);
  CHECK(mean < 0.32);  // Fashion-MNIST's mean pixel is about 0.286
  data::MNIST train(folder, data::Split::train);
  CHECK(train.size() == 60000);
}

TEST_CASE("fortunes corpus from Debian's fortunes package (skipped when not installed)") {
  const std::string folder = data::default_text_corpus_path();
  if (!fs::exists(fs::path(folder) / "fortunes")) return;
  data::TextCorpus corpus(folder);
  CHECK(corpus.text().size() > 100000);
  CHECK(corpus.vocab_size() > 60);
  CHECK(corpus.text().find("\n%\n") == std::string::npos);
  for (const std::string& f : corpus.files()) CHECK(fs::path(f).extension() != ".dat");
}
