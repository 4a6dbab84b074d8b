// Checkpoints: the safetensors layout byte for byte, round trips of every dtype and of module
// state, the training Checkpoint bundle (optimizer tensors, step, RNG, scheduler), atomic writes (a
// failed write leaves the old file intact and no temporary behind) and the errors for corrupt and
// truncated files (each naming the file and the byte offset, and leaving the model untouched).
// The last case is the Ember half of the PyTorch round trip that scripts/check_checkpoint_torch.py
// drives (it skips unless that script sets EMBER_TORCH_INTEROP_DIR).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ember/ember.h"
#include "ember/nn/nn.h"
#include "support/temp_dir.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

struct TempDir : ember::test::TempDir {
  TempDir() : ember::test::TempDir("ember_ckpt_test") {}
};

using ember::test::read_bytes;
using ember::test::write_bytes;

std::string load_error(const std::string& path) {
  try {
    nn::load_checkpoint(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.to_vector() == b.to_vector();
}

// A ResNet-like block: conv, batch norm, a residual, a classifier.
struct TinyNetImpl : nn::Module {
  TinyNetImpl() : nn::Module("TinyNet") {
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 4, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(4));
    fc = register_module("fc", nn::Linear(4, 5));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = bn1->forward_add_relu(
        conv1->forward(x), x.narrow(1, 0, 1).expand({x.size(0), 4, x.size(2), x.size(3)}));
    return fc->forward(h.mean({2, 3}));
  }
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::Linear fc{nullptr};
};
EMBER_MODULE(TinyNet);

}  // namespace

TEST_CASE("safetensors layout: header length, JSON, aligned data, exact offsets") {
  TempDir dir;
  std::string path = dir.file("a.safetensors");
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector({7}, {}, TensorOptions(DType::i64));
  // Without checksums, whose metadata entry test_reliability.cpp checks.
  nn::save_checkpoint(path, {{"a", a}, {"b", b}}, {{"format", "pt"}}, /*checksums=*/false);
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);
  std::string header = bytes.substr(8, n);
  CHECK(header.find(R"("__metadata__":{"format":"pt"})") != std::string::npos);
  CHECK(header.find(R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})") !=
        std::string::npos);
  CHECK(header.find(R"("b":{"dtype":"I64","shape":[],"data_offsets":[24,32]})") !=
        std::string::npos);
  CHECK(bytes.size() == 8 + n + 32);
  float first = 0;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  CHECK(first == 1.0f);
  int64_t seven = 0;
  std::memcpy(&seven, bytes.data() + 8 + n + 24, 8);
  CHECK(seven == 7);

  // A file written by hand (no padding, metadata last, tensors out of order) reads back.
  std::string data(12, '\0');
  float f[2] = {0.5f, -2.0f};
  int32_t i = 42;
  std::memcpy(data.data(), &i, 4);
  std::memcpy(data.data() + 4, f, 8);
  write_bytes(
      path, ember::test::safetensors_bytes(
                R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                R"("i":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},"__metadata__":{"k":"v"}})",
                data));
  auto loaded = nn::load_checkpoint(path);
  REQUIRE(loaded.tensors.size() == 2);
  CHECK(loaded.tensors[0].first == "i");  // file order
  CHECK(loaded.tensors[0].second.to_vector() == std::vector<double>{42});
  CHECK(loaded.tensors[1].second.to_vector() == std::vector<double>{0.5, -2.0});
  CHECK(loaded.metadata.at("k") == "v");
}

TEST_CASE("round trip of every dtype, empty and 0-d tensors, strided views") {
  TempDir dir;
  std::string path = dir.file("dtypes.safetensors");
  nn::NamedTensors tensors;
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                  DType::u8, DType::boolean}) {
    Tensor t = from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4},
                           TensorOptions(d == DType::boolean ? DType::f32 : d));
    if (d == DType::boolean) t = gt(t, full({}, 5.0));
    tensors.emplace_back(std::string("t_") + dtype_name(d), t);
  }
  tensors.emplace_back("empty", zeros({0, 3}));
  tensors.emplace_back("scalar", full({}, -1.5, TensorOptions(DType::f64)));
  tensors.emplace_back("transposed", from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).t());
  nn::save_checkpoint(path, tensors, {{"note", "all dtypes"}, {"empty", ""}});
  auto loaded = nn::load_checkpoint(path);
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    CAPTURE(tensors[i].first);
    CHECK(loaded.tensors[i].first == tensors[i].first);
    CHECK(same(loaded.tensors[i].second, tensors[i].second.contiguous()));
  }
  CHECK(loaded.metadata.size() == 2);
  CHECK(loaded.metadata.at("empty").empty());

  CHECK_THROWS_WITH_AS(nn::save_checkpoint(path, {{"a", zeros({1})}, {"a", zeros({1})}}),
                       doctest::Contains("twice"), Error);
  CHECK_THROWS_WITH_AS(nn::save_checkpoint(path, {{"__metadata__", zeros({1})}}),
                       doctest::Contains("reserved"), Error);
  CHECK_THROWS_WITH_AS(nn::save_checkpoint(path, {}, {{"bad", "\xff\xfe"}}),
                       doctest::Contains("UTF-8"), Error);
  CHECK(nn::load_checkpoint(path).tensors.size() ==
        tensors.size());  // refused writes changed nothing
}

