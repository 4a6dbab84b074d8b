// The face of the CUDA rnn family: launchers of the kernels behind the rnn op's algorithms
// (registered in cuda_kernels/rnn/rnn.cu): the fused per-step pointwise kernels (forward and
// backward), the projection helpers, dropout between layers and state conversions
// (cuda_kernels/rnn/step_kernels.cu), and the persistent recurrent kernels, forward and backward
// (cuda_kernels/rnn/persistent.cu). T is the device element type (float or __nv_bfloat16);
// pre-activations, cell states and gradient carries are float32.
// Row-major shapes are given on every pointer; B = batch, H = hidden_size, Ho = output size
// (proj_size or H), P = proj_size, G = gates per unit, S = saved gate values per unit.
// Include only from .cu files.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ember/kernel_interface/random.h"
#include "ember/kernel_interface/rnn.h"

namespace ember::cuda::rnn {

// One forward step at time t: gates from both projections and the biases, the cell update, the
// saved values, the lengths mask. Rows with t >= lengths[b] copy the state through (h, c) and
// write zero output and zero saved values.
template <typename T>
struct StepForwardArgs {
  RnnMode mode = RnnMode::lstm;
  int B = 0, H = 0, G = 1, S = 0;
  const float* gx = nullptr;      // [B, G * H] input projection of step t
  const float* gh = nullptr;      // [B, G * H] recurrent projection of step t
  const T* b_ih = nullptr;        // [G * H] or null
  const T* b_hh = nullptr;        // [G * H] or null
  const float* c_prev = nullptr;  // [B, H] (LSTM)
  float* c_next = nullptr;        // [B, H] (LSTM)
  const T* h_prev = nullptr;      // [B, H] (without projection Ho = H)
  T* h_next = nullptr;            // [B, H]; null with a projection (its GEMM writes the state)
  T* y = nullptr;                 // output row b at y + b * ldy; null with a projection
  int64_t ldy = 0;
  T* gates = nullptr;                // [B, S * H] saved for backward (LSTM, GRU)
  T* proj_in = nullptr;              // [B, H] LSTM with projection: o * tanh(c)
  const int32_t* lengths = nullptr;  // [B] or null
  int t = 0;
};
template <typename T>
void step_forward(const StepForwardArgs<T>& a, cudaStream_t stream);

// After the projection GEMM wrote h_next [B, P] for every row: rows past their length get
// h_prev back; the output rows (y + b * ldy) get h_next, or zero past the length.
template <typename T>
void proj_fixup(T* h_next, const T* h_prev, T* y, int64_t ldy, int B, int P, const int32_t* lengths,
                int t, cudaStream_t stream);

// One backward step at time t: the gate gradients dgx (w.r.t. the input-side pre-activations) and
// dgh (w.r.t. the hidden-side ones; the same buffer except for GRU), the cell carry, and the
// part of the hidden carry that does not flow through W_hh. Rows past their length write zero
// gate gradients and leave both carries untouched (the state was copied through).
template <typename T>
struct StepBackwardArgs {
  RnnMode mode = RnnMode::lstm;
  int B = 0, H = 0, G = 1, S = 0;
  const T* gates = nullptr;       // [B, S * H] saved at step t
  const float* c_prev = nullptr;  // [B, H] (LSTM)
  const float* c_next = nullptr;  // [B, H] (LSTM)
  const T* h_prev = nullptr;      // [B, H] (GRU)
  const T* h_next = nullptr;      // [B, H] (RNN: the activation output)
  // With a projection: the gradient w.r.t. o * tanh(c), [B, H] (dh_carry is then not touched).
  // Without: null, and the step's hidden gradient is dh_carry + dy.
  const float* dr = nullptr;
  float* dh_carry = nullptr;  // [B, H] in: d/dh of the state after the step; out: the
                              // direct part of d/dh_prev (zero, or z * dh for GRU)
  const T* dy = nullptr;      // output gradient row b at dy + b * ldy, or null (zero)
  int64_t ldy = 0;
  float* dc_carry = nullptr;  // [B, H] in/out (LSTM)
  T* dgx = nullptr;           // [B, G * H]
  T* dgh = nullptr;           // [B, G * H]
  const int32_t* lengths = nullptr;
  int t = 0;
};
template <typename T>
void step_backward(const StepBackwardArgs<T>& a, cudaStream_t stream);

// Projection backward, before the step: dh_total [B, P] = dh_carry + dy (zero past the length),
// and dh_carry keeps only the pass-through of rows past their length.
template <typename T>
void proj_backward_prep(float* dh_carry, const T* dy, int64_t ldy, T* dh_total, int B, int P,
                        const int32_t* lengths, int t, cudaStream_t stream);

// Dropout between layers on elements [begin, end) of the dense layer output y: element i keeps
// when lane i % 4 of the Philox uniforms of subsequence i / 4 (at `random`'s seed and offset) is
// below 1 - p, exactly as ember::dropout draws it; dropped = kept ? y / (1 - p) : 0.
template <typename T>
void dropout_forward(const T* y, T* dropped, bool* mask, int64_t begin, int64_t end, double p,
                     const RandomParams& random, cudaStream_t stream);
// g[i] = mask[i] ? g[i] / (1 - p) : 0 on elements [begin, end), in place.
template <typename T>
void dropout_backward(T* g, const bool* mask, int64_t begin, int64_t end, double p,
                      cudaStream_t stream);

// dst[i] = src[i] converted (src null: zero), n elements.
template <typename To, typename From>
void convert_elements(To* dst, const From* src, int64_t n, cudaStream_t stream);
// dst[i] = value, n elements.
template <typename T>
void fill_elements(T* dst, float value, int64_t n, cudaStream_t stream);

// ---- persistent kernels ------------------------------------------------------------------------
// The whole recurrence of one (layer, direction) in one cooperative launch, with a grid-wide
// barrier per step. No projection.
//  forward: each block keeps the W_hh rows of its hidden units in shared memory for all steps,
//    reads the previous hidden state of the whole batch from L2 after the barrier, computes its
//    units' gates (including the precomputed input projection gx and the biases), keeps their
//    cell states on chip, and writes the same saved values, states and outputs as the per-step
//    algorithm.
//  backward: each block owns the hidden units [j0, j0 + U) of one group of batch rows. Per step
//    (reverse time) it computes the gate gradients of its (row, unit) pairs from the saved values
//    (the per-step kernel's math) and writes them, with the hidden and cell gradient carries kept
//    on chip in fp32; after the barrier it reads the step's dG rows of its batch group from L2 and
//    adds dG W_hh[:, j0 : j0 + U) (those W_hh columns resident in shared memory) to its hidden
//    carry, in a fixed order (no atomics: bitwise reproducible). The owner of a carry element is
//    its only reader and writer, so the carries never leave the chip.
struct PersistentPlan {
  bool ok = false;
  int units_per_block = 0;  // hidden units each block owns
  int batch_groups = 1;     // backward: groups of batch rows, each with its own blocks
  int rows_per_group = 0;   // batch rows of a group (the last group may have fewer)
  int blocks = 0;           // grid size (co-resident: blocks <= resident limit)
  int batch_tile = 0;       // batch rows staged in shared memory at a time
  size_t smem_bytes = 0;
};
// The plan of the forward or backward kernel for a problem on `device` (not ok when the kernel
// does not apply), computed once per (direction, shape, device); computing it opts the kernel in
// to the device's dynamic shared memory.
PersistentPlan persistent_plan(const RnnConfig& config, DType dtype, int device,
                               dispatch::Direction direction);

// The problem both persistent kernels walk: cell type, steps, batch, hidden size, gates, saved
// gate values per unit, and which direction (1: reverse time).
struct PersistentShape {
  RnnMode mode = RnnMode::lstm;
  int T_ = 0, B = 0, H = 0, G = 1, S = 0;
  int direction = 0;
};

template <typename T>
struct PersistentForwardArgs : PersistentShape {
  const float* gx = nullptr;  // [T, B, G * H]
  const T* w_hh = nullptr;    // [G * H, H]
  const T* b_ih = nullptr;    // [G * H] or null
  const T* b_hh = nullptr;
  T* states = nullptr;     // [T + 1, B, H], the first slot holding h0
  float* cells = nullptr;  // [T + 1, B, H] (LSTM), the first slot holding c0
  T* gates = nullptr;      // [T, B, S * H]
  T* y = nullptr;          // [T, B, ldy] at this direction's column offset
  int64_t ldy = 0;
  const int32_t* lengths = nullptr;
};
template <typename T>
void persistent_forward(const PersistentForwardArgs<T>& a, const PersistentPlan& plan,
                        cudaStream_t stream);

// Writes dgx / dgh for every step, and grad_h0 / grad_c0 (when not null) from the final carries.
template <typename T>
struct PersistentBackwardArgs : PersistentShape {
  const T* w_hh = nullptr;       // [G * H, H]
  const T* states = nullptr;     // [T + 1, B, H] saved by the forward
  const float* cells = nullptr;  // [T + 1, B, H] (LSTM)
  const T* gates = nullptr;      // [T, B, S * H]
  const T* dy = nullptr;         // [T, B, ldy] at this direction's column offset, or null (zero)
  int64_t ldy = 0;
  const T* grad_h_n = nullptr;  // [B, H] or null (zero)
  const T* grad_c_n = nullptr;  // [B, H] (LSTM) or null (zero)
  T* dgx = nullptr;             // [T, B, G * H]
  T* dgh = nullptr;             // [T, B, G * H]; dgx except for GRU
  T* grad_h0 = nullptr;         // [B, H] or null
  T* grad_c0 = nullptr;         // [B, H] or null
  const int32_t* lengths = nullptr;
};
template <typename T>
void persistent_backward(const PersistentBackwardArgs<T>& a, const PersistentPlan& plan,
                         cudaStream_t stream);

}  // namespace ember::cuda::rnn
