// safetensors reading and writing (atomic), and the training Checkpoint bundle (see checkpoint.h).
#include "ember/nn/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "ember/autograd/graph/grad_mode.h"
#include "ember/nn/lr_scheduler.h"
#include "ember/nn/optim.h"
#include "ember/tensor/json_depth.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/generator.h"

namespace ember::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; Ember writes host memory as is");

namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// The safetensors reference implementation refuses headers above 100 MB; so do we, which also
// keeps a corrupt length from asking for an absurd allocation.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";
// Metadata entry of Ember-written files: a JSON object mapping tensor names to the CRC-32 (8 hex
// digits) of their bytes. Verified on load and not returned with the caller's metadata.
constexpr const char* kChecksumKey = "ember.crc32";

thread_local int64_t tls_fail_after_bytes = -1;

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::boolean:
      return "BOOL";
  }
  EMBER_INTERNAL_ASSERT(false, "unknown dtype");
  return "";
}

bool dtype_from_safetensors(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::f32}, {"F64", DType::f64}, {"F16", DType::f16}, {"BF16", DType::bf16},
      {"I32", DType::i32}, {"I64", DType::i64}, {"U8", DType::u8},   {"BOOL", DType::boolean}};
  for (auto& [name, d] : table)
    if (s == name) {
      *out = d;
      return true;
    }
  return false;
}

std::string errno_text() { return std::strerror(errno); }

// The folder holding `path` ("." for a bare file name) and the file name itself.
std::pair<std::string, std::string> split_path(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? std::string("/") : path.substr(0, slash), path.substr(slash + 1)};
}

// A file descriptor closed on scope exit (errors on close are checked where they matter).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

// Writes into the temporary file, counting bytes so that the test fault can fire mid-file.
class TempFileWriter {
 public:
  TempFileWriter(int fd, std::string tmp_path, std::string target)
      : fd_(fd), tmp_path_(std::move(tmp_path)), target_(std::move(target)) {}

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      size_t chunk = std::min<size_t>(n, size_t(1) << 30);
      if (tls_fail_after_bytes >= 0) {
        const int64_t room = tls_fail_after_bytes - written_;
        if (room <= 0)
          EMBER_THROW(execution_failed, "save_checkpoint: write to '", tmp_path_,
                      "' failed at byte ", written_, " (simulated fault); '", target_,
                      "' was left as it was");
        chunk = std::min<size_t>(chunk, size_t(room));
      }
      ssize_t r = ::write(fd_, p, chunk);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        EMBER_THROW(execution_failed, "save_checkpoint: write to '", tmp_path_, "' failed at byte ",
                    written_, ": ", r < 0 ? errno_text() : std::string("no progress"),
                    " (is the disk full?); '", target_, "' was left as it was");
      p += r;
      n -= size_t(r);
      written_ += r;
    }
  }

 private:
  int fd_;
  std::string tmp_path_, target_;
  int64_t written_ = 0;
};

// A CPU, contiguous copy of `t` whose bytes can be written out as they are.
Tensor host_contiguous(const Tensor& t) {
  autograd::NoGradGuard no_grad;
  Tensor c = t.detach();
  if (!c.device().is_cpu()) c = c.cpu();
  return c.is_contiguous() ? c : c.contiguous();
}

// Temporaries of this process still being written (their names), so that cleaning stale ones
// never removes a save in flight on another thread.
std::mutex& in_flight_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& in_flight() {
  static std::set<std::string>* s = new std::set<std::string>();  // leaked: saves at exit
  return *s;
}

// A token that differs across restarts of a process with the same pid (pid 1 in a container).
std::string unique_token() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = [] {
    uint64_t s = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                 uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    try {
      std::random_device rd;
      s ^= (uint64_t(rd()) << 32) ^ uint64_t(rd());
    } catch (const std::exception&) {  // no entropy source: the clocks alone still differ
    }
    return s;
  }();
  uint64_t x = seed + 0x9E3779B97F4A7C15ull * (counter.fetch_add(1) + 1);  // splitmix64
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(x));
  return text;
}