TEST_CASE("module state round trip, and loading leaves a model untouched on error") {
  TempDir dir;
  std::string path = dir.file("model.safetensors");
  manual_seed(1);
  TinyNet a;
  a->forward(randn({2, 3, 5, 5}));  // move the running statistics
  nn::save_state_dict(*a, path);
  manual_seed(2);
  TinyNet b;
  nn::load_state_dict(*b, path);
  auto sa = a->state_dict(), sb = b->state_dict();
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) CHECK(same(sa[i].second, sb[i].second));
  CHECK(sa.back().first == "fc.bias");

  // A truncated copy: an error, and the model keeps its values.
  std::string bytes = read_bytes(path);
  std::string bad = dir.file("truncated.safetensors");
  write_bytes(bad, bytes.substr(0, bytes.size() - 10));
  TinyNet c;
  Tensor before = c->fc->weight.clone();
  CHECK_THROWS_WITH_AS(nn::load_state_dict(*c, bad), doctest::Contains("truncated"), Error);
  CHECK(same(c->fc->weight, before));
  CHECK(read_bytes(path) == bytes);
}

TEST_CASE("Checkpoint bundle: model, optimizer state, step, scheduler and RNG") {
  TempDir dir;
  std::string path = dir.file("train.safetensors");
  manual_seed(3);
  TinyNet net;
  nn::Checkpoint ck;
  ck.model = net->state_dict();
  ck.optimizer = {{"state.fc.weight.exp_avg", randn({5, 4})},
                  {"state.fc.weight.step", full({}, 12.0)}};
  ck.grad_scaler = {{"scale", full({}, 65536.0)},
                    {"growth_tracker", zeros({}, TensorOptions(DType::i32))}};
  ck.optimizer_config = R"({"lr":0.001,"betas":[0.9,0.999]})";
  ck.scheduler = R"({"last_epoch":3})";
  ck.step = 1234;
  randn({10});  // move the generator
  ck.rng = nn::capture_rng_state();
  ck.extra["epoch"] = "4";
  ck.save(path);
  Tensor expected_next = randn({6});

  auto raw = nn::load_checkpoint(path);
  CHECK(raw.metadata.at("format") == "pt");
  CHECK(raw.tensors[ck.model.size()].first == "optimizer.state.fc.weight.exp_avg");

  randn({100});  // disturb the generator, then restore it
  nn::Checkpoint back = nn::Checkpoint::load(path);
  nn::restore_rng_state(back.rng);
  CHECK(same(randn({6}), expected_next));
  CHECK(back.step == 1234);
  CHECK(back.optimizer_config == ck.optimizer_config);
  CHECK(back.scheduler == ck.scheduler);
  CHECK(back.extra.size() == 1);
  CHECK(back.extra.at("epoch") == "4");
  REQUIRE(back.grad_scaler.size() == 2);
  CHECK(back.grad_scaler[0].first == "scale");
  CHECK(back.grad_scaler[0].second.item() == 65536.0);
  CHECK(back.grad_scaler[1].second.dtype() == DType::i32);
  REQUIRE(back.optimizer.size() == 2);
  CHECK(back.optimizer[0].first == "state.fc.weight.exp_avg");
  CHECK(same(back.optimizer[0].second, ck.optimizer[0].second));
  REQUIRE(back.model.size() == ck.model.size());
  TinyNet other;
  other->load_state_dict(back.model);
  CHECK(same(other->fc->weight, net->fc->weight));

  nn::Checkpoint reserved;
  reserved.extra["ember.step"] = "1";
  CHECK_THROWS_WITH_AS(reserved.save(path), doctest::Contains("reserved"), Error);
  nn::Checkpoint clash;
  clash.model = {{"optimizer.x", zeros({1})}};
  CHECK_THROWS_WITH_AS(clash.save(path), doctest::Contains("marks optimizer"), Error);
}

