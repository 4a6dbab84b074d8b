// AlgoCache persistence: the stamp a saved file is valid for, the JSON form of keys and entries
// (nlohmann-json), atomic saves, tolerant loads (a bad file is a warning, never a crash), and the
// process-wide cache with its EMBER_ALGO_CACHE load-at-first-use / save-at-exit.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "ember/dispatch/algo_cache_impl.h"
#include "ember/tensor/json_depth.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/version.h"

namespace ember::dispatch {

using nlohmann::json;

namespace {
constexpr const char* kFormatName = "ember-algo-cache";
constexpr int kFormatVersion = 1;

std::string read_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "unknown";
}

AlgoCacheStamp compute_stamp() {
  AlgoCacheStamp s;
  s.ember_version = version_string();
  s.gpu_name = "none";
  if (cuda::is_available()) {
    const cuda::DeviceProperties& p = cuda::device_properties(0);
    s.gpu_name = p.name;
    s.cc_major = p.major;
    s.cc_minor = p.minor;
    s.cuda_runtime_version = p.runtime_version;
    s.cuda_driver_version = p.driver_version;
  }
  s.cpu_model = read_cpu_model();
  return s;
}

json stamp_to_json(const AlgoCacheStamp& s) {
  return json{{"ember_version", s.ember_version},
              {"gpu_name", s.gpu_name},
              {"compute_capability", {s.cc_major, s.cc_minor}},
              {"cuda_runtime_version", s.cuda_runtime_version},
              {"cuda_driver_version", s.cuda_driver_version},
              {"cpu_model", s.cpu_model}};
}

// An integer JSON value in [lo, hi] (hi >= 0). Floats (2.5, 1e300), booleans and numbers out of
// range are rejected, never truncated or wrapped: a file holding them is corrupt.
int64_t strict_int(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  const bool in_range = v.is_number_unsigned()  ? v.get<uint64_t>() <= uint64_t(hi)
                        : v.is_number_integer() ? v.get<int64_t>() >= lo && v.get<int64_t>() <= hi
                                                : false;
  if (!in_range)
    throw std::runtime_error("'" + field + "' holds " + v.dump() + ", not an integer in [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.get<int64_t>();
}

AlgoCacheStamp stamp_from_json(const json& j) {
  AlgoCacheStamp s;
  s.ember_version = j.at("ember_version").get<std::string>();
  s.gpu_name = j.at("gpu_name").get<std::string>();
  const json& cc = j.at("compute_capability");
  if (!cc.is_array() || cc.size() != 2)
    throw std::runtime_error("compute_capability is not [major, minor]");
  s.cc_major = int(strict_int(cc[0], "compute_capability", 0, 255));
  s.cc_minor = int(strict_int(cc[1], "compute_capability", 0, 255));
  s.cuda_runtime_version = int(strict_int(j.at("cuda_runtime_version"), "cuda_runtime_version", 0,
                                          std::numeric_limits<int32_t>::max()));
  s.cuda_driver_version = int(strict_int(j.at("cuda_driver_version"), "cuda_driver_version", 0,
                                         std::numeric_limits<int32_t>::max()));
  s.cpu_model = j.at("cpu_model").get<std::string>();
  return s;
}

std::string describe_stamp(const AlgoCacheStamp& s) {
  std::ostringstream os;
  os << "GPU '" << s.gpu_name << "' (cc " << s.cc_major << "." << s.cc_minor << ", CUDA runtime "
     << s.cuda_runtime_version << ", driver " << s.cuda_driver_version << "), Ember "
     << s.ember_version << ", CPU '" << s.cpu_model << "'";
  return os.str();
}

OperandLayout layout_from_name(const std::string& name) {
  for (OperandLayout l :
       {OperandLayout::contiguous, OperandLayout::channels_last, OperandLayout::strided})
    if (name == operand_layout_name(l)) return l;
  throw std::runtime_error("unknown operand layout '" + name + "'");
}

template <typename Int>
json int_array(const Int* v, int n) {
  return json(std::vector<int64_t>(v, v + n));
}

// Reads n integers into a key field, each of which must fit the field's type (a file never holds
// an oversize key: those are not cached).
template <typename Int>
void read_int_array(const json& j, const char* field, Int* out, int n) {
  const json& a = j.at(field);
  if (!a.is_array() || int(a.size()) != n)
    throw std::runtime_error(std::string("key field '") + field + "' is not an array of " +
                             std::to_string(n) + " integers");
  for (int i = 0; i < n; ++i)
    out[i] = Int(strict_int(a[i], std::string("key field ") + field,
                            std::numeric_limits<Int>::min(), std::numeric_limits<Int>::max()));
}

json key_to_json(const AlgoKey& k) {
  return json{
      {"op", op_name(k.op)},
      {"direction", direction_name(Direction(k.direction))},
      {"device", device_type_name(DeviceType(k.device_type))},
      {"rank", k.rank},
      {"dtypes",
       {dtype_name(DType(k.input_dtype)), dtype_name(DType(k.weight_dtype)),
        dtype_name(DType(k.output_dtype))}},
      {"layouts",
       {operand_layout_name(OperandLayout(k.input_layout)),
        operand_layout_name(OperandLayout(k.weight_layout)),
        operand_layout_name(OperandLayout(k.output_layout))}},
      {"alignment", k.alignment_bytes},
      {"allow_tf32", bool(k.allow_tf32)},
      {"deterministic", bool(k.deterministic)},
      {"workspace_bucket", k.workspace_bucket},
      {"compute_capability", {k.cc_major, k.cc_minor}},
      {"sm_count", k.sm_count},
      {"input", int_array(k.input_sizes, AlgoKey::kMaxDims)},
      {"weight", int_array(k.weight_sizes, AlgoKey::kMaxDims)},
      {"output", int_array(k.output_sizes, AlgoKey::kMaxDims)},
      {"stride", int_array(k.stride, AlgoKey::kMaxSpatialDims)},
      {"padding", int_array(k.padding, AlgoKey::kMaxSpatialDims)},
      {"dilation", int_array(k.dilation, AlgoKey::kMaxSpatialDims)},
      {"groups", k.groups},
      {"extra", int_array(k.extra, AlgoKey::kNumExtra)},
  };
}

template <typename T>
T small_int(const json& j, const char* field, int64_t max) {
  return T(strict_int(j.at(field), std::string("key field ") + field, 0, max));
}

// Throws (std::exception) for any malformed field; the caller turns that into "corrupt file".
// Returns nothing for an op this process has never heard of (its entry is skipped).
std::optional<AlgoKey> key_from_json(const json& j) {
  AlgoKey k;
  std::optional<OpId> op = find_op_id(j.at("op").get<std::string>());
  k.direction = uint8_t(direction_from_name(j.at("direction").get<std::string>()));
  std::string device = j.at("device").get<std::string>();
  if (device != "cpu" && device != "cuda")
    throw std::runtime_error("unknown device '" + device + "'");
  k.device_type = uint8_t(device == "cuda" ? DeviceType::CUDA : DeviceType::CPU);
  k.rank = small_int<uint8_t>(j, "rank", AlgoKey::kMaxDims);
  const json& dtypes = j.at("dtypes");
  const json& layouts = j.at("layouts");
  if (!dtypes.is_array() || dtypes.size() != 3 || !layouts.is_array() || layouts.size() != 3)
    throw std::runtime_error("dtypes/layouts are not arrays of 3 names");
  k.input_dtype = uint8_t(dtype_from_name(dtypes[0].get<std::string>()));
  k.weight_dtype = uint8_t(dtype_from_name(dtypes[1].get<std::string>()));
  k.output_dtype = uint8_t(dtype_from_name(dtypes[2].get<std::string>()));
  k.input_layout = uint8_t(layout_from_name(layouts[0].get<std::string>()));
  k.weight_layout = uint8_t(layout_from_name(layouts[1].get<std::string>()));
  k.output_layout = uint8_t(layout_from_name(layouts[2].get<std::string>()));
  k.alignment_bytes = small_int<uint8_t>(j, "alignment", 16);
  k.allow_tf32 = j.at("allow_tf32").get<bool>();
  k.deterministic = j.at("deterministic").get<bool>();
  k.workspace_bucket = small_int<uint8_t>(j, "workspace_bucket", 255);
  const json& cc = j.at("compute_capability");
  if (!cc.is_array() || cc.size() != 2)
    throw std::runtime_error("compute_capability is not [major, minor]");
  k.cc_major = uint8_t(strict_int(cc[0], "key field compute_capability", 0, 255));
  k.cc_minor = uint8_t(strict_int(cc[1], "key field compute_capability", 0, 255));
  k.sm_count = small_int<uint16_t>(j, "sm_count", 65535);
  read_int_array(j, "input", k.input_sizes, AlgoKey::kMaxDims);
  read_int_array(j, "weight", k.weight_sizes, AlgoKey::kMaxDims);
  read_int_array(j, "output", k.output_sizes, AlgoKey::kMaxDims);
  read_int_array(j, "stride", k.stride, AlgoKey::kMaxSpatialDims);
  read_int_array(j, "padding", k.padding, AlgoKey::kMaxSpatialDims);
  read_int_array(j, "dilation", k.dilation, AlgoKey::kMaxSpatialDims);
  k.groups = int32_t(
      strict_int(j.at("groups"), "key field groups", 0, std::numeric_limits<int32_t>::max()));
  read_int_array(j, "extra", k.extra, AlgoKey::kNumExtra);
  if (!op) return std::nullopt;
  k.op = *op;
  return k;
}

// Writes `text` to `path` so that readers see the old file or the new one, never a mix: a temp
// file in the same folder (same filesystem, so rename is atomic), fsync, rename, fsync the folder.
void write_file_atomically(const std::string& path, const std::string& text) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  static std::atomic<uint64_t> counter{0};
  std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  auto fail = [&](const char* what) {
    int err = errno;
    ::unlink(tmp.c_str());
    EMBER_THROW(execution_failed, "algorithm cache: cannot save '", path, "' (", what, " '", tmp,
                "': ", std::strerror(err), "); check that the folder exists and is writable");
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open");
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      fail("write");
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("fsync");
  }
  if (::close(fd) != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: the rename is durable once the folder is
    ::close(dfd);
  }
}
// The format version of the cache file at `path` when a newer Ember wrote it (this one must not
// overwrite it: that Ember's timings would be lost), else 0.
int64_t newer_format_version(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  if (json_nesting_depth(text) > kMaxJsonDepth) return 0;
  try {
    const json doc = json::parse(text);
    if (!doc.is_object() || doc.value("format", std::string()) != kFormatName) return 0;
    const json& v = doc.at("format_version");
    if (v.is_number_unsigned())  // beyond int64: certainly newer
      return v.get<uint64_t>() > uint64_t(kFormatVersion) ? 1 + kFormatVersion : 0;
    if (v.is_number_integer() && v.get<int64_t>() > kFormatVersion) return v.get<int64_t>();
  } catch (const std::exception&) {
  }
  return 0;
}
}  // namespace