// Removes the temporaries ".<base>.tmp.<pid>.<token>" of earlier saves to the same target that
// can no longer finish: their process is gone, or it is this process and no thread is writing
// them (a previous life of the same pid, or a write that was killed). Best effort.
void remove_stale_temporaries(const std::string& dir, const std::string& base) {
  const std::string prefix = "." + base + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  const long me = long(::getpid());
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (end == name.c_str() + prefix.size() || *end != '.' || pid <= 0) continue;
    bool gone = false;
    if (pid == me) {
      std::lock_guard<std::mutex> lock(in_flight_mutex());
      gone = in_flight().count(name) == 0;
    } else {
      gone = ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
    }
    if (gone) stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : stale) ::unlink(((dir == "/" ? "" : dir) + "/" + name).c_str());
}

void write_atomically(const std::string& path, const std::string& header,
                      const std::vector<Tensor>& blobs) {
  auto [dir, base] = split_path(path);
  EMBER_CHECK(!base.empty(), "save_checkpoint: '", path, "' names a folder, not a file");
  const std::string tmp_name =
      "." + base + ".tmp." + std::to_string(::getpid()) + "." + unique_token();
  const std::string tmp = (dir == "/" ? "" : dir) + "/" + tmp_name;
  {
    std::lock_guard<std::mutex> lock(in_flight_mutex());
    in_flight().insert(tmp_name);
  }
  struct Done {
    const std::string& name;
    ~Done() {
      std::lock_guard<std::mutex> lock(in_flight_mutex());
      in_flight().erase(name);
    }
  } done{tmp_name};
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd.get() < 0)
    EMBER_THROW(execution_failed, "save_checkpoint: cannot create the temporary file '", tmp,
                "' for '", path, "': ", errno_text(), "; check that the folder '", dir,
                "' exists and is writable and that the disk has room");
  try {
    TempFileWriter w(fd.get(), tmp, path);
    uint64_t header_len = header.size();
    w.write(&header_len, 8);
    w.write(header.data(), header.size());
    for (const Tensor& t : blobs)
      if (t.nbytes() > 0) w.write(t.data_ptr(), t.nbytes());
    if (::fsync(fd.get()) != 0)
      EMBER_THROW(execution_failed, "save_checkpoint: fsync of '", tmp, "' failed: ", errno_text());
    if (::close(fd.release()) != 0)
      EMBER_THROW(execution_failed, "save_checkpoint: closing '", tmp, "' failed: ", errno_text());
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      EMBER_THROW(execution_failed, "save_checkpoint: renaming '", tmp, "' to '", path,
                  "' failed: ", errno_text());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable only once the folder's entry is on disk.
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0 || ::fsync(dfd.get()) != 0)
    EMBER_THROW(execution_failed, "save_checkpoint: '", path,
                "' was written, but syncing its folder '", dir, "' failed: ", errno_text());
  remove_stale_temporaries(dir, base);
}

// The CRC-32 of a tensor's bytes, as 8 hex digits.
std::string crc32_hex(const Tensor& t) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const Bytef* p = static_cast<const Bytef*>(t.data_ptr());
  for (size_t left = t.nbytes(); left > 0;) {
    const uInt chunk = uInt(std::min<size_t>(left, size_t(1) << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    left -= chunk;
  }
  char text[9];
  std::snprintf(text, sizeof(text), "%08lx", static_cast<unsigned long>(crc & 0xFFFFFFFFul));
  return text;
}

// Reads exactly n bytes at `offset`, or throws naming the file and where it fell short.
void read_exact(int fd, const std::string& path, void* dst, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      EMBER_THROW(execution_failed, "load_checkpoint: reading '", path, "' at byte ", offset + done,
                  " failed: ", errno_text());
    if (r == 0)
      EMBER_THROW(bad_param, "load_checkpoint: '", path, "' is truncated: expected ", n,
                  " bytes at byte ", offset, " but the file ends at byte ", offset + done);
    done += size_t(r);
  }
}

struct HeaderEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // relative to the data section
};

// Throws a bad_param Error about the header of `path`.
template <typename... Args>
[[noreturn]] void header_error(const std::string& path, const Args&... args) {
  EMBER_THROW(bad_param, "load_checkpoint: '", path,
              "' is not a valid safetensors file: ", args...);
}

