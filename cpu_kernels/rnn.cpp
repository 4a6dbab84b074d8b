// The CPU reference of the rnn op (kernel_interface/rnn.h), registered as the algorithm
// "gemm_steps" of the slots rnn.forward and rnn.backward: a GEMM per time step through
// cpu_kernels/gemm.h (OpenBLAS, or Eigen), its per-step gate math splitting the batch over the
// thread pool. Structure (the CUDA algorithms mirror it):
//   forward, per layer and direction: the input projection of all T steps as one GEMM
//     ([T * B, in] x [in, G * H]); per step one recurrent GEMM ([B, H_out] x [H_out, G * H]), the
//     pointwise gate math (saving what backward needs into the reserve), the projection GEMM
//     for LSTM with proj_size, and the lengths mask (steps past a sequence's length copy its state
//     through and output zeros); dropout between layers with the Philox mask of ember::dropout.
//   backward through time, layers top down, per direction: per step the pointwise gate gradients
//     and one GEMM for the gradient of the previous hidden state; after the loop the weight
//     gradients (dW_ih, dW_hh, biases, dW_hr) as GEMMs over all steps and the input gradient
//     dX = dG W_ih, which becomes the lower layer's output gradient through dropout's mask.
// float32 and float64 (the op computes 16-bit floats in float32 on the CPU). Gradients are
// written, never accumulated.
#include "ember/kernel_interface/rnn.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ember/cpu_kernels/dropout.h"
#include "ember/cpu_kernels/gemm.h"
#include "ember/tensor/parallel.h"