TEST_CASE("atomic writes: a failure mid-write leaves the old file and no temporary") {
  TempDir dir;
  std::string path = dir.file("ckpt.safetensors");
  nn::save_checkpoint(path, {{"w", from_vector({1, 2, 3}, {3})}}, {{"version", "old"}});
  const std::string old_bytes = read_bytes(path);
  nn::NamedTensors bigger{{"w", randn({1000})}, {"v", randn({50})}};
  for (int64_t fail_at : {0, 5, 8, 60, 2000, 4100}) {
    CAPTURE(fail_at);
    nn::detail::CheckpointWriteFault fault(fail_at);
    CHECK_THROWS_WITH_AS(nn::save_checkpoint(path, bigger, {{"version", "new"}}),
                         doctest::Contains("left as it was"), Error);
    CHECK(read_bytes(path) == old_bytes);
  }
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file() ? 1 : 0;
  CHECK(files == 1);                                        // the temporary files were removed
  nn::save_checkpoint(path, bigger, {{"version", "new"}});  // without the fault the write lands
  CHECK(nn::load_checkpoint(path).metadata.at("version") == "new");

  // A folder that cannot take the temporary file: an error naming it; nothing else changes.
  CHECK_THROWS_WITH_AS(nn::save_checkpoint(dir.file("no/such/dir/x.safetensors"), bigger),
                       doctest::Contains("cannot create the temporary file"), Error);
  if (::geteuid() != 0) {  // root ignores folder permissions
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_AS(nn::save_checkpoint(path, {{"w", zeros({1})}}), Error);
    fs::permissions(dir.path, fs::perms::owner_all);
    CHECK(nn::load_checkpoint(path).metadata.at("version") == "new");
  }
}

TEST_CASE("corrupt and truncated files: errors name the file and the byte offset") {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  const std::string four_floats(16, '\0');
  struct Row {
    const char* what;
    std::string bytes;
    std::vector<const char*> expect;
  };
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  auto length_prefix = [](uint64_t n) {
    std::string s(8, '\0');
    std::memcpy(s.data(), &n, 8);
    return s;
  };
  std::vector<Row> rows = {
      {"empty file", "", {"fewer than the 8-byte header length at byte 0"}},
      {"short length", std::string(5, '\x01'), {"fewer than the 8-byte"}},
      {"length past the end",
       length_prefix(1000) + "{}",
       {"header length at byte 0 says 1000 bytes", "only 2 bytes"}},
      {"absurd length",
       length_prefix(1ull << 40) + "{}",
       {"says 1099511627776 bytes", "the limit is 100000000"}},
      // The second ',' is the 13th header byte: file offset 8 + 12.
      {"header not JSON",
       ember::test::safetensors_bytes("{\"w\": [1, 2,,]}", ""),
       {"malformed at byte 20"}},
      {"header not an object",
       ember::test::safetensors_bytes("[1, 2]", ""),
       {"does not start with '{'"}},
      {"unknown dtype",
       ember::test::safetensors_bytes(R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})",
                                      std::string(8, '\0')),
       {"dtype \"C64\""}},
      {"negative size",
       ember::test::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                                      four_floats),
       {"non-negative integers"}},
      {"size mismatch",
       ember::test::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})",
                                      four_floats),
       {"need 12 bytes"}},
      {"offsets past the end",
       ember::test::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})",
                                      four_floats),
       {"occupies bytes [63, 95)", "file ends at byte 79"}},  // a 55-byte header
      {"truncated data",
       ember::test::safetensors_bytes(good_header, four_floats).substr(0, 70),
       {"truncated"}},
      {"gap",
       ember::test::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                      four_floats),
       {"a gap"}},
      {"overlap",
       ember::test::safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                      four_floats),
       {"overlapping"}},
      {"trailing bytes",
       ember::test::safetensors_bytes(good_header, four_floats + "xx"),
       {"trailing data"}},
      {"bad metadata",
       ember::test::safetensors_bytes(R"({"__metadata__":{"k":1}})", ""),
       {"'k' holds 1"}},
      {"missing offsets",
       ember::test::safetensors_bytes(R"({"w":{"dtype":"F32","shape":[4]}})", four_floats),
       {"data_offsets"}},
  };
  for (const Row& r : rows) {
    CAPTURE(r.what);
    write_bytes(path, r.bytes);
    std::string msg = load_error(path);
    CHECK(msg.find(path) != std::string::npos);
    for (const char* e : r.expect) CHECK_MESSAGE(msg.find(e) != std::string::npos, msg);
  }
  CHECK(load_error(dir.file("missing.safetensors")).find("cannot open") != std::string::npos);

  // A bundle with bad metadata names the key.
  nn::save_checkpoint(path, {}, {{"ember.checkpoint", "1"}, {"ember.step", "12x"}});
  CHECK_THROWS_WITH_AS(nn::Checkpoint::load(path), doctest::Contains("ember.step"), Error);
}