AlgoCacheStamp current_algo_cache_stamp() {
  static const AlgoCacheStamp stamp = compute_stamp();
  return stamp;
}

void AlgoCache::save(const std::string& path) const {
  struct Row {
    std::string sort_key;
    json entry;
  };
  std::vector<Row> rows;
  for (const CacheShard& shard : impl_->shards) {
    std::shared_lock<SharedSpinLock> lock(shard.mutex);
    for (const auto& [stored, e] : shard.map) {
      // Only timed choices are worth a file: heuristic ones are cheap to remake and may improve
      // with the code, nearest ones are guesses.
      if (e.source != ChoiceSource::benchmark) continue;
      const AlgoSlot& slot = slot_of(stored.key);
      if (e.algorithm < 0 || e.algorithm >= slot.size()) continue;
      json entry{{"key", key_to_json(stored.key)},
                 {"algorithm", slot.algorithm_name(e.algorithm)},
                 {"time_ms", e.time_ms}};
      rows.push_back({stored.key.to_string(), std::move(entry)});
    }
  }
  // Sorted, so that saving the same cache twice gives the same bytes.
  std::sort(rows.begin(), rows.end(),
            [](const Row& a, const Row& b) { return a.sort_key < b.sort_key; });
  json entries = json::array();
  for (Row& r : rows) entries.push_back(std::move(r.entry));
  if (const int64_t newer = newer_format_version(path); newer > 0)
    EMBER_THROW(not_supported, "algorithm cache: not saving to '", path, "': it has format ",
                "version ", newer, ", newer than this Ember's ", kFormatVersion, ", and a newer ",
                "Ember's file is never overwritten; point EMBER_ALGO_CACHE at another file or ",
                "upgrade Ember");
  json doc{{"format", kFormatName},
           {"format_version", kFormatVersion},
           {"stamp", stamp_to_json(current_algo_cache_stamp())},
           {"entries", std::move(entries)}};
  write_file_atomically(path, doc.dump(1) + "\n");
  impl_->dirty = false;
}