HeaderEntry parse_entry(const std::string& path, const std::string& name, const Json& v) {
  if (!v.is_object())
    header_error(path, "the header entry of tensor '", name, "' is not a JSON object");
  HeaderEntry e;
  e.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string())
    header_error(path, "tensor '", name, "' has no \"dtype\" string");
  if (!dtype_from_safetensors(dt->get<std::string>(), &e.dtype))
    header_error(
        path, "tensor '", name, "' has dtype \"", dt->get<std::string>(),
        "\", which Ember does not read (it reads F32, F64, F16, BF16, I32, I64, U8, BOOL)");
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array())
    header_error(path, "tensor '", name, "' has no \"shape\" array");
  uint64_t numel = 1, bound = 1;  // bound counts sizes of 0 as 1, as Ember's element limit does
  for (const Json& d : *sh) {
    if (!d.is_number_unsigned())
      header_error(path, "tensor '", name, "' has shape ", sh->dump(),
                   ": sizes must be non-negative integers");
    uint64_t s = d.get<uint64_t>();
    if (s > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, s, &numel) ||
        __builtin_mul_overflow(bound, std::max<uint64_t>(s, 1), &bound) ||
        bound > uint64_t(kMaxNumel))
      header_error(path, "tensor '", name, "' has shape ", sh->dump(),
                   ", whose size overflows or "
                   "exceeds the limit of 2^48 elements per tensor");
    e.shape.push_back(int64_t(s));
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    header_error(path, "tensor '", name,
                 "' needs \"data_offsets\": [begin, end] with non-negative integers");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  uint64_t nbytes = 0;
  if (e.end < e.begin || __builtin_mul_overflow(numel, uint64_t(element_size(e.dtype)), &nbytes) ||
      e.end - e.begin != nbytes)
    header_error(path, "tensor '", name, "' has data_offsets ", off->dump(), " (", e.end - e.begin,
                 " bytes) but its dtype and shape ", sh->dump(), " need ", nbytes, " bytes");
  return e;
}

}  // namespace

namespace detail {
CheckpointWriteFault::CheckpointWriteFault(int64_t fail_after_bytes) : prev_(tls_fail_after_bytes) {
  tls_fail_after_bytes = fail_after_bytes;
}
CheckpointWriteFault::~CheckpointWriteFault() { tls_fail_after_bytes = prev_; }
}  // namespace detail

void save_checkpoint(const std::string& path, const NamedTensors& tensors,
                     const CheckpointMetadata& metadata, bool checksums) {
  OrderedJson header = OrderedJson::object();
  header[kMetadataKey] = OrderedJson::object();  // placeholder: keeps the metadata first
  OrderedJson crcs = OrderedJson::object();
  std::vector<Tensor> blobs;
  blobs.reserve(tensors.size());
  uint64_t offset = 0;
  for (auto& [name, t] : tensors) {
    EMBER_CHECK(!name.empty() && name != kMetadataKey, "save_checkpoint: tensor name '", name,
                "' is not allowed (empty, or the reserved \"__metadata__\")");
    EMBER_CHECK(!header.contains(name), "save_checkpoint: tensor name '", name, "' appears twice");
    EMBER_CHECK(t.defined(), "save_checkpoint: tensor '", name, "' is undefined");
    Tensor c = host_contiguous(t);
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = safetensors_dtype(c.dtype());
    entry["shape"] = c.sizes();
    entry["data_offsets"] = {offset, offset + c.nbytes()};
    offset += c.nbytes();
    header[name] = std::move(entry);
    if (checksums) crcs[name] = crc32_hex(c);
    blobs.push_back(std::move(c));
  }
  CheckpointMetadata meta = metadata;
  meta.erase(kChecksumKey);  // a stale value (from a loaded file) never describes these tensors
  if (checksums) meta[kChecksumKey] = crcs.dump();
  if (meta.empty()) {
    header.erase(kMetadataKey);
  } else {
    for (auto& [k, v] : meta) header[kMetadataKey][k] = v;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const OrderedJson::type_error& e) {  // invalid UTF-8 in a name or a metadata string
    EMBER_THROW(bad_param, "save_checkpoint: '", path,
                "': tensor names and metadata must be valid UTF-8 (", e.what(), ")");
  }
  // Pad with spaces (allowed by the format) so that the data section starts 8-byte aligned, as the
  // reference writer does; readers can then map tensors in place.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  write_atomically(path, text, blobs);
}

