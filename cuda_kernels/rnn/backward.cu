// The backward driver of the CUDA rnn algorithms (cuda_kernels/rnn/driver.cuh), the forward's
// structure in reverse time: per (layer, direction) and step one fused step kernel (gate
// gradients, cell carry; with a projection a prep kernel and the dr = dh W_hr GEMM first) and one
// GEMM dh_prev += dG W_hh (fp32 carry), or, for "persistent", one cooperative kernel for all
// steps. The input gradient dX = dG W_ih runs per chunk on the input stream (it is the lower
// layer's output gradient, through dropout's mask, so layers overlap as a wavefront again); after
// a layer's loop its weight gradients run as large GEMMs over all steps (dW_ih = dG^T X,
// dW_hh = dG^T H_prev, biases as dG^T 1, dW_hr) on a separate stream, overlapping the layers below.
#include <algorithm>
#include <vector>

#include "ember/cuda_kernels/blas/blas.h"
#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/rnn/driver.cuh"
#include "ember/cuda_kernels/rnn/rnn.cuh"
#include "ember/tensor/runtime/eager_replay.h"

namespace ember::cuda::rnn {
namespace {

using dispatch::Direction;

// Temporaries of one backward, allocated as the forward's are.
struct BackwardTemps {
  // Per (layer, direction): the gate gradients of every step (GRU: of W_ih and W_hh apart), the
  // projection's output gradients and one step's dr, the fp32 gradient carries.
  std::vector<Tensor> dgx, dgh, dh_total, dr, dh_carry, dc_carry;
  std::vector<Tensor> dx;  // per layer > 0: its input gradient (the lower layer's output gradient)
  Tensor ones;             // [T * B] for the bias gradients
};
BackwardTemps backward_temps(const RnnProblem& p, bool persistent) {
  const RnnConfig& c = p.config;
  const int64_t n = c.num_layers * c.num_directions, rows = c.seq_len * c.batch, B = c.batch;
  const int64_t H = c.hidden_size, GH = c.gates() * H, P = c.proj_size;
  const Device device = p.device();
  BackwardTemps tmp;
  for (std::vector<Tensor>* v :
       {&tmp.dgx, &tmp.dgh, &tmp.dh_total, &tmp.dr, &tmp.dh_carry, &tmp.dc_carry})
    v->resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    tmp.dgx[size_t(i)] = empty({rows, GH}, p.dtype, device);
    if (c.mode == RnnMode::gru) tmp.dgh[size_t(i)] = empty({rows, GH}, p.dtype, device);
    if (P > 0) {
      tmp.dh_total[size_t(i)] = empty({rows, P}, p.dtype, device);
      tmp.dr[size_t(i)] = empty({B, H}, DType::f32, device);
    }
    if (persistent) continue;  // the persistent kernel keeps its carries on chip
    tmp.dh_carry[size_t(i)] = empty({B, c.out_size()}, DType::f32, device);
    if (c.mode == RnnMode::lstm) tmp.dc_carry[size_t(i)] = empty({B, H}, DType::f32, device);
  }
  tmp.dx.resize(size_t(c.num_layers));
  for (int64_t l = 1; l < c.num_layers; ++l)
    tmp.dx[size_t(l)] = empty({rows, c.layer_input_size(l)}, p.dtype, device);
  if (p.need_weight_grads && c.bias) tmp.ones = empty({rows}, p.dtype, device);
  return tmp;
}

template <typename T>
void backward_launch(const RnnProblem& p, bool persistent, const BackwardTemps& tmp) {
  const RnnConfig& c = p.config;
  const int64_t T_ = c.seq_len, B = c.batch, H = c.hidden_size, Ho = c.out_size(), P = c.proj_size;
  const int64_t G = c.gates(), GH = G * H, D = c.num_directions, L = c.num_layers, W = D * Ho;
  const Pointers<T> ptrs(p);
  const int64_t S = ptrs.layout.saved_gates;
  const bool gru = c.mode == RnnMode::gru;
  const Device device = p.device();
  DeviceGuard device_guard(device);
  const cudaDataType_t ab = cuda_type<T>();
  const cublasComputeType_t compute = compute_type(p);
  const int32_t* lengths = ptrs.lengths();
  const LaunchSetup setup = launch_setup(p, persistent, Direction::backward);
  const PersistentPlan& plan = setup.plan;
  const Stream main = setup.main, in = setup.in;
  const std::vector<Stream>& rec = setup.rec;
  EventPool& events = *setup.events;
  auto rec_of = [&](int64_t l, int64_t d) { return setup.rec_of(l, d); };
  const Stream wgrad = side_stream(device, 1 + kMaxRecurrentStreams);

  auto f32 = [](const Tensor& t) { return static_cast<float*>(t.data_ptr()); };
  auto typed = [](const Tensor& t) {
    return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
  };
  const std::vector<Tensor>&dgx = tmp.dgx, &dgh = tmp.dgh, &dh_total = tmp.dh_total, &dr = tmp.dr;
  const std::vector<Tensor>&dh_carry = tmp.dh_carry, &dc_carry = tmp.dc_carry, &dx = tmp.dx;
  auto dgh_of = [&](int64_t i) { return gru ? typed(dgh[size_t(i)]) : typed(dgx[size_t(i)]); };
  // dX of layer l: the lower layer's output gradient (l > 0), or the op's input gradient.
  T* grad_input = typed(p.grad_input);
  const Tensor& ones = tmp.ones;
  if (ones.defined()) fill_elements<T>(typed(ones), 1.0f, T_ * B, raw(main));

  const cudaEvent_t start = events.record(raw(main));
  wait_event(raw(in), start);
  wait_event(raw(wgrad), start);
  for (const Stream& s : rec) wait_event(raw(s), start);

  // The persistent kernel runs a layer's whole loop: one chunk, no wavefront.
  const int64_t cs = chunk_steps(c, !persistent), K = (T_ + cs - 1) / cs;
  std::vector<cudaEvent_t> dx_done(size_t(L), nullptr), bwd_done(size_t(L * D), nullptr);
  for (int64_t kk = K - 1; kk >= 0; --kk) {
    const int64_t s0 = kk * cs, s1 = std::min(T_, s0 + cs);
    for (int64_t l = L - 1; l >= 0; --l) {
      const int64_t in_l = c.layer_input_size(l);
      // The gradient of this layer's output: the op's for the top layer, else the layer above's dX.
      const T* dy =
          l == L - 1
              ? static_cast<const T*>(p.grad_output.defined() ? p.grad_output.data_ptr() : nullptr)
              : typed(dx[size_t(l + 1)]);
      // 1) The steps of chunk kk in reverse, each direction on its own stream.
      for (int64_t d = 0; d < D; ++d) {
        const Stream& rs = rec_of(l, d);
        const cudaStream_t stream = raw(rs);
        if (l < L - 1) wait_event(stream, dx_done[size_t(l + 1)]);
        StreamGuard on_rec(rs);
        const int64_t ld = l * D + d;
        const RnnReserveLayout::LayerDirection& sv = ptrs.saved(l, d);
        const T* states = ptrs.template region<T>(sv.states);
        const float* cells = ptrs.template region<float>(sv.cells);
        const T* gates = ptrs.template region<T>(sv.gates);
        const T* w_hh = ptrs.weight(l, d, RnnWeightKind::w_hh);
        if (persistent) {
          PersistentBackwardArgs<T> a;
          static_cast<PersistentShape&>(a) = {c.mode, int(T_), int(B), int(H),
                                              int(G), int(S),  int(d)};
          a.w_hh = w_hh;
          a.states = states;
          a.cells = cells;
          a.gates = gates;
          a.dy = dy != nullptr ? dy + d * Ho : nullptr;
          a.ldy = W;
          a.grad_h_n = p.grad_h_n.defined()
                           ? static_cast<const T*>(p.grad_h_n.data_ptr()) + ld * B * H
                           : nullptr;
          a.grad_c_n = p.grad_c_n.defined() && cells != nullptr
                           ? static_cast<const T*>(p.grad_c_n.data_ptr()) + ld * B * H
                           : nullptr;
          a.dgx = typed(dgx[size_t(ld)]);
          a.dgh = dgh_of(ld);
          a.grad_h0 =
              p.grad_h0.defined() ? static_cast<T*>(p.grad_h0.data_ptr()) + ld * B * H : nullptr;
          a.grad_c0 = p.grad_c0.defined() && cells != nullptr
                          ? static_cast<T*>(p.grad_c0.data_ptr()) + ld * B * H
                          : nullptr;
          a.lengths = lengths;
          persistent_backward<T>(a, plan, stream);
          bwd_done[size_t(ld)] = events.record(stream);
          continue;
        }
        float* dh = f32(dh_carry[size_t(ld)]);
        float* dc = dc_carry[size_t(ld)].defined() ? f32(dc_carry[size_t(ld)]) : nullptr;
        if (kk == K - 1) {
          convert_elements<float, T>(
              dh,
              p.grad_h_n.defined() ? static_cast<const T*>(p.grad_h_n.data_ptr()) + ld * B * Ho
                                   : nullptr,
              B * Ho, stream);
          if (dc != nullptr)
            convert_elements<float, T>(
                dc,
                p.grad_c_n.defined() ? static_cast<const T*>(p.grad_c_n.data_ptr()) + ld * B * H
                                     : nullptr,
                B * H, stream);
        }
        cublasHandle_t handle = cublas_handle();
        for (int64_t s = s1 - 1; s >= s0; --s) {
          const StepSlots st = step_slots(s, d, T_);
          const T* dy_t = dy != nullptr ? dy + st.t * B * W + d * Ho : nullptr;
          StepBackwardArgs<T> a;
          a.mode = c.mode;
          a.B = int(B);
          a.H = int(H);
          a.G = int(G);
          a.S = int(S);
          a.gates = gates != nullptr ? gates + st.t * B * S * H : nullptr;
          if (cells != nullptr) {
            a.c_prev = cells + st.prev * B * H;
            a.c_next = cells + st.next * B * H;
          }
          a.h_prev = states + st.prev * B * Ho;
          a.h_next = states + st.next * B * Ho;
          a.dh_carry = dh;
          a.dc_carry = dc;
          a.dgx = typed(dgx[size_t(ld)]) + st.t * B * GH;
          a.dgh = dgh_of(ld) + st.t * B * GH;
          a.lengths = lengths;
          a.t = int(st.t);
          if (P > 0) {
            T* dht = typed(dh_total[size_t(ld)]) + st.t * B * P;
            proj_backward_prep<T>(dh, dy_t, W, dht, int(B), int(P), lengths, int(st.t), stream);
            gemm(handle, false, false, B, H, P, dht, P, ptrs.weight(l, d, RnnWeightKind::w_hr), H,
                 f32(dr[size_t(ld)]), H, 0.0f, ab, CUDA_R_32F, compute);
            a.dr = f32(dr[size_t(ld)]);
          } else {
            a.dy = dy_t;
            a.ldy = W;
          }
          step_backward<T>(a, stream);
          // d/dh_prev += dG W_hh (the step kernel left the direct part in the carry).
          gemm(handle, false, false, B, Ho, GH, a.dgh, GH, w_hh, Ho, dh, Ho, 1.0f, ab, CUDA_R_32F,
               compute);
        }
        if (kk == 0) {
          if (p.grad_h0.defined())
            convert_elements<T, float>(static_cast<T*>(p.grad_h0.data_ptr()) + ld * B * Ho, dh,
                                       B * Ho, stream);
          if (p.grad_c0.defined() && dc != nullptr)
            convert_elements<T, float>(static_cast<T*>(p.grad_c0.data_ptr()) + ld * B * H, dc,
                                       B * H, stream);
        }
        bwd_done[size_t(ld)] = events.record(stream);
      }
      // 2) dX of chunk kk = sum over directions of dG W_ih, then through dropout's mask.
      T* dx_l = l > 0 ? typed(dx[size_t(l)]) : grad_input;
      if (dx_l != nullptr) {
        const int64_t t0 = D == 1 ? s0 : 0, t1 = D == 1 ? s1 : T_;
        for (int64_t d = 0; d < D; ++d) wait_event(raw(in), bwd_done[size_t(l * D + d)]);
        StreamGuard on_input(in);
        cublasHandle_t handle = cublas_handle();
        for (int64_t d = 0; d < D; ++d)
          gemm(handle, false, false, (t1 - t0) * B, in_l, GH,
               typed(dgx[size_t(l * D + d)]) + t0 * B * GH, GH,
               ptrs.weight(l, d, RnnWeightKind::w_ih), in_l, dx_l + t0 * B * in_l, in_l,
               d == 0 ? 0.0f : 1.0f, ab, ab, compute);
        if (l > 0 && p.dropout_active())
          dropout_backward<T>(dx_l,
                              ptrs.template region<bool>(ptrs.layout.layers[size_t(l - 1)].mask),
                              t0 * B * in_l, t1 * B * in_l, p.dropout, raw(in));
        dx_done[size_t(l)] = events.record(raw(in));
      }
      // 3) Once the layer's loop is over: its weight gradients, overlapping the layers below.
      if (kk == 0 && p.need_weight_grads) {
        for (int64_t d = 0; d < D; ++d) wait_event(raw(wgrad), bwd_done[size_t(l * D + d)]);
        StreamGuard on_wgrad(wgrad);
        cublasHandle_t handle = cublas_handle();
        const T* x = ptrs.layer_input(l);
        for (int64_t d = 0; d < D; ++d) {
          const int64_t ld = l * D + d;
          const RnnReserveLayout::LayerDirection& sv = ptrs.saved(l, d);
          const T* states = ptrs.template region<T>(sv.states);
          const T* g_x = typed(dgx[size_t(ld)]);
          const T* g_h = dgh_of(ld);
          // The state each step read: slots 0..T-1 going forward, 1..T in reverse.
          const T* h_prev_all = states + (d == 0 ? 0 : B * Ho);
          gemm(handle, true, false, GH, in_l, T_ * B, g_x, GH, x, in_l,
               ptrs.grad_weight(l, d, RnnWeightKind::w_ih), in_l, 0.0f, ab, ab, compute);
          gemm(handle, true, false, GH, Ho, T_ * B, g_h, GH, h_prev_all, Ho,
               ptrs.grad_weight(l, d, RnnWeightKind::w_hh), Ho, 0.0f, ab, ab, compute);
          if (c.bias) {
            gemm(handle, true, false, GH, 1, T_ * B, g_x, GH, typed(ones), 1,
                 ptrs.grad_weight(l, d, RnnWeightKind::b_ih), 1, 0.0f, ab, ab, compute);
            gemm(handle, true, false, GH, 1, T_ * B, g_h, GH, typed(ones), 1,
                 ptrs.grad_weight(l, d, RnnWeightKind::b_hh), 1, 0.0f, ab, ab, compute);
          }
          if (P > 0)
            gemm(handle, true, false, P, H, T_ * B, typed(dh_total[size_t(ld)]), P,
                 ptrs.template region<T>(sv.proj_in), H,
                 ptrs.grad_weight(l, d, RnnWeightKind::w_hr), H, 0.0f, ab, ab, compute);
        }
      }
    }
  }
  wait_event(raw(main), events.record(raw(in)));
  wait_event(raw(main), events.record(raw(wgrad)));
  for (const Stream& s : rec) wait_event(raw(main), events.record(raw(s)));
}

}  // namespace

// With dropout the launches take Philox offsets that change every call: always direct.
void run_backward(const RnnProblem& p, bool persistent) {
  dispatch_floating<FloatingTypes::f32_bf16>(p.dtype, "rnn", [&](auto tag) {
    using T = decltype(tag);
    DeviceGuard device_guard(p.device());
    const BackwardTemps tmp = backward_temps(p, persistent);
    const auto launch = [&] { backward_launch<T>(p, persistent, tmp); };
    if (p.dropout_active()) return launch();
    eager_replay(p.device(),
                 replay_key(p, persistent,
                            {&tmp.dgx, &tmp.dgh, &tmp.dh_total, &tmp.dr, &tmp.dh_carry,
                             &tmp.dc_carry, &tmp.dx},
                            tmp.ones),
                 launch);
  });
}

}  // namespace ember::cuda::rnn