AlgoCacheLoadResult AlgoCache::load(const std::string& path) {
  AlgoCacheLoadResult result;
  auto reject = [&](const std::string& why) {
    result.warning = "ignoring algorithm cache file '" + path + "': " + why;
    algo_warn(result.warning);
    return result;
  };

  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // Not an error: the first run with EMBER_ALGO_CACHE creates the file at exit.
    result.warning = "algorithm cache file '" + path + "' does not exist yet";
    return result;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();

  if (json_nesting_depth(text) > kMaxJsonDepth)
    return reject("it nests JSON deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels, so it is corrupt or hostile; it will be rewritten when this process "
                  "saves");
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 9E999
    return reject(std::string("it is corrupt or truncated (") + e.what() +
                  "); it will be rewritten when this process saves");
  }

  AlgoCacheStamp file_stamp;
  std::vector<std::pair<std::optional<AlgoKey>, json>> parsed;
  try {
    if (!doc.is_object() || doc.value("format", std::string()) != kFormatName)
      return reject("it is not an Ember algorithm cache (no \"format\": \"ember-algo-cache\")");
    const int64_t version = strict_int(doc.at("format_version"), "format_version", 0,
                                       std::numeric_limits<int64_t>::max());
    if (version != kFormatVersion)
      return reject(
          "it has format version " + std::to_string(version) + ", this Ember reads " +
          std::to_string(kFormatVersion) +
          (version > kFormatVersion ? " (it is kept: this process will not overwrite it)" : ""));
    file_stamp = stamp_from_json(doc.at("stamp"));
    const json& entries = doc.at("entries");
    if (!entries.is_array()) throw std::runtime_error("\"entries\" is not an array");
    for (const json& e : entries) {
      std::optional<AlgoKey> key = key_from_json(e.at("key"));
      e.at("algorithm").get<std::string>();
      const json& t = e.at("time_ms");
      if (!t.is_number() || !(t.get<double>() >= 0) || t.get<double>() > double(FLT_MAX))
        throw std::runtime_error("'time_ms' holds " + t.dump() + ", not a time in milliseconds");
      parsed.emplace_back(key, e);
    }
  } catch (const std::exception& e) {
    return reject(std::string("it is corrupt (") + e.what() +
                  "); it will be rewritten when this process saves");
  }

  AlgoCacheStamp mine = current_algo_cache_stamp();
  if (!(file_stamp == mine))
    return reject("it was written for " + describe_stamp(file_stamp) + "; this process has " +
                  describe_stamp(mine) +
                  ". Its timings do not carry over; keys are re-benchmarked");

  for (const auto& [maybe_key, e] : parsed) {
    if (!maybe_key) {  // an op this build (or this point of startup) lacks
      ++result.skipped;
      continue;
    }
    const AlgoKey& key = *maybe_key;
    const AlgoSlot& slot = slot_of(key);
    int algorithm = slot.find(e.at("algorithm").get<std::string>());
    if (algorithm < 0) {  // an algorithm this build lacks
      ++result.skipped;
      continue;
    }
    uint64_t hash = key.hash();
    {
      // A choice measured in this process wins over the file's.
      const CacheShard& shard = impl_->shard_of(hash);
      std::shared_lock<SharedSpinLock> lock(shard.mutex);
      auto it = shard.map.find(KeyRef{&key, hash});
      if (it != shard.map.end() && it->second.source == ChoiceSource::benchmark) continue;
    }
    impl_->insert(key, hash, algorithm, ChoiceSource::benchmark,
                  float(e.at("time_ms").get<double>()),
                  /*from_file=*/true);
    impl_->remember_benchmarked(slot.index(), key, algorithm);
    ++result.entries;
  }
  impl_->loaded_entries.fetch_add(result.entries, std::memory_order_relaxed);
  result.loaded = true;
  if (result.skipped > 0)
    result.warning = "algorithm cache file '" + path + "': " + std::to_string(result.skipped) +
                     " entries name ops or algorithms this process does not have; skipped";
  if (algo_log_enabled())
    algo_log("loaded " + std::to_string(result.entries) + " entries from '" + path + "'" +
             (result.skipped ? " (" + std::to_string(result.skipped) + " skipped)" : ""));
  return result;
}

