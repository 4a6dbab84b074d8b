// The forward driver of the CUDA rnn algorithms (cuda_kernels/rnn/driver.cuh), per (layer,
// direction): the input projection gx = X W_ih^T as cuBLAS GEMMs over many steps at once (fp32
// output) on an input stream; then the recurrence on a recurrent stream: per step one GEMM
// gh = h W_hh^T and the fused step kernel (plus the projection GEMM and fixup for LSTM with
// proj_size), or, for "persistent", one cooperative kernel for all steps. A unidirectional stack
// of several layers runs as a wavefront of step chunks (layer l + 1's input GEMM and dropout for
// chunk k start once layer l has finished chunk k); bidirectional stacks run their two
// directions concurrently, layer after layer.
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

// Temporaries of one forward, allocated on the current stream before its launches (eager replay
// keys their addresses) and freed after them.
struct ForwardTemps {
  std::vector<Tensor> gx,
      gh;  // per (layer, direction): input projections; one step's recurrent GEMM
};
ForwardTemps forward_temps(const RnnProblem& p, bool persistent) {
  const RnnConfig& c = p.config;
  const int64_t n = c.num_layers * c.num_directions, rows = c.seq_len * c.batch,
                GH = c.gates() * c.hidden_size;
  ForwardTemps tmp;
  tmp.gx.resize(size_t(n));
  tmp.gh.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    tmp.gx[size_t(i)] = empty({rows, GH}, DType::f32, p.device());
    if (!persistent) tmp.gh[size_t(i)] = empty({c.batch, GH}, DType::f32, p.device());
  }
  return tmp;
}

