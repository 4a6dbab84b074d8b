// Eager replay (see eager_replay.h): a per-thread LRU of (key, graph) entries.
#include "ember/tensor/runtime/eager_replay.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <string>

#include "ember/tensor/error.h"
#include "ember/tensor/runtime/cuda_graph.h"
#include "ember/tensor/runtime/stream.h"
#ifdef EMBER_WITH_CUDA
#include "ember/tensor/runtime/cuda_check.h"
#endif

namespace ember::cuda {
namespace {

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag = [] {
    const char* env = std::getenv("EMBER_EAGER_REPLAY");
    return !(env && std::string(env) == "0");
  }();
  return flag;
}

std::atomic<int64_t> g_direct{0}, g_captures{0}, g_replays{0}, g_failures{0};

thread_local int64_t t_setup_events = 0;  // keys recorded or captured on this thread

}  // namespace

int64_t eager_replay_setup_events() { return t_setup_events; }

void set_eager_replay(bool enabled) { enabled_flag().store(enabled); }
bool eager_replay_enabled() { return enabled_flag().load(); }

EagerReplayStats eager_replay_stats() {
  return {g_direct.load(), g_captures.load(), g_replays.load(), g_failures.load()};
}

#ifdef EMBER_WITH_CUDA

namespace {

constexpr size_t kMaxEntries = 8;

struct Entry {
  std::vector<uint64_t> key;
  cudaGraphExec_t exec = nullptr;  // null: seen once, or its capture failed
  bool failed = false;
};

// One thread's graphs and capture streams. Never destroyed with live graphs at exit: destroying
// graph executables during static destruction races the CUDA runtime's own teardown.
struct ThreadReplays {
  std::list<Entry> entries;                   // most recently used first
  std::vector<cudaStream_t> capture_streams;  // by device index

  cudaStream_t capture_stream(int device) {
    if (capture_streams.size() <= size_t(device))
      capture_streams.resize(size_t(device) + 1, nullptr);
    cudaStream_t& s = capture_streams[size_t(device)];
    // Private to this thread: a stream shared with another thread could have that thread's work
    // recorded into this capture.
    if (s == nullptr) EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
};

ThreadReplays& thread_replays() {
  thread_local ThreadReplays* replays = new ThreadReplays();
  return *replays;
}

void log_line(const char* what, const Entry& e, const char* detail = "") {
  if (!log_graphs()) return;
  std::fprintf(stderr,
               "[ember graphs] eager replay: %s (key of %zu words, %zu cached on this thread)%s\n",
               what, e.key.size(), thread_replays().entries.size(), detail);
}

// Captures `launch` on this thread's capture stream; null when the capture failed. Not through
// cuda::Graph (tensor/runtime/cuda_graph.h): its capture switches the device's default generator to
// capture offsets for the duration (another thread's eager draws would get them) and opens a
// private memory pool per graph, neither of which a capture of a few keyed launches needs.
cudaGraphExec_t capture(Device device, const std::function<void()>& launch, std::string& why) {
  const cudaStream_t stream = thread_replays().capture_stream(device.index);
  EMBER_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    StreamGuard on_capture(Stream{device, stream});
    launch();
  } catch (const std::exception& e) {
    why = e.what();
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return nullptr;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (end != cudaSuccess || graph == nullptr) {
    why = std::string("the capture was invalidated: ") + cudaGetErrorString(end);
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
    (void)cudaGetLastError();
    return nullptr;
  }
  return exec;
}

}  // namespace

void clear_eager_replay() {
  std::list<Entry>& entries = thread_replays().entries;
  for (Entry& e : entries)
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  entries.clear();
}

void eager_replay(Device device, const std::vector<uint64_t>& key,
                  const std::function<void()>& launch) {
  const auto direct = [&] {
    ++g_direct;
    launch();
  };
  if (!device.is_cuda() || !eager_replay_enabled() || current_stream_capturing(device))
    return direct();
  const cudaStream_t caller = static_cast<cudaStream_t>(current_stream(device).handle);
  if (caller == nullptr) return direct();  // the legacy default stream: graphs launch elsewhere

  ThreadReplays& replays = thread_replays();
  std::list<Entry>& entries = replays.entries;
  auto it = entries.begin();
  while (it != entries.end() && it->key != key) ++it;
  if (it == entries.end()) {
    // First sighting: remember the key, run directly.
    ++t_setup_events;
    entries.push_front(Entry{key});
    if (entries.size() > kMaxEntries) {
      if (entries.back().exec != nullptr) {
        log_line("evicted the least recently used graph", entries.back());
        cudaGraphExecDestroy(entries.back().exec);
      }
      entries.pop_back();
    }
    return direct();
  }
  entries.splice(entries.begin(), entries, it);  // most recently used
  Entry& e = entries.front();
  if (e.failed) return direct();
  if (e.exec == nullptr) {
    ++t_setup_events;
    std::string why;
    e.exec = capture(device, launch, why);
    if (e.exec == nullptr) {
      e.failed = true;
      ++g_failures;
      log_line("capture failed, this problem runs directly from now on", e, (": " + why).c_str());
      return direct();
    }
    ++g_captures;
    log_line("captured", e);
  }
  ++g_replays;
  EMBER_CUDA_CHECK(cudaGraphLaunch(e.exec, caller));
}

#else  // no CUDA backend

void clear_eager_replay() {}

void eager_replay(Device, const std::vector<uint64_t>&, const std::function<void()>& launch) {
  ++g_direct;
  launch();
}

#endif

}  // namespace ember::cuda