// ---- PyTorch interop (scripts/check_checkpoint_torch.py)
// ------------------------------------------

namespace {

// torchvision's BasicBlock names: conv1, bn1, conv2, bn2, downsample.{0,1}.
struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) : nn::Module("BasicBlock") {
    conv1 = register_module(
        "conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 =
        register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out)
      downsample = register_module(
          "downsample",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = bn1->forward_relu(conv1->forward(x));
    return bn2->forward_add_relu(conv2->forward(h),
                                 downsample.is_empty() ? x : downsample->forward(x));
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential downsample{nullptr};
};
EMBER_MODULE(BasicBlock);

// The model of scripts/check_checkpoint_torch.py (SmallResNet there): same names, same forward.
struct SmallResNetImpl : nn::Module {
  SmallResNetImpl() : nn::Module("SmallResNet") {
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(8));
    layer1 = register_module("layer1", nn::Sequential(BasicBlock(8, 8, 1)));
    layer2 = register_module("layer2", nn::Sequential(BasicBlock(8, 16, 2)));
    fc = register_module("fc", nn::Linear(16, 10));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = layer2->forward(layer1->forward(bn1->forward_relu(conv1->forward(x))));
    return fc->forward(h.mean({2, 3}));
  }
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::Sequential layer1{nullptr}, layer2{nullptr};
  nn::Linear fc{nullptr};
};
EMBER_MODULE(SmallResNet);

const char* interop_dir() { return std::getenv("EMBER_TORCH_INTEROP_DIR"); }

}  // namespace

// Phase "export": writes ember_model.safetensors (state after a few training-mode batches, so the
// running statistics are not the defaults) and ember_io.safetensors (an input and the eval-mode
// output). Phase "import": loads the script's torch_model.safetensors (a state_dict saved by
// safetensors.torch after PyTorch trained the model further) and checks the eval-mode output on
// torch_io.safetensors's input against PyTorch's.
TEST_CASE("PyTorch interop: a ResNet-like state dict both ways" *
          doctest::skip(interop_dir() == nullptr)) {
  const std::string dir = interop_dir();
  const char* phase_env = std::getenv("EMBER_TORCH_INTEROP_PHASE");
  const std::string phase = phase_env ? phase_env : "";
  REQUIRE_MESSAGE((phase == "export" || phase == "import"),
                  "EMBER_TORCH_INTEROP_PHASE must be export or import");
  if (phase == "export") {
    manual_seed(2024);
    SmallResNet net;
    for (int i = 0; i < 3; ++i) net->forward(randn({4, 3, 12, 12}) * 1.5 + 0.3);
    net->eval();
    Tensor x = randn({2, 3, 12, 12});
    Tensor y = net->forward(x);
    nn::save_state_dict(*net, dir + "/ember_model.safetensors", {{"format", "pt"}});
    nn::save_checkpoint(dir + "/ember_io.safetensors", {{"input", x}, {"output", y}});
  } else {
    SmallResNet net;
    nn::load_state_dict(*net, dir + "/torch_model.safetensors");
    net->eval();
    auto io = nn::load_checkpoint(dir + "/torch_io.safetensors");
    REQUIRE(io.tensors.size() == 2);
    const Tensor& x = io.tensors[0].first == "input" ? io.tensors[0].second : io.tensors[1].second;
    const Tensor& expected =
        io.tensors[0].first == "output" ? io.tensors[0].second : io.tensors[1].second;
    Tensor y = net->forward(x);
    const double diff = max_abs_diff(y, expected);
    MESSAGE("ember_import_max_abs_diff=" << diff);
    CHECK(diff < 1e-4);
    CHECK(net->bn1->num_batches_tracked.item() > 3);  // PyTorch's further training came through
  }
}