template <typename T>
void forward_launch(const RnnProblem& p, bool persistent, const ForwardTemps& tmp) {
  const RnnConfig& c = p.config;
  const int64_t T_ = c.seq_len, B = c.batch, H = c.hidden_size, Ho = c.out_size(), P = c.proj_size;
  const int64_t G = c.gates(), GH = G * H, D = c.num_directions, L = c.num_layers, W = D * Ho;
  const Pointers<T> ptrs(p);
  const int64_t S = ptrs.layout.saved_gates;
  const Device device = p.device();
  DeviceGuard device_guard(device);
  const cudaDataType_t ab = cuda_type<T>();
  const cublasComputeType_t compute = compute_type(p);
  const int32_t* lengths = ptrs.lengths();
  const LaunchSetup setup = launch_setup(p, persistent, Direction::forward);
  const PersistentPlan& plan = setup.plan;
  const Stream main = setup.main, in = setup.in;
  const std::vector<Stream>& rec = setup.rec;
  EventPool& events = *setup.events;
  auto rec_of = [&](int64_t l, int64_t d) { return setup.rec_of(l, d); };

  const std::vector<Tensor>&gx = tmp.gx, &gh = tmp.gh;
  auto f32 = [](const Tensor& t) { return static_cast<float*>(t.data_ptr()); };

  const cudaEvent_t start = events.record(raw(main));
  wait_event(raw(in), start);
  for (const Stream& s : rec) wait_event(raw(s), start);

  const int64_t cs = chunk_steps(c, !persistent), K = (T_ + cs - 1) / cs;
  std::vector<cudaEvent_t> input_done(size_t(L), nullptr), rec_done(size_t(L * D), nullptr);
  for (int64_t k = 0; k < K; ++k) {
    const int64_t s0 = k * cs, s1 = std::min(T_, s0 + cs);
    for (int64_t l = 0; l < L; ++l) {
      const int64_t in_l = c.layer_input_size(l);
      // 1) The input projection of chunk k (layer 0: all steps at once, with the first chunk).
      if (l > 0 || k == 0) {
        const int64_t t0 = l == 0 ? 0 : s0, t1 = l == 0 ? T_ : s1;
        if (l > 0)
          for (int64_t d = 0; d < D; ++d) wait_event(raw(in), rec_done[size_t((l - 1) * D + d)]);
        StreamGuard on_input(in);
        if (l > 0 && p.dropout_active()) {
          const RnnReserveLayout::Layer& below = ptrs.layout.layers[size_t(l - 1)];
          dropout_forward<T>(ptrs.layer_output(l - 1), ptrs.template region<T>(below.dropped),
                             ptrs.template region<bool>(below.mask), t0 * B * W, t1 * B * W,
                             p.dropout, p.dropout_random[size_t(l - 1)], raw(in));
        }
        cublasHandle_t handle = cublas_handle();
        const T* x = ptrs.layer_input(l);
        for (int64_t d = 0; d < D; ++d)
          gemm(handle, false, true, (t1 - t0) * B, GH, in_l, x + t0 * B * in_l, in_l,
               ptrs.weight(l, d, RnnWeightKind::w_ih), in_l,
               f32(gx[size_t(l * D + d)]) + t0 * B * GH, GH, 0.0f, ab, CUDA_R_32F, compute);
        input_done[size_t(l)] = events.record(raw(in));
      }
      // 2) The recurrent steps of chunk k, each direction on its own stream.
      for (int64_t d = 0; d < D; ++d) {
        const Stream& rs = rec_of(l, d);
        const cudaStream_t stream = raw(rs);
        if (l > 0 || k == 0) wait_event(stream, input_done[size_t(l)]);
        StreamGuard on_rec(rs);
        const int64_t ld = l * D + d;
        const RnnReserveLayout::LayerDirection& sv = ptrs.saved(l, d);
        T* states = ptrs.template region<T>(sv.states);
        float* cells = ptrs.template region<float>(sv.cells);
        T* gates = ptrs.template region<T>(sv.gates);
        T* proj_in = ptrs.template region<T>(sv.proj_in);
        T* y = ptrs.layer_output(l) + d * Ho;
        const T* b_ih = ptrs.weight(l, d, RnnWeightKind::b_ih);
        const T* b_hh = ptrs.weight(l, d, RnnWeightKind::b_hh);
        const T* w_hh = ptrs.weight(l, d, RnnWeightKind::w_hh);
        const int64_t first = d == 0 ? 0 : T_, last = d == 0 ? T_ : 0;
        if (k == 0) {
          EMBER_CUDA_CHECK(cudaMemcpyAsync(
              states + first * B * Ho, static_cast<const T*>(p.h0.data_ptr()) + ld * B * Ho,
              size_t(B * Ho) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
          if (cells != nullptr)
            convert_elements<float, T>(cells + first * B * H,
                                       static_cast<const T*>(p.c0.data_ptr()) + ld * B * H, B * H,
                                       stream);
        }
        if (persistent) {
          PersistentForwardArgs<T> a;
          static_cast<PersistentShape&>(a) = {c.mode, int(T_), int(B), int(H),
                                              int(G), int(S),  int(d)};
          a.gx = f32(gx[size_t(ld)]);
          a.w_hh = w_hh;
          a.b_ih = b_ih;
          a.b_hh = b_hh;
          a.states = states;
          a.cells = cells;
          a.gates = gates;
          a.y = y;
          a.ldy = W;
          a.lengths = lengths;
          persistent_forward<T>(a, plan, stream);
        } else {
          cublasHandle_t handle = cublas_handle();
          float* gh_buf = f32(gh[size_t(ld)]);
          for (int64_t s = s0; s < s1; ++s) {
            const StepSlots st = step_slots(s, d, T_);
            const T* h_prev = states + st.prev * B * Ho;
            T* h_next = states + st.next * B * Ho;
            gemm(handle, false, true, B, GH, Ho, h_prev, Ho, w_hh, Ho, gh_buf, GH, 0.0f, ab,
                 CUDA_R_32F, compute);
            StepForwardArgs<T> a;
            a.mode = c.mode;
            a.B = int(B);
            a.H = int(H);
            a.G = int(G);
            a.S = int(S);
            a.gx = f32(gx[size_t(ld)]) + st.t * B * GH;
            a.gh = gh_buf;
            a.b_ih = b_ih;
            a.b_hh = b_hh;
            if (cells != nullptr) {
              a.c_prev = cells + st.prev * B * H;
              a.c_next = cells + st.next * B * H;
            }
            a.h_prev = h_prev;
            a.gates = gates != nullptr ? gates + st.t * B * S * H : nullptr;
            a.lengths = lengths;
            a.t = int(st.t);
            if (P > 0) {
              a.proj_in = proj_in + st.t * B * H;
            } else {
              a.h_next = h_next;
              a.y = y + st.t * B * W;
              a.ldy = W;
            }
            step_forward<T>(a, stream);
            if (P > 0) {
              gemm(handle, false, true, B, P, H, proj_in + st.t * B * H, H,
                   ptrs.weight(l, d, RnnWeightKind::w_hr), H, h_next, P, 0.0f, ab, ab, compute);
              proj_fixup<T>(h_next, h_prev, y + st.t * B * W, W, int(B), int(P), lengths, int(st.t),
                            stream);
            }
          }
        }
        if (k == K - 1) {
          EMBER_CUDA_CHECK(cudaMemcpyAsync(static_cast<T*>(p.h_n.data_ptr()) + ld * B * Ho,
                                           states + last * B * Ho, size_t(B * Ho) * sizeof(T),
                                           cudaMemcpyDeviceToDevice, stream));
          if (cells != nullptr)
            convert_elements<T, float>(static_cast<T*>(p.c_n.data_ptr()) + ld * B * H,
                                       cells + last * B * H, B * H, stream);
        }
        rec_done[size_t(ld)] = events.record(stream);
      }
    }
  }
  // Join: the caller's stream waits for every side stream.
  wait_event(raw(main), events.record(raw(in)));
  for (const Stream& s : rec) wait_event(raw(main), events.record(raw(s)));
}

}  // namespace

// With dropout the launches take Philox offsets that change every call: always direct.
void run_forward(const RnnProblem& p, bool persistent) {
  dispatch_floating<FloatingTypes::f32_bf16>(p.dtype, "rnn", [&](auto tag) {
    using T = decltype(tag);
    DeviceGuard device_guard(p.device());
    const ForwardTemps tmp = forward_temps(p, persistent);
    const auto launch = [&] { forward_launch<T>(p, persistent, tmp); };
    if (p.dropout_active()) return launch();
    eager_replay(p.device(), replay_key(p, persistent, {&tmp.gx, &tmp.gh}, Tensor()), launch);
  });
}

}  // namespace ember::cuda::rnn
