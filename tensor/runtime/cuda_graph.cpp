// CUDA graph capture/replay with private pools and captured RNG offsets (see cuda_graph.h).
#include "ember/tensor/runtime/cuda_graph.h"

#include <cstdlib>
#include <string>

#include "ember/tensor/error.h"
#include "ember/tensor/runtime/generator.h"
#ifdef EMBER_WITH_CUDA
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_device.h"
#endif

namespace ember::cuda {

bool log_graphs() {
  static const bool on = [] {
    const char* env = std::getenv("EMBER_LOG_GRAPHS");
    return env != nullptr && std::string(env) != "0";
  }();
  return on;
}

#ifdef EMBER_WITH_CUDA

bool current_stream_capturing(Device device) {
  if (!device.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(cudaStream_t(current_stream(device).handle), &status));
  return status == cudaStreamCaptureStatusActive;
}

Graph::~Graph() { reset(); }

void Graph::capture_begin(Device device, MemPoolId pool) {
  EMBER_CHECK(device.is_cuda(), "Graph::capture_begin: graphs capture CUDA work, got ",
              device.str());
  EMBER_CHECK(!capturing_ && !captured(), "Graph::capture_begin: this graph is already ",
              capturing_ ? "capturing" : "captured", "; reset() it or use a new Graph");
  check_device(device);
  device_ = device;
  stream_ = current_stream(device);
  EMBER_CHECK(stream_.handle != nullptr,
              "Graph::capture_begin: the legacy default stream cannot be "
              "captured; make another stream current (StreamGuard)");
  pool_ = pool != 0 ? pool : new_mem_pool_id();
  // The generator needs its device offset before the stream starts capturing.
  default_generator(device).capture_begin();
  generator_capturing_ = true;
  pool_scope_ = std::make_unique<MemPoolScope>(device.index, pool_);
  cudaError_t err =
      cudaStreamBeginCapture(cudaStream_t(stream_.handle), cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    capture_abort();
    EMBER_CUDA_CHECK(err);
  }
  capturing_ = true;
}

void Graph::capture_end() {
  EMBER_CHECK(capturing_, "Graph::capture_end: not capturing");
  // What one replay draws from the generator (each replay starts at the host offset then).
  rng_increment_ = default_generator(device_).capture_end();
  generator_capturing_ = false;
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(cudaStream_t(stream_.handle), &graph);
  capturing_ = false;
  pool_scope_.reset();
  if (err != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    EMBER_THROW(execution_failed, "Graph::capture_end: the capture on ", device_.str(),
                " was invalidated (", cudaGetErrorString(err),
                "): something in the captured code "
                "synchronized with the host or used another stream without an event");
  }
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  EMBER_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  exec_ = exec;
}

void Graph::capture_abort() noexcept {
  if (generator_capturing_) {
    try {
      default_generator(device_).capture_end();
    } catch (...) {
      // The stream is no longer capturing: the generator has already left capture mode.
    }
    generator_capturing_ = false;
  }
  if (capturing_) {
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(cudaStream_t(stream_.handle), &graph);
    if (graph) cudaGraphDestroy(graph);
    capturing_ = false;
  }
  pool_scope_.reset();
  (void)cudaGetLastError();  // a failed call inside the capture leaves its error behind
}

void Graph::replay() {
  EMBER_CHECK(captured(), "Graph::replay: nothing was captured");
  DeviceGuard guard(device_);
  default_generator(device_).begin_replay(rng_increment_);
  EMBER_CUDA_CHECK(
      cudaGraphLaunch(cudaGraphExec_t(exec_), cudaStream_t(current_stream(device_).handle)));
}

void Graph::reset() noexcept {
  if (capturing_) capture_abort();
  if (exec_) cudaGraphExecDestroy(cudaGraphExec_t(exec_));
  if (graph_) cudaGraphDestroy(cudaGraph_t(graph_));
  exec_ = nullptr;
  graph_ = nullptr;
}

#else  // no CUDA backend

bool current_stream_capturing(Device) { return false; }
Graph::~Graph() = default;
void Graph::capture_begin(Device device, MemPoolId) {
  EMBER_THROW(not_supported, "Graph::capture_begin(", device.str(),
              "): this build of Ember has no "
              "CUDA backend; CUDA graphs need one");
}
void Graph::capture_end() { EMBER_THROW(not_supported, "Graph::capture_end: no CUDA backend"); }
void Graph::capture_abort() noexcept {}
void Graph::replay() { EMBER_THROW(not_supported, "Graph::replay: no CUDA backend"); }
void Graph::reset() noexcept {}

#endif

}  // namespace ember::cuda
