// Device-side cell math of the CUDA rnn kernels, shared by the per-step kernels
// (cuda_kernels/rnn/step_kernels.cu) and the persistent kernels (cuda_kernels/rnn/persistent.cu):
// the LSTM and GRU cells forward, the gate gradients of one unit at one step, and small helpers
// (bias reads, the lengths mask). Include only from cuda_kernels/rnn/*.cu.
#pragma once
#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/rnn/rnn.cuh"

namespace ember::cuda::rnn {

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }

template <typename T>
__device__ __forceinline__ float bias_at(const T* b, int k) {
  return b != nullptr ? convert<float>(b[k]) : 0.0f;
}

__device__ __forceinline__ bool step_valid(const int32_t* lengths, int t, int b) {
  return lengths == nullptr || t < lengths[b];
}

// ---- cell math (shared by the per-step and the persistent forward kernels) ----------------------

// One LSTM cell: gates i, f, g, o from their pre-activations, the new cell state c = f c_prev + i g
// and the hidden state h = o tanh(c).
struct LstmCell {
  float i, f, g, o, c, h;
};
__device__ __forceinline__ LstmCell lstm_cell(float pre_i, float pre_f, float pre_g, float pre_o,
                                              float c_prev) {
  LstmCell cell;
  cell.i = sigmoid_f(pre_i);
  cell.f = sigmoid_f(pre_f);
  cell.g = tanhf(pre_g);
  cell.o = sigmoid_f(pre_o);
  cell.c = cell.f * c_prev + cell.i * cell.g;
  cell.h = cell.o * tanhf(cell.c);
  return cell;
}

// One GRU cell (PyTorch's): r and z from their full pre-activations, n = tanh(x_n + r hn) with
// x_n = the input part of n's pre-activation (with b_ih) and hn = its recurrent part (with b_hh),
// and h = (1 - z) n + z h_prev. hn is saved for the backward.
struct GruCell {
  float r, z, n, hn, h;
};
__device__ __forceinline__ GruCell gru_cell(float pre_r, float pre_z, float x_n, float hn,
                                            float h_prev) {
  GruCell cell;
  cell.r = sigmoid_f(pre_r);
  cell.z = sigmoid_f(pre_z);
  cell.hn = hn;
  cell.n = tanhf(x_n + cell.r * hn);
  cell.h = (1.0f - cell.z) * cell.n + cell.z * h_prev;
  return cell;
}

// The four saved values of unit j (LSTM: i, f, g, o; GRU: r, z, n, hn) in a row of S * H.
template <typename T>
__device__ __forceinline__ void save_gates(T* saved, int H, int j, float v0, float v1, float v2,
                                           float v3) {
  saved[j] = convert<T>(v0);
  saved[H + j] = convert<T>(v1);
  saved[2 * H + j] = convert<T>(v2);
  saved[3 * H + j] = convert<T>(v3);
}

// ---- cell gradients -----------------------------------------------------------------------------

// The gate gradients of unit j at one step (shared by the per-step and the persistent backward
// kernels): from the hidden gradient dh of the state after the step and the saved gate values
// (row of S * H), writes the gradients w.r.t. the input-side pre-activations (dgx, row of G * H)
// and the hidden-side ones (dgh; the same row except for GRU), updates the cell carry *dc (LSTM)
// and returns the part of d/dh_prev that does not go through W_hh. `at` indexes the [B, H] state
// slots c_prev, c_next (LSTM), h_prev (GRU) and h_next (RNN).
template <typename T>
__device__ __forceinline__ float cell_backward(RnnMode mode, int H, int j, float dh, const T* saved,
                                               const float* c_prev, const float* c_next,
                                               const T* h_prev, const T* h_next, int64_t at,
                                               float* dc, T* dgx, T* dgh) {
  switch (mode) {
    case RnnMode::lstm: {
      const float i = convert<float>(saved[j]), f = convert<float>(saved[H + j]);
      const float g = convert<float>(saved[2 * H + j]), o = convert<float>(saved[3 * H + j]);
      const float tc = tanhf(c_next[at]);
      const float dcell = *dc + dh * o * (1.0f - tc * tc);
      const float gi = dcell * g * i * (1.0f - i);
      const float gf = dcell * c_prev[at] * f * (1.0f - f);
      const float gg = dcell * i * (1.0f - g * g);
      const float go = dh * tc * o * (1.0f - o);
      *dc = dcell * f;
      dgx[j] = convert<T>(gi);
      dgx[H + j] = convert<T>(gf);
      dgx[2 * H + j] = convert<T>(gg);
      dgx[3 * H + j] = convert<T>(go);
      return 0.0f;
    }
    case RnnMode::gru: {
      const float r = convert<float>(saved[j]), z = convert<float>(saved[H + j]);
      const float n = convert<float>(saved[2 * H + j]), hn = convert<float>(saved[3 * H + j]);
      const float hp = convert<float>(h_prev[at]);
      const float dn = dh * (1.0f - z) * (1.0f - n * n);
      const float dz = dh * (hp - n) * z * (1.0f - z);
      const float dr = dn * hn * r * (1.0f - r);
      dgx[j] = dgh[j] = convert<T>(dr);
      dgx[H + j] = dgh[H + j] = convert<T>(dz);
      dgx[2 * H + j] = convert<T>(dn);
      dgh[2 * H + j] = convert<T>(dn * r);
      return dh * z;
    }
    case RnnMode::rnn_tanh: {
      const float h = convert<float>(h_next[at]);
      dgx[j] = convert<T>(dh * (1.0f - h * h));
      return 0.0f;
    }
    case RnnMode::rnn_relu: {
      const float h = convert<float>(h_next[at]);
      dgx[j] = convert<T>(h > 0.0f ? dh : 0.0f);
      return 0.0f;
    }
  }
  return 0.0f;
}

// Rows past their length: the state was copied through, so there is no gate gradient.
template <typename T>
__device__ __forceinline__ void zero_gate_grads(int G, int H, int j, T* dgx, T* dgh) {
  for (int g = 0; g < G; ++g) {
    dgx[g * H + j] = convert<T>(0.0f);
    dgh[g * H + j] = convert<T>(0.0f);
  }
}

}  // namespace ember::cuda::rnn
