// CUDA graph capture and replay (the runtime layer under nn::GraphedStep). A Graph records the
// work queued on the current stream of one device between capture_begin and capture_end, with
// every allocation made meanwhile (on this thread, on that device) served from a private memory
// pool, and the default generator of the device switched to device-side offsets so each replay
// draws the random numbers the same step run eagerly would (and new ones every replay).
// GraphCapture is the scoped guard: if the captured code throws (a host sync, a forbidden call),
// the guard aborts the capture cleanly and the error propagates.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ember/tensor/device.h"
#include "ember/tensor/runtime/allocator.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::cuda {

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // `pool` 0 makes a new private pool; graphs replayed one after another on one stream may share
  // one (pass the pool() of an earlier graph).
  void capture_begin(Device device, MemPoolId pool = 0);
  void capture_end();
  // Ends a capture that failed; the graph stays empty. Never throws.
  void capture_abort() noexcept;
  void replay();  // on the current stream of the graph's device; no host sync
  void reset() noexcept;

  bool capturing() const { return capturing_; }
  bool captured() const { return exec_ != nullptr; }
  MemPoolId pool() const { return pool_; }
  Device device() const { return device_; }
  Stream stream() const { return stream_; }

 private:
  Device device_ = Device::cuda(0);
  Stream stream_;
  MemPoolId pool_ = 0;
  std::unique_ptr<MemPoolScope> pool_scope_;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  bool capturing_ = false;
  bool generator_capturing_ = false;
  uint64_t rng_increment_ = 0;  // generator offsets one replay consumes
};

// Scoped capture: begins on construction, end() finishes it; leaving the scope without end()
// (an exception) aborts it.
class GraphCapture {
 public:
  GraphCapture(Graph& graph, Device device, MemPoolId pool = 0) : graph_(graph) {
    graph_.capture_begin(device, pool);
  }
  ~GraphCapture() {
    if (graph_.capturing()) graph_.capture_abort();
  }
  void end() { graph_.capture_end(); }
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

 private:
  Graph& graph_;
};

// EMBER_LOG_GRAPHS set (and not "0"): GraphedStep and eager replay log captures, replays and
// evictions to stderr. Read once per process.
bool log_graphs();

// True when the current stream of `device` is being captured (ops use it to refuse host syncs
// with a clear message, and the algorithm cache to skip benchmarking).
bool current_stream_capturing(Device device);

}  // namespace ember::cuda
