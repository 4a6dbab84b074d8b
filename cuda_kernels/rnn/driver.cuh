// Host-side machinery shared by the CUDA rnn algorithms' forward (cuda_kernels/rnn/forward.cu) and
// backward (cuda_kernels/rnn/backward.cu) drivers: the cuBLAS GEMM wrapper, side streams and the
// events that order them, the wavefront's chunking, raw pointers into the problem's tensors and
// the reserve, and the eager-replay key; defined in cuda_kernels/rnn/rnn.cu. Also the drivers'
// entry points, which the algorithms registered in rnn.cu call.
// Include only from cuda_kernels/rnn/*.cu.
#pragma once
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/rnn/rnn.cuh"

namespace ember::cuda::rnn {

template <typename T>
inline cudaDataType_t cuda_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// Row-major C[m, n] = op(A) op(B) + beta * C (op = transpose when t*), A and B of `ab`, C of
// `c_type`, fp32 accumulation (TF32 when `compute` says so). cuBLAS is column-major: computing
// C^T = op(B)^T op(A)^T needs no data movement.
void gemm(cublasHandle_t handle, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A,
          int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc, float beta,
          cudaDataType_t ab, cudaDataType_t c_type, cublasComputeType_t compute);

// Side streams, made once per (thread, device) so that each keeps its one cuBLAS workspace.
Stream side_stream(Device device, int i);

// Events for ordering streams, reused call after call (a wait binds to the record made before
// it, so re-recording later never disturbs waits already enqueued).
class EventPool {
 public:
  void reset() { used_ = 0; }
  cudaEvent_t record(cudaStream_t stream) {
    if (used_ == events_.size()) {
      // Creating an event is not stream work: allowed while another stream is being captured.
      RelaxedCaptureModeGuard relaxed;
      cudaEvent_t e = nullptr;
      EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events_.push_back(e);
    }
    cudaEvent_t e = events_[used_++];
    EMBER_CUDA_CHECK(cudaEventRecord(e, stream));
    return e;
  }

 private:
  std::vector<cudaEvent_t> events_;  // never destroyed: they live as long as the thread's streams
  size_t used_ = 0;
};

// The calling thread's pool of `device`.
EventPool& event_pool(int device);

inline void wait_event(cudaStream_t stream, cudaEvent_t event) {
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0));
}

inline cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }

inline constexpr int kMaxRecurrentStreams = 4;

// What a forward or backward driver sets up first: the persistent kernel's plan (when that
// algorithm was chosen; checked to fit), the caller's stream, the input-projection stream and the
// recurrent streams, one per (layer, direction) up to kMaxRecurrentStreams, or a single one for
// the persistent kernel (concurrent cooperative grids could not all be resident at once); the
// thread's event pool is reset for the call.
struct LaunchSetup {
  PersistentPlan plan;
  Stream main, in;
  std::vector<Stream> rec;
  int64_t directions = 1;
  EventPool* events = nullptr;
  const Stream& rec_of(int64_t layer, int64_t direction) const {
    return rec[size_t((layer * directions + direction) % int64_t(rec.size()))];
  }
};
LaunchSetup launch_setup(const RnnProblem& p, bool persistent, dispatch::Direction direction);

// Steps per wavefront chunk: a unidirectional stack of several layers is cut into about 8 chunks
// of at least 256 GEMM rows each; otherwise one chunk (no wavefront to make).
inline int64_t chunk_steps(const RnnConfig& c, bool wavefront) {
  if (!wavefront || c.num_directions == 2 || c.num_layers == 1) return c.seq_len;
  const int64_t by_count = (c.seq_len + 7) / 8, by_rows = (256 + c.batch - 1) / c.batch;
  return std::min(c.seq_len, std::max(by_count, by_rows));
}

struct StepSlots {
  int64_t t, prev, next;
};
inline StepSlots step_slots(int64_t s, int64_t d, int64_t T) {
  if (d == 0) return {s, s, s + 1};
  return {T - 1 - s, T - s, T - 1 - s};
}

// Raw pointers into the problem's tensors for one dtype.
template <typename T>
struct Pointers {
  const RnnProblem& p;
  RnnReserveLayout layout;
  uint8_t* reserve;
  explicit Pointers(const RnnProblem& problem)
      : p(problem),
        layout(problem.layout()),
        reserve(static_cast<uint8_t*>(problem.reserve.data_ptr())) {}
  template <typename U = T>
  U* region(int64_t offset) const {
    return offset < 0 ? nullptr : reinterpret_cast<U*>(reserve + offset);
  }
  const T* weight(int64_t l, int64_t d, RnnWeightKind kind) const {
    const int64_t i = p.config.weight_index(l, d, kind);
    return i < 0 ? nullptr : static_cast<const T*>(p.weights[size_t(i)].data_ptr());
  }
  T* grad_weight(int64_t l, int64_t d, RnnWeightKind kind) const {
    const int64_t i = p.config.weight_index(l, d, kind);
    return i < 0 ? nullptr : static_cast<T*>(p.grad_weights[size_t(i)].data_ptr());
  }
  // The output of layer l ([T, B, D * Ho]): the op's output for the last layer.
  T* layer_output(int64_t l) const {
    return l + 1 < p.config.num_layers ? region(layout.layers[size_t(l)].output)
                                       : static_cast<T*>(p.output.data_ptr());
  }
  // The input of layer l ([T, B, in_l]).
  const T* layer_input(int64_t l) const {
    if (l == 0) return static_cast<const T*>(p.input.data_ptr());
    return p.dropout_active() ? region(layout.layers[size_t(l - 1)].dropped) : layer_output(l - 1);
  }
  const RnnReserveLayout::LayerDirection& saved(int64_t l, int64_t d) const {
    return layout.layers[size_t(l)].dir[d];
  }
  const int32_t* lengths() const {
    return p.lengths.defined() ? static_cast<const int32_t*>(p.lengths.data_ptr()) : nullptr;
  }
};

inline cublasComputeType_t compute_type(const RnnProblem& p) {
  return p.dtype == DType::f32 && p.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// What the launches of a forward or backward depend on: the sizes, dtype, TF32 flag, algorithm and
// wanted gradients (by value) and the address of every tensor they read or write, temporaries
// included.
std::vector<uint64_t> replay_key(const RnnProblem& p, bool persistent,
                                 std::initializer_list<const std::vector<Tensor>*> temps,
                                 const Tensor& extra);

// ---- the drivers --------------------------------------------------------------------------------

// The forward and backward of both algorithms (persistent: the cooperative kernels of
// cuda_kernels/rnn/persistent.cu for the recurrences, else cuBLAS and the per-step kernels):
// temporaries, then the launches, directly or replayed from a CUDA graph. float32 and bfloat16.
void run_forward(const RnnProblem& p, bool persistent);
void run_backward(const RnnProblem& p, bool persistent);

}  // namespace ember::cuda::rnn
