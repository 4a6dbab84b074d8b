// CUDA algorithms of the rnn op (kernel_interface/rnn.h), registered here in the slots rnn.forward
// and rnn.backward with their cost models, and the host machinery their drivers share (streams,
// events, the GEMM wrapper, the eager-replay key; declared in cuda_kernels/rnn/driver.cuh).
// The other files of cuda_kernels/rnn/: forward.cu and backward.cu (the drivers), step_kernels.cu
// (the per-step kernels), persistent.cu (the cooperative kernels and their plans), cell.cuh (the
// cell math both kernel kinds share), rnn.cuh (the launchers' declarations).
//
//  "cublas_steps" (forward and backward)
//    forward, per (layer, direction): the input projection gx = X W_ih^T as cuBLAS GEMMs over
//      many steps at once (fp32 output, so bf16 keeps fp32 pre-activations), on an input stream;
//      per step one recurrent GEMM gh = h W_hh^T and one fused pointwise kernel (gates, cell
//      update in fp32, saved values, lengths mask), plus the projection GEMM and a fixup for
//      LSTM with proj_size; each (layer, direction) on its own recurrent stream. Layers overlap
//      as a wavefront: for a unidirectional stack the steps are cut into chunks, and layer l + 1's
//      input GEMM (and dropout) for chunk k runs on the input stream as soon as layer l has
//      finished chunk k (events), while layer l goes on with chunk k + 1. Layer 0's input
//      projection is one GEMM over all steps. Bidirectional stacks run their two directions
//      concurrently, layer after layer.
//    backward, the same structure in reverse time: per step one fused pointwise kernel (gate
//      gradients, cell carry; with a projection a prep kernel and the dr = dh W_hr GEMM first)
//      and one GEMM dh_prev += dG W_hh (fp32 carry); the input gradient dX = dG W_ih per chunk
//      on the input stream (it is the lower layer's output gradient, through dropout's mask, so
//      layers overlap as a wavefront again); after a layer's loop, its weight gradients as large
//      GEMMs over all steps (dW_ih = dG^T X, dW_hh = dG^T H_prev, biases as dG^T 1, dW_hr) on a
//      separate stream, overlapping the layers below.
//  "persistent" (forward and backward): for small batch x hidden, one cooperative kernel per
//    (layer, direction) runs all steps with a grid-wide barrier per step
//    (cuda_kernels/rnn/rnn.cuh). The forward keeps its W_hh rows in shared memory and its cell
//    states on chip; it writes the same reserve, so either backward reads it. The backward keeps
//    W_hh columns in shared memory and the gradient carries on chip, writes the gate gradients of
//    every step, and leaves the input gradient and the weight gradients to the large GEMMs of
//    "cublas_steps" (run layer after layer: one chunk, no wavefront). Its recurrent sums are in a
//    fixed order, so the result is bitwise reproducible.
//
// Every side stream forks from the current stream with an event and joins back into it before
// returning, so all work is ordered with the caller's stream (and captures into a CUDA graph);
// temporaries are allocated on the current stream before the launches and freed after the join.
// Called eagerly again on the same problem (the same buffers, as in steady-state training), a
// forward's or backward's hundreds of launches replay from one CUDA graph
// (tensor/runtime/eager_replay.h: the eager step is otherwise bound by the host's launch rate).
// fp32 and bf16 only; one instantiation per kernel and dtype. Gradients are written, never
// accumulated.
#include <cublas_v2.h>

#include <initializer_list>
#include <vector>

#include "ember/cuda_kernels/blas/blas.h"
#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/rnn/driver.cuh"
#include "ember/cuda_kernels/rnn/rnn.cuh"
#include "ember/dispatch/algorithm.h"

namespace ember::cuda::rnn {

using dispatch::Direction;

// ---- shared driver machinery (cuda_kernels/rnn/driver.cuh) --------------------------------------

void gemm(cublasHandle_t handle, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A,
          int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc, float beta,
          cudaDataType_t ab, cudaDataType_t c_type, cublasComputeType_t compute) {
  const float alpha = 1.0f;
  EMBER_CUBLAS_CHECK(cublasGemmEx(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k), &alpha, B,
                                  ab, int(ldb), A, ab, int(lda), &beta, C, c_type, int(ldc),
                                  compute, CUBLAS_GEMM_DEFAULT));
}

Stream side_stream(Device device, int i) {
  thread_local std::vector<std::vector<Stream>> cache;
  if (cache.size() <= size_t(device.index)) cache.resize(size_t(device.index) + 1);
  std::vector<Stream>& streams = cache[size_t(device.index)];
  while (streams.size() <= size_t(i)) streams.push_back(new_stream(device));
  return streams[size_t(i)];
}

EventPool& event_pool(int device) {
  thread_local std::vector<EventPool> pools;
  if (pools.size() <= size_t(device)) pools.resize(size_t(device) + 1);
  return pools[size_t(device)];
}

LaunchSetup launch_setup(const RnnProblem& p, bool persistent, dispatch::Direction direction) {
  const RnnConfig& c = p.config;
  const Device device = p.device();
  LaunchSetup s;
  if (persistent) {
    s.plan = persistent_plan(c, p.dtype, device.index, direction);
    EMBER_INTERNAL_ASSERT(s.plan.ok,
                          "rnn: the persistent algorithm was chosen for a problem it does not fit");
  }
  s.main = current_stream(device);
  s.in = side_stream(device, 0);
  const int n_rec =
      persistent ? 1
                 : int(std::min<int64_t>(c.num_layers * c.num_directions, kMaxRecurrentStreams));
  for (int i = 0; i < n_rec; ++i) s.rec.push_back(side_stream(device, 1 + i));
  s.directions = c.num_directions;
  s.events = &event_pool(device.index);
  s.events->reset();
  return s;
}