// ---- the process-wide cache -------------------------------------------------------------------

namespace {
struct PersistState {
  std::mutex mutex;
  std::string path;
  bool atexit_registered = false;
};
PersistState& persist_state() {
  static PersistState* s = new PersistState();  // leaked: read by the atexit handler
  return *s;
}

// Runs at exit: must not throw, and everything it touches is leaked, never destroyed.
void save_at_exit() noexcept {
  std::string path;
  try {
    {
      PersistState& s = persist_state();
      std::lock_guard<std::mutex> lock(s.mutex);
      path = s.path;
    }
    AlgoCache& cache = algo_cache();
    if (!path.empty() && cache.dirty()) cache.save(path);
  } catch (const std::exception& e) {
    algo_warn("could not save the algorithm cache to '" + path + "' at exit: " + e.what());
  } catch (...) {
    algo_warn("could not save the algorithm cache to '" + path + "' at exit");
  }
}

AlgoCacheLoadResult attach(AlgoCache& cache, const std::string& path) {
  current_algo_cache_stamp();  // computed now, while CUDA is up, not during exit
  PersistState& s = persist_state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.path = path;
    if (!s.atexit_registered) {
      std::atexit(save_at_exit);
      s.atexit_registered = true;
    }
  }
  return cache.load(path);
}
}  // namespace

AlgoCache& algo_cache() {
  static AlgoCache* cache = [] {
    auto* c = new AlgoCache();  // leaked: ops may run from static destructors
    if (const char* path = std::getenv("EMBER_ALGO_CACHE"); path && *path) attach(*c, path);
    return c;
  }();
  return *cache;
}

AlgoCacheLoadResult persist_algo_cache_to(const std::string& path) {
  EMBER_CHECK(!path.empty(), "persist_algo_cache_to: the path is empty");
  return attach(algo_cache(), path);
}

}  // namespace ember::dispatch