LoadedTensors load_checkpoint(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0)
    EMBER_THROW(bad_param, "load_checkpoint: cannot open '", path, "': ", errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    EMBER_THROW(execution_failed, "load_checkpoint: cannot stat '", path, "': ", errno_text());
  const uint64_t file_size = uint64_t(st.st_size);
  if (file_size < 8)
    header_error(path, "the file has ", file_size,
                 " bytes, fewer than the 8-byte header length at byte 0");
  uint64_t header_len = 0;
  read_exact(fd.get(), path, &header_len, 8, 0);
  if (header_len < 2 || header_len > kMaxHeaderBytes || header_len > file_size - 8)
    header_error(path, "the header length at byte 0 says ", header_len, " bytes, but ",
                 header_len < 2 ? std::string("a header needs at least 2 (\"{}\")")
                 : header_len > kMaxHeaderBytes
                     ? "the limit is " + std::to_string(kMaxHeaderBytes)
                     : "the file has only " + std::to_string(file_size - 8) + " bytes after it",
                 " (a truncated or foreign file?)");
  std::string text(header_len, '\0');
  read_exact(fd.get(), path, text.data(), header_len, 8);
  if (text[0] != '{') header_error(path, "the header at byte 8 does not start with '{'");
  if (json_nesting_depth(text) > kMaxJsonDepth)
    header_error(path, "the JSON header nests deeper than ", kMaxJsonDepth,
                 " levels (a corrupt or ", "hostile file; safetensors headers nest 3 levels)");
  Json header;
  try {
    header = Json::parse(text);
  } catch (const Json::parse_error& e) {
    header_error(path, "the JSON header is malformed at byte ", 8 + (e.byte > 0 ? e.byte - 1 : 0),
                 ": ", e.what());
  } catch (const Json::exception& e) {  // out_of_range: a number no double holds, like 9E999
    header_error(path, "the JSON header holds a value out of range: ", e.what());
  }
  if (!header.is_object()) header_error(path, "the JSON header at byte 8 is not an object");

  LoadedTensors out;
  std::vector<HeaderEntry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it.value().is_object()) header_error(path, "\"__metadata__\" is not a JSON object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          header_error(path, "\"__metadata__\" must map strings to strings, but '", m.key(),
                       "' holds ", m.value().dump());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, it.key(), it.value()));
  }

  // The tensors must tile the data section exactly, as the reference reader demands.
  const uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  std::sort(entries.begin(), entries.end(), [](const HeaderEntry& a, const HeaderEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const HeaderEntry& e : entries) {
    if (e.end > data_size)
      header_error(path, "tensor '", e.name, "' occupies bytes [", data_start + e.begin, ", ",
                   data_start + e.end, ") but the file ends at byte ", file_size, " (truncated?)");
    if (e.begin != expected)
      header_error(path, "tensor '", e.name, "' starts at byte ", data_start + e.begin,
                   " but the previous ", "tensor ends at byte ", data_start + expected,
                   e.begin < expected ? " (overlapping tensors)" : " (a gap in the data)");
    expected = e.end;
  }
  if (expected != data_size)
    header_error(path, "the tensors end at byte ", data_start + expected, " but the file has ",
                 file_size, " bytes (trailing data)");

  // Checksums of Ember-written files (absent from other writers' files: nothing to verify then).
  std::map<std::string, std::string> crcs;
  if (auto it = out.metadata.find(kChecksumKey); it != out.metadata.end()) {
    Json j;
    try {
      if (json_nesting_depth(it->second) <= kMaxJsonDepth) j = Json::parse(it->second);
    } catch (const Json::exception&) {  // not JSON, or a number out of range: rejected below
    }
    if (!j.is_object())
      header_error(path, "metadata \"", kChecksumKey, "\" is not a JSON object of checksums");
    for (auto c = j.begin(); c != j.end(); ++c) {
      const bool hex =
          c.value().is_string() && c.value().get<std::string>().size() == 8 &&
          c.value().get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
      if (!hex)
        header_error(path, "metadata \"", kChecksumKey, "\" holds ", c.value().dump(),
                     " for tensor '", c.key(), "', not 8 lowercase hex digits");
      const bool known = std::any_of(entries.begin(), entries.end(),
                                     [&](const HeaderEntry& e) { return e.name == c.key(); });
      if (!known)
        header_error(path, "metadata \"", kChecksumKey, "\" names tensor '", c.key(),
                     "', which the file lacks");
      crcs[c.key()] = c.value().get<std::string>();
    }
    out.metadata.erase(it);
  }

  for (const HeaderEntry& e : entries) {
    Tensor t = empty(e.shape, e.dtype, Device::cpu());
    if (t.nbytes() > 0) read_exact(fd.get(), path, t.data_ptr(), t.nbytes(), data_start + e.begin);
    if (auto c = crcs.find(e.name); c != crcs.end()) {
      const std::string actual = crc32_hex(t);
      EMBER_CHECK(actual == c->second, "load_checkpoint: '", path, "': the data of tensor '",
                  e.name, "' (bytes [", data_start + e.begin, ", ", data_start + e.end,
                  ")) does not match ", "its checksum (CRC-32 ", actual, ", the file says ",
                  c->second,
                  "): the file is "
                  "corrupt; restore it from a copy or an earlier checkpoint");
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void save_state_dict(const Module& module, const std::string& path,
                     const CheckpointMetadata& metadata) {
  save_checkpoint(path, module.state_dict(), metadata);
}

void load_state_dict(Module& module, const std::string& path, bool strict) {
  LoadedTensors loaded = load_checkpoint(path);
  module.load_state_dict(loaded.tensors, strict);
}

// ---- RNG state
// -----------------------------------------------------------------------------------

std::vector<RngState> capture_rng_state() {
  std::vector<RngState> out;
  auto add = [&](Device d) {
    Generator& g = default_generator(d);
    out.push_back(RngState{d, g.seed(), g.offset()});
  };
  add(Device::cpu());
  if (cuda::is_available())
    for (int i = 0; i < cuda::device_count(); ++i) add(Device::cuda(i));
  return out;
}

void restore_rng_state(const std::vector<RngState>& states) {
  for (const RngState& s : states) {
    if (s.device.is_cuda() && (!cuda::is_available() || s.device.index >= cuda::device_count()))
      continue;
    Generator& g = default_generator(s.device);
    g.manual_seed(s.seed);
    g.set_offset(s.offset);
  }
}

// ---- Checkpoint
// ----------------------------------------------------------------------------------

namespace {
constexpr const char* kFormatKey = "ember.checkpoint";
constexpr const char* kStepKey = "ember.step";
constexpr const char* kRngKey = "ember.rng";
constexpr const char* kOptimizerKey = "ember.optimizer";
constexpr const char* kSchedulerKey = "ember.scheduler";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

uint64_t parse_u64(const std::string& path, const std::string& what, const std::string& text) {
  size_t used = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  EMBER_CHECK(used == text.size() && !text.empty() && text[0] != '-', "Checkpoint::load: '", path,
              "': metadata ", what, " is \"", text, "\", not a non-negative integer");
  return v;
}
}  // namespace

void Checkpoint::save(const std::string& path) const {
  NamedTensors tensors;
  tensors.reserve(model.size() + optimizer.size() + grad_scaler.size());
  for (auto& [name, t] : model) {
    for (const char* prefix : {kOptimizerPrefix, kGradScalerPrefix})
      EMBER_CHECK(!starts_with(name, prefix), "Checkpoint::save: model tensor '", name,
                  "' starts with \"", prefix,
                  "\", which marks optimizer or grad scaler state; rename the submodule");
    tensors.emplace_back(name, t);
  }
  for (auto& [name, t] : optimizer) tensors.emplace_back(kOptimizerPrefix + name, t);
  for (auto& [name, t] : grad_scaler) tensors.emplace_back(kGradScalerPrefix + name, t);

  CheckpointMetadata meta;
  for (auto& [k, v] : extra) {
    EMBER_CHECK(!starts_with(k, "ember.") && k != "format",
                "Checkpoint::save: extra metadata key '", k,
                "' is reserved (keys starting \"ember.\" and \"format\" belong to the checkpoint)");
    meta[k] = v;
  }
  meta["format"] = "pt";  // what safetensors.torch writes; tools use it to pick the framework
  meta[kFormatKey] = "1";
  meta[kStepKey] = std::to_string(step);
  Json rng_json = Json::array();
  for (const RngState& s : rng)
    rng_json.push_back({{"device", s.device.str()},
                        {"seed", std::to_string(s.seed)},
                        {"offset", std::to_string(s.offset)}});
  meta[kRngKey] = rng_json.dump();
  if (!optimizer_config.empty()) meta[kOptimizerKey] = optimizer_config;
  if (!scheduler.empty()) meta[kSchedulerKey] = scheduler;
  save_checkpoint(path, tensors, meta);
}

Checkpoint Checkpoint::load(const std::string& path) {
  LoadedTensors loaded = load_checkpoint(path);
  Checkpoint ck;
  const std::string opt_prefix = kOptimizerPrefix, scaler_prefix = kGradScalerPrefix;
  for (auto& [name, t] : loaded.tensors) {
    if (starts_with(name, opt_prefix))
      ck.optimizer.emplace_back(name.substr(opt_prefix.size()), t);
    else if (starts_with(name, scaler_prefix))
      ck.grad_scaler.emplace_back(name.substr(scaler_prefix.size()), t);
    else
      ck.model.emplace_back(name, t);
  }
  for (auto& [k, v] : loaded.metadata) {
    if (k == kStepKey) {
      const uint64_t s = parse_u64(path, kStepKey, v);
      EMBER_CHECK(s <= uint64_t(INT64_MAX), "Checkpoint::load: '", path, "': step ", v,
                  " is out of range");
      ck.step = int64_t(s);
    } else if (k == kRngKey) {
      Json arr;
      EMBER_CHECK(json_nesting_depth(v) <= kMaxJsonDepth, "Checkpoint::load: '", path,
                  "': metadata ", kRngKey, " nests deeper than ", kMaxJsonDepth,
                  " levels; the file is corrupt");
      try {
        arr = Json::parse(v);
      } catch (const Json::exception& e) {  // parse_error, or out_of_range (9E999)
        EMBER_THROW(bad_param, "Checkpoint::load: '", path, "': metadata ", kRngKey,
                    " is not valid JSON: ", e.what());
      }
      EMBER_CHECK(arr.is_array(), "Checkpoint::load: '", path, "': metadata ", kRngKey,
                  " is not a JSON array");
      for (const Json& item : arr) {
        EMBER_CHECK(item.is_object() && item.contains("device") && item["device"].is_string() &&
                        item.contains("seed") && item["seed"].is_string() &&
                        item.contains("offset") && item["offset"].is_string(),
                    "Checkpoint::load: '", path, "': metadata ", kRngKey, " entry ", item.dump(),
                    " needs string fields device, seed and offset");
        ck.rng.push_back(
            RngState{Device(item["device"].get<std::string>()),
                     parse_u64(path, "rng seed", item["seed"].get<std::string>()),
                     parse_u64(path, "rng offset", item["offset"].get<std::string>())});
      }
    } else if (k == kOptimizerKey) {
      ck.optimizer_config = v;
    } else if (k == kSchedulerKey) {
      ck.scheduler = v;
    } else if (k != kFormatKey && k != "format") {
      ck.extra[k] = v;
    }
  }
  return ck;
}

void Checkpoint::restore(Module& model_, optim::Optimizer* optimizer_,
                         optim::LRScheduler* scheduler_, bool strict) const {
  EMBER_CHECK(!strict || !scheduler_ || !scheduler.empty(),
              "Checkpoint::restore: the checkpoint "
              "holds no scheduler state; pass no scheduler, or strict=false to keep its state");
  // Each loader validates everything before it changes anything; the model goes last, and a
  // refusal there puts the optimizer and scheduler back as they were.
  NamedTensors optimizer_before;
  std::string config_before, scheduler_before;
  if (optimizer_) {
    optimizer_before = optimizer_->state_dict();  // a load swaps in new tensors: these stay intact
    config_before = optimizer_->config_json();
  }
  if (scheduler_) scheduler_before = scheduler_->state_json();
  try {
    if (optimizer_) optimizer_->load_state_dict(optimizer, optimizer_config, strict);
    if (scheduler_ && !scheduler.empty()) scheduler_->load_state_json(scheduler);
    model_.load_state_dict(model, strict);
  } catch (...) {
    if (optimizer_) optimizer_->load_state_dict(optimizer_before, config_before, /*strict=*/false);
    if (scheduler_) scheduler_->load_state_json(scheduler_before);
    throw;
  }
  restore_rng_state(rng);
}

}  // namespace ember::nn