std::vector<uint64_t> replay_key(const RnnProblem& p, bool persistent,
                                 std::initializer_list<const std::vector<Tensor>*> temps,
                                 const Tensor& extra) {
  const RnnConfig& c = p.config;
  std::vector<uint64_t> key = {uint64_t(p.direction),      uint64_t(persistent),
                               uint64_t(c.mode),           uint64_t(c.num_layers),
                               uint64_t(c.num_directions), uint64_t(c.input_size),
                               uint64_t(c.hidden_size),    uint64_t(c.proj_size),
                               uint64_t(c.bias),           uint64_t(c.seq_len),
                               uint64_t(c.batch),          uint64_t(p.dtype),
                               uint64_t(p.allow_tf32),     uint64_t(p.need_weight_grads),
                               uint64_t(p.device().index)};
  auto add = [&](const Tensor& t) {
    key.push_back(t.defined() ? uint64_t(uintptr_t(t.data_ptr())) : 0);
  };
  for (const Tensor* t :
       {&p.input, &p.h0, &p.c0, &p.lengths, &p.reserve, &p.output, &p.h_n, &p.c_n, &p.grad_output,
        &p.grad_h_n, &p.grad_c_n, &p.grad_input, &p.grad_h0, &p.grad_c0})
    add(*t);
  for (const Tensor& t : p.weights) add(t);
  for (const Tensor& t : p.grad_weights) add(t);
  for (const std::vector<Tensor>* v : temps)
    for (const Tensor& t : *v) add(t);
  add(extra);
  return key;
}

// ---- the algorithms -----------------------------------------------------------------------------

namespace {

bool supported(const RnnProblem& p) {
  return p.device().is_cuda() && (p.dtype == DType::f32 || p.dtype == DType::bf16);
}

// Time model in microseconds (the heuristic's ranking; benchmark mode measures instead), fitted
// to forced timings of bench/rnn.cpp (LSTM shapes from small to 512->1024; numbers in
// docs/perf-notes.md):
//   cuBLAS per step: a fixed cost per launch (two, four with a projection) plus the recurrent GEMM
//     at tensor-core throughput; the backward costs about 1.5x the forward.
//   persistent forward per step: a grid barrier, the block's multiply-adds (they stream W_hh and h
//     from shared memory in fp32 whatever the dtype, so f32 and bf16 time alike), and staging the
//     whole h (B x H) each step; so it rarely beats cuBLAS.
//   persistent backward per step: the barrier, multiply-adds in 4 x 4 register tiles (faster than
//     the forward's), and staging the group's dG rows from L2; it wins on small shapes only.
double recurrent_flops(const RnnProblem& p) {
  const RnnConfig& c = p.config;
  return 2.0 * double(c.batch) * double(c.gates() * c.hidden_size) * double(c.out_size());
}
double cublas_cost_us(const RnnProblem& p) {
  const RnnConfig& c = p.config;
  const double launches = c.proj_size > 0 ? 4 : 2;
  const double per_step = launches * 5.0 + recurrent_flops(p) / 120e6;
  const double steps = double(c.seq_len) * c.num_layers * c.num_directions;
  return steps * per_step * (p.direction == Direction::forward ? 1.0 : 1.5);
}
double persistent_cost_us(const RnnProblem& p) {
  const RnnConfig& c = p.config;
  const PersistentPlan plan = persistent_plan(c, p.dtype, p.device().index, p.direction);
  const double es = double(element_size(p.dtype));
  constexpr double kBarrierUs = 3.5;
  double per_step;
  if (p.direction == Direction::forward) {
    const double macs = double(c.batch) * c.gates() * plan.units_per_block * c.hidden_size;
    per_step = kBarrierUs + macs / 29.3e3 + double(c.batch) * c.hidden_size / 1.02e3;
  } else {
    const double row_bytes = double(c.gates() * c.hidden_size) * es;
    const double macs =
        double(plan.rows_per_group) * plan.units_per_block * c.gates() * c.hidden_size;
    per_step = kBarrierUs + macs / 71.2e3 + plan.rows_per_group * row_bytes / 14.6e3;
  }
  return double(c.seq_len) * c.num_layers * c.num_directions * per_step;
}

dispatch::Algorithm<RnnProblem> cublas_steps_algorithm() {
  dispatch::Algorithm<RnnProblem> a;
  a.name = "cublas_steps";
  a.deterministic = true;
  a.applies = &supported;
  a.heuristic_cost = &cublas_cost_us;
  a.run = [](const RnnProblem& p, void*) {
    if (p.direction == Direction::forward)
      run_forward(p, false);
    else
      run_backward(p, false);
  };
  return a;
}

dispatch::Algorithm<RnnProblem> persistent_algorithm() {
  dispatch::Algorithm<RnnProblem> a;
  a.name = "persistent";
  a.deterministic = true;
  a.applies = [](const RnnProblem& p) {
    return supported(p) && persistent_plan(p.config, p.dtype, p.device().index, p.direction).ok;
  };
  a.heuristic_cost = &persistent_cost_us;
  a.run = [](const RnnProblem& p, void*) {
    if (p.direction == Direction::forward)
      run_forward(p, true);
    else
      run_backward(p, true);
  };
  return a;
}

}  // namespace

}  // namespace ember::cuda::rnn

namespace ember {
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", forward, CUDA, cuda::rnn::cublas_steps_algorithm());
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", backward, CUDA, cuda::rnn::cublas_steps_algorithm());
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", forward, CUDA, cuda::rnn::persistent_algorithm());
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", backward, CUDA, cuda::rnn::persistent_algorithm());
}  // namespace ember