namespace ember {
namespace {

using dispatch::Direction;

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MapMat = Eigen::Map<Mat<T>>;
template <typename T>
using ConstMapMat = Eigen::Map<const Mat<T>>;

// Batch rows per parallel chunk of a step's gate math: G * H gate values a row, each an exp or a
// tanh; a chunk of a few thousand of them outweighs handing it to another thread, and a batch
// smaller than one chunk stays on the calling thread.
int64_t gate_rows_grain(int64_t gate_values_per_row) {
  constexpr int64_t kGateValuesPerChunk = 8192;
  return std::max<int64_t>(1, kGateValuesPerChunk / std::max<int64_t>(1, gate_values_per_row));
}

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
const T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <typename T>
T* region(const Tensor& reserve, int64_t offset) {
  return offset < 0 ? nullptr
                    : reinterpret_cast<T*>(static_cast<uint8_t*>(reserve.data_ptr()) + offset);
}

// The weights of one (layer, direction); biases and w_hr may be null.
template <typename T>
struct LayerWeights {
  const T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr, *w_hr = nullptr;
  int64_t i_ih = -1, i_hh = -1, i_bih = -1, i_bhh = -1, i_hr = -1;  // positions in the flat list
};
template <typename T>
LayerWeights<T> layer_weights(const RnnProblem& p, int64_t l, int64_t d) {
  LayerWeights<T> w;
  const RnnConfig& c = p.config;
  w.i_ih = c.weight_index(l, d, RnnWeightKind::w_ih);
  w.i_hh = c.weight_index(l, d, RnnWeightKind::w_hh);
  w.i_bih = c.weight_index(l, d, RnnWeightKind::b_ih);
  w.i_bhh = c.weight_index(l, d, RnnWeightKind::b_hh);
  w.i_hr = c.weight_index(l, d, RnnWeightKind::w_hr);
  auto get = [&](int64_t i) { return i < 0 ? nullptr : ptr<T>(p.weights[size_t(i)]); };
  w.w_ih = get(w.i_ih);
  w.w_hh = get(w.i_hh);
  w.b_ih = get(w.i_bih);
  w.b_hh = get(w.i_bhh);
  w.w_hr = get(w.i_hr);
  return w;
}

// The time of forward step s, and the state slots it reads and writes (see kernel_interface/rnn.h).
struct StepSlots {
  int64_t t, prev, next;
};
StepSlots step_slots(int64_t s, int64_t d, int64_t T) {
  if (d == 0) return {s, s, s + 1};
  const int64_t t = T - 1 - s;
  return {t, t + 1, t};
}

template <typename T>
void forward(const RnnProblem& p) {
  const RnnConfig& c = p.config;
  const RnnReserveLayout layout = p.layout();
  const int64_t T_ = c.seq_len, B = c.batch, H = c.hidden_size, Ho = c.out_size();
  const int64_t G = c.gates(), GH = G * H, D = c.num_directions, L = c.num_layers, W = D * Ho;
  const int64_t S = layout.saved_gates;
  const bool proj = c.proj_size > 0;
  const int32_t* len = p.lengths.defined() ? p.lengths.data<int32_t>() : nullptr;
  auto valid = [len](int64_t t, int64_t b) { return len == nullptr || t < len[b]; };

  const T* x = ptr<T>(p.input);
  int64_t in_size = c.input_size;
  for (int64_t l = 0; l < L; ++l) {
    const RnnReserveLayout::Layer& lr = layout.layers[size_t(l)];
    T* y = l + 1 < L ? region<T>(p.reserve, lr.output) : static_cast<T*>(p.output.data_ptr());
    for (int64_t d = 0; d < D; ++d) {
      const LayerWeights<T> w = layer_weights<T>(p, l, d);
      T* gates = region<T>(p.reserve, lr.dir[d].gates);
      T* cells = region<T>(p.reserve, lr.dir[d].cells);
      T* states = region<T>(p.reserve, lr.dir[d].states);
      T* proj_in = region<T>(p.reserve, lr.dir[d].proj_in);
      const int64_t ld = l * D + d;
      const int64_t first = d == 0 ? 0 : T_, last = d == 0 ? T_ : 0;
      std::memcpy(states + first * B * Ho, ptr<T>(p.h0) + ld * B * Ho, size_t(B * Ho) * sizeof(T));
      if (cells)
        std::memcpy(cells + first * B * H, ptr<T>(p.c0) + ld * B * H, size_t(B * H) * sizeof(T));

      // The input projection of every step at once: gx = X W_ih^T, [T * B, G * H].
      Mat<T> gx(T_ * B, GH), gh(B, GH), h_new(B, Ho);
      cpu::gemm<T>(false, true, T_ * B, GH, in_size, T(1), x, in_size, w.w_ih, in_size, T(0),
                   gx.data(), GH);
      for (int64_t s = 0; s < T_; ++s) {
        const StepSlots st = step_slots(s, d, T_);
        const T* h_prev = states + st.prev * B * Ho;
        T* h_next = states + st.next * B * Ho;
        cpu::gemm<T>(false, true, B, GH, Ho, T(1), h_prev, Ho, w.w_hh, Ho, T(0), gh.data(), GH);
        parallel_for(0, B, gate_rows_grain(GH), [&](int64_t b_lo, int64_t b_hi) {
          for (int64_t b = b_lo; b < b_hi; ++b) {
            T* y_row = y + (st.t * B + b) * W + d * Ho;
            T* g_row = gates ? gates + (st.t * B + b) * S * H : nullptr;
            if (!valid(st.t, b)) {
              // Past the end of sequence b: carry the state through, output zero.
              std::memcpy(h_next + b * Ho, h_prev + b * Ho, size_t(Ho) * sizeof(T));
              if (cells)
                std::memcpy(cells + (st.next * B + b) * H, cells + (st.prev * B + b) * H,
                            size_t(H) * sizeof(T));
              std::fill(y_row, y_row + Ho, T(0));
              if (g_row) std::fill(g_row, g_row + S * H, T(0));
              if (proj_in)
                std::fill(proj_in + (st.t * B + b) * H, proj_in + (st.t * B + b + 1) * H, T(0));
              continue;
            }
            auto pre = [&](int64_t gate, int64_t j, bool with_hidden) {
              const int64_t k = gate * H + j;
              T v = gx(st.t * B + b, k) + (w.b_ih ? w.b_ih[k] : T(0));
              if (with_hidden) v += gh(b, k) + (w.b_hh ? w.b_hh[k] : T(0));
              return v;
            };
            for (int64_t j = 0; j < H; ++j) {
              T h = T(0);
              switch (c.mode) {
                case RnnMode::lstm: {
                  const T i = sigmoid(pre(0, j, true)), f = sigmoid(pre(1, j, true));
                  const T g = std::tanh(pre(2, j, true)), o = sigmoid(pre(3, j, true));
                  const T c_new = f * cells[(st.prev * B + b) * H + j] + i * g;
                  cells[(st.next * B + b) * H + j] = c_new;
                  g_row[j] = i;
                  g_row[H + j] = f;
                  g_row[2 * H + j] = g;
                  g_row[3 * H + j] = o;
                  h = o * std::tanh(c_new);
                  break;
                }
                case RnnMode::gru: {
                  const T r = sigmoid(pre(0, j, true)), z = sigmoid(pre(1, j, true));
                  const T hn = gh(b, 2 * H + j) + (w.b_hh ? w.b_hh[2 * H + j] : T(0));
                  const T n = std::tanh(pre(2, j, false) + r * hn);
                  g_row[j] = r;
                  g_row[H + j] = z;
                  g_row[2 * H + j] = n;
                  g_row[3 * H + j] = hn;
                  h = (T(1) - z) * n + z * h_prev[b * Ho + j];
                  break;
                }
                case RnnMode::rnn_tanh:
                  h = std::tanh(pre(0, j, true));
                  break;
                case RnnMode::rnn_relu:
                  h = std::max(pre(0, j, true), T(0));
                  break;
              }
              if (proj)
                proj_in[(st.t * B + b) * H + j] = h;
              else
                h_new(b, j) = h;
            }
          }
        });
        if (proj)
          cpu::gemm<T>(false, true, B, Ho, H, T(1), proj_in + st.t * B * H, H, w.w_hr, H, T(0),
                       h_new.data(), Ho);
        for (int64_t b = 0; b < B; ++b) {
          if (!valid(st.t, b)) continue;
          for (int64_t k = 0; k < Ho; ++k) {
            h_next[b * Ho + k] = h_new(b, k);
            y[(st.t * B + b) * W + d * Ho + k] = h_new(b, k);
          }
        }
      }
      std::memcpy(static_cast<T*>(p.h_n.data_ptr()) + ld * B * Ho, states + last * B * Ho,
                  size_t(B * Ho) * sizeof(T));
      if (cells)
        std::memcpy(static_cast<T*>(p.c_n.data_ptr()) + ld * B * H, cells + last * B * H,
                    size_t(B * H) * sizeof(T));
    }
    if (l + 1 < L) {
      if (p.dropout_active()) {
        T* dropped = region<T>(p.reserve, lr.dropped);
        cpu::dropout_forward_elements<T>(y, dropped, region<bool>(p.reserve, lr.mask), T_ * B * W,
                                         p.dropout, p.dropout_random[size_t(l)]);
        x = dropped;
      } else {
        x = y;
      }
      in_size = W;
    }
  }
}

template <typename T>
void backward(const RnnProblem& p) {
  const RnnConfig& c = p.config;
  const RnnReserveLayout layout = p.layout();
  const int64_t T_ = c.seq_len, B = c.batch, H = c.hidden_size, Ho = c.out_size(), P = c.proj_size;
  const int64_t G = c.gates(), GH = G * H, D = c.num_directions, L = c.num_layers, W = D * Ho;
  const int64_t S = layout.saved_gates;
  const bool proj = P > 0, gru = c.mode == RnnMode::gru;
  const int32_t* len = p.lengths.defined() ? p.lengths.data<int32_t>() : nullptr;
  auto valid = [len](int64_t t, int64_t b) { return len == nullptr || t < len[b]; };

  // The gradient of the current layer's output, [T * B, W].
  Mat<T> dy = Mat<T>::Zero(T_ * B, W);
  if (p.grad_output.defined()) dy = ConstMapMat<T>(ptr<T>(p.grad_output), T_ * B, W);
  for (int64_t l = L - 1; l >= 0; --l) {
    const RnnReserveLayout::Layer& lr = layout.layers[size_t(l)];
    const int64_t in_size = c.layer_input_size(l);
    const T* x = ptr<T>(p.input);
    if (l > 0) {
      const RnnReserveLayout::Layer& below = layout.layers[size_t(l - 1)];
      x = region<T>(p.reserve, p.dropout_active() ? below.dropped : below.output);
    }
    const bool need_dx = l > 0 || p.grad_input.defined();
    Mat<T> dx = Mat<T>::Zero(need_dx ? T_ * B : 0, in_size);
    for (int64_t d = 0; d < D; ++d) {
      const LayerWeights<T> w = layer_weights<T>(p, l, d);
      const T* gates = region<T>(p.reserve, lr.dir[d].gates);
      const T* cells = region<T>(p.reserve, lr.dir[d].cells);
      const T* states = region<T>(p.reserve, lr.dir[d].states);
      const T* proj_in = region<T>(p.reserve, lr.dir[d].proj_in);
      const int64_t ld = l * D + d;
      Mat<T> dgx = Mat<T>::Zero(T_ * B, GH);
      Mat<T> dgh_separate = Mat<T>::Zero(gru ? T_ * B : 0, GH);
      Mat<T>& dgh = gru ? dgh_separate : dgx;  // d(loss)/d(W_hh h + b_hh): differs only for GRU
      Mat<T> dh_total_all = Mat<T>::Zero(proj ? T_ * B : 0, Ho);
      Mat<T> dh_carry = Mat<T>::Zero(B, Ho);
      if (p.grad_h_n.defined()) dh_carry = ConstMapMat<T>(ptr<T>(p.grad_h_n) + ld * B * Ho, B, Ho);
      Mat<T> dc_carry = Mat<T>::Zero(B, H);
      if (p.grad_c_n.defined()) dc_carry = ConstMapMat<T>(ptr<T>(p.grad_c_n) + ld * B * H, B, H);
      Mat<T> dh_total(B, Ho), pass(B, Ho), dr(B, H);

      for (int64_t s = T_ - 1; s >= 0; --s) {
        const StepSlots st = step_slots(s, d, T_);
        for (int64_t b = 0; b < B; ++b) {
          const bool v = valid(st.t, b);
          for (int64_t k = 0; k < Ho; ++k) {
            dh_total(b, k) = v ? dh_carry(b, k) + dy(st.t * B + b, d * Ho + k) : T(0);
            pass(b, k) = v ? T(0) : dh_carry(b, k);
          }
        }
        if (proj) {
          dh_total_all.middleRows(st.t * B, B) = dh_total;
          cpu::gemm<T>(false, false, B, H, P, T(1), dh_total.data(), Ho, w.w_hr, H, T(0), dr.data(),
                       H);
        } else {
          dr = dh_total;
        }
        parallel_for(0, B, gate_rows_grain(GH), [&](int64_t b_lo, int64_t b_hi) {
          for (int64_t b = b_lo; b < b_hi; ++b) {
            if (!valid(st.t, b)) continue;
            const int64_t row = st.t * B + b;
            const T* g_row = gates ? gates + row * S * H : nullptr;
            for (int64_t j = 0; j < H; ++j) {
              const T dh = dr(b, j);
              switch (c.mode) {
                case RnnMode::lstm: {
                  const T i = g_row[j], f = g_row[H + j], g = g_row[2 * H + j],
                          o = g_row[3 * H + j];
                  const T tc = std::tanh(cells[(st.next * B + b) * H + j]);
                  const T dc = dc_carry(b, j) + dh * o * (T(1) - tc * tc);
                  dgx(row, j) = dc * g * i * (T(1) - i);
                  dgx(row, H + j) = dc * cells[(st.prev * B + b) * H + j] * f * (T(1) - f);
                  dgx(row, 2 * H + j) = dc * i * (T(1) - g * g);
                  dgx(row, 3 * H + j) = dh * tc * o * (T(1) - o);
                  dc_carry(b, j) = dc * f;
                  break;
                }
                case RnnMode::gru: {
                  const T r = g_row[j], z = g_row[H + j], n = g_row[2 * H + j],
                          hn = g_row[3 * H + j];
                  const T h_prev = states[(st.prev * B + b) * Ho + j];
                  const T dn_pre = dh * (T(1) - z) * (T(1) - n * n);
                  const T dz_pre = dh * (h_prev - n) * z * (T(1) - z);
                  const T dr_pre = dn_pre * hn * r * (T(1) - r);
                  dgx(row, j) = dgh(row, j) = dr_pre;
                  dgx(row, H + j) = dgh(row, H + j) = dz_pre;
                  dgx(row, 2 * H + j) = dn_pre;
                  dgh(row, 2 * H + j) = dn_pre * r;
                  pass(b, j) += dh * z;
                  break;
                }
                case RnnMode::rnn_tanh: {
                  const T h = states[(st.next * B + b) * Ho + j];
                  dgx(row, j) = dh * (T(1) - h * h);
                  break;
                }
                case RnnMode::rnn_relu: {
                  const T h = states[(st.next * B + b) * Ho + j];
                  dgx(row, j) = h > T(0) ? dh : T(0);
                  break;
                }
              }
            }
          }
        });
        // dh_carry = pass + dG_h[step] W_hh
        dh_carry = pass;
        cpu::gemm<T>(false, false, B, Ho, GH, T(1), dgh.data() + st.t * B * GH, GH, w.w_hh, Ho,
                     T(1), dh_carry.data(), Ho);
      }
      if (p.grad_h0.defined())
        MapMat<T>(static_cast<T*>(p.grad_h0.data_ptr()) + ld * B * Ho, B, Ho) = dh_carry;
      if (p.grad_c0.defined())
        MapMat<T>(static_cast<T*>(p.grad_c0.data_ptr()) + ld * B * H, B, H) = dc_carry;
      if (p.need_weight_grads) {
        auto grad = [&](int64_t i, int64_t rows, int64_t cols) {
          return MapMat<T>(static_cast<T*>(p.grad_weights[size_t(i)].data_ptr()), rows, cols);
        };
        // The previous state of every step: slots 0..T-1 going forward, 1..T in reverse.
        const T* h_prev_all = states + (d == 0 ? 0 : B * Ho);
        cpu::gemm<T>(true, false, GH, in_size, T_ * B, T(1), dgx.data(), GH, x, in_size, T(0),
                     grad(w.i_ih, GH, in_size).data(), in_size);
        cpu::gemm<T>(true, false, GH, Ho, T_ * B, T(1), dgh.data(), GH, h_prev_all, Ho, T(0),
                     grad(w.i_hh, GH, Ho).data(), Ho);
        if (w.i_bih >= 0) {
          grad(w.i_bih, 1, GH) = dgx.colwise().sum();
          grad(w.i_bhh, 1, GH) = dgh.colwise().sum();
        }
        if (proj)
          cpu::gemm<T>(true, false, P, H, T_ * B, T(1), dh_total_all.data(), Ho, proj_in, H, T(0),
                       grad(w.i_hr, P, H).data(), H);
      }
      if (need_dx)
        cpu::gemm<T>(false, false, T_ * B, in_size, GH, T(1), dgx.data(), GH, w.w_ih, in_size, T(1),
                     dx.data(), in_size);
    }
    if (l > 0) {
      // Through dropout's mask into the lower layer's output gradient.
      if (p.dropout_active()) {
        const bool* mask = region<bool>(p.reserve, layout.layers[size_t(l - 1)].mask);
        cpu::dropout_backward_elements<T>(dx.data(), mask, dx.data(), dx.size(),
                                          p.dropout >= 1 ? 0.0 : 1.0 / (1.0 - p.dropout));
      }
      dy = std::move(dx);
    } else if (p.grad_input.defined()) {
      MapMat<T>(static_cast<T*>(p.grad_input.data_ptr()), T_ * B, in_size) = dx;
    }
  }
}

void run_cpu(const RnnProblem& p, void* /*workspace*/) {
  const bool fwd = p.direction == Direction::forward;
  switch (p.dtype) {
    case DType::f32:
      return fwd ? forward<float>(p) : backward<float>(p);
    case DType::f64:
      return fwd ? forward<double>(p) : backward<double>(p);
    default:
      EMBER_THROW(not_supported, rnn_mode_name(p.config.mode), ": dtype ", dtype_name(p.dtype),
                  " is not supported by the CPU kernel (the op computes 16-bit floats in float32)");
  }
}

dispatch::Algorithm<RnnProblem> gemm_steps_algorithm() {
  dispatch::Algorithm<RnnProblem> a;
  a.name = "gemm_steps";
  a.deterministic = true;
  a.applies = [](const RnnProblem& p) { return p.dtype == DType::f32 || p.dtype == DType::f64; };
  a.run = &run_cpu;
  return a;
}

}  // namespace

EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", forward, CPU, gemm_steps_algorithm());
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", backward, CPU, gemm_steps_algorithm());

}  // namespace ember
