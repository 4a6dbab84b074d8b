// The persistent CUDA kernels of the rnn op's "persistent" algorithm (cuda_kernels/rnn/rnn.cuh):
// the whole recurrence of one (layer, direction) in one cooperative launch with a grid-wide
// barrier per step, forward (W_hh rows and cell states on chip) and backward (W_hh columns and
// the gradient carries on chip, recurrent sums in a fixed order), their launch plans
// (persistent_plan, cached per shape and device) and launchers. One instantiation per dtype
// (float and __nv_bfloat16), listed at the end.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <map>
#include <shared_mutex>
#include <tuple>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/rnn/cell.cuh"
#include "ember/cuda_kernels/rnn/rnn.cuh"

namespace ember::cuda::rnn {
namespace {

namespace cg = cooperative_groups;
using dispatch::Direction;

// ---- persistent forward -------------------------------------------------------------------------

constexpr int kPersistentThreads = 256;

__host__ __device__ inline size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Row stride of the shared-memory tiles in elements: one 4-byte word more than a row, so that the
// rows threads of one warp read at the same k start on different banks.
__host__ __device__ inline int padded_row(int H, int element_bytes) {
  return H + 4 / element_bytes;
}

// Shared memory of one block: W_hh rows [R][ldw] (T), staged hidden rows [bt][ldw] (T), recurrent
// pre-activations [B][R] (float), cell states [B][U] (float).
size_t persistent_smem_bytes(int H, int G, int U, int B, int bt, size_t es) {
  const size_t ldw = size_t(padded_row(H, int(es)));
  return align16(size_t(G) * U * ldw * es) + align16(size_t(bt) * ldw * es) +
         align16(size_t(B) * G * U * 4) + align16(size_t(B) * U * 4);
}

template <typename T>
__global__ void __launch_bounds__(kPersistentThreads)
    rnn_persistent_forward_kernel(const PersistentForwardArgs<T> a, int U, int bt) {
  cg::grid_group grid = cg::this_grid();
  extern __shared__ __align__(16) unsigned char smem[];
  const int H = a.H, G = a.G, B = a.B, R = G * U;
  const int ldw = padded_row(H, int(sizeof(T)));
  const int j0 = int(blockIdx.x) * U;
  const int units = min(U, H - j0);
  T* w_s = reinterpret_cast<T*>(smem);
  T* h_s = reinterpret_cast<T*>(smem + align16(size_t(R) * ldw * sizeof(T)));
  float* acc_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(h_s) +
                                          align16(size_t(bt) * ldw * sizeof(T)));
  float* c_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(acc_s) +
                                        align16(size_t(B) * R * 4));
  const int tid = int(threadIdx.x), nthreads = int(blockDim.x);
  const int64_t GH = int64_t(G) * H;
  const bool lstm = a.mode == RnnMode::lstm;

  // Row r = g * U + u of this block is W_hh row g * H + j0 + u (zero rows past the last unit).
  for (int idx = tid; idx < R * H; idx += nthreads) {
    const int r = idx / H, k = idx - r * H;
    const int g = r / U, u = r - g * U;
    w_s[r * ldw + k] = u < units ? a.w_hh[(int64_t(g) * H + j0 + u) * H + k] : convert<T>(0.0f);
  }
  const int first = a.direction == 0 ? 0 : a.T_;
  if (lstm)
    for (int idx = tid; idx < B * U; idx += nthreads) {
      const int b = idx / U, u = idx - b * U;
      c_s[idx] = u < units ? a.cells[(int64_t(first) * B + b) * H + j0 + u] : 0.0f;
    }
  __syncthreads();

  for (int s = 0; s < a.T_; ++s) {
    const int t = a.direction == 0 ? s : a.T_ - 1 - s;
    const int prev = a.direction == 0 ? t : t + 1, next = a.direction == 0 ? t + 1 : t;
    const T* h_prev = a.states + int64_t(prev) * B * H;
    T* h_next = a.states + int64_t(next) * B * H;
    // Recurrent pre-activations of this block's rows for every batch row, bt rows of h at a time.
    for (int b0 = 0; b0 < B; b0 += bt) {
      const int nb = min(bt, B - b0);
      for (int idx = tid; idx < nb * H; idx += nthreads) {
        const int b = idx / H, k = idx - b * H;
        // From L2: other blocks wrote these in the previous step (ordered by the grid barrier).
        h_s[b * ldw + k] = __ldcg(h_prev + int64_t(b0 + b) * H + k);
      }
      __syncthreads();
      for (int item = tid; item < nb * R; item += nthreads) {
        const int b = item / R, r = item - b * R;
        const T* w = w_s + r * ldw;
        const T* h = h_s + b * ldw;
        float sum = 0.0f;
        for (int k = 0; k < H; ++k) sum += convert<float>(w[k]) * convert<float>(h[k]);
        acc_s[(b0 + b) * R + r] = sum;
      }
      __syncthreads();
    }
    // Pointwise for this block's units.
    for (int idx = tid; idx < B * units; idx += nthreads) {
      const int b = idx / units, u = idx - b * units, j = j0 + u;
      const int64_t at = int64_t(b) * H + j;
      T* y = a.y + (int64_t(t) * B + b) * a.ldy + j;
      T* saved = a.gates != nullptr ? a.gates + (int64_t(t) * B + b) * a.S * H : nullptr;
      if (!step_valid(a.lengths, t, b)) {
        h_next[at] = __ldcg(h_prev + at);
        if (lstm) a.cells[int64_t(next) * B * H + at] = c_s[b * U + u];
        *y = convert<T>(0.0f);
        if (saved != nullptr)
          for (int q = 0; q < a.S; ++q) saved[q * H + j] = convert<T>(0.0f);
        continue;
      }
      const float* gx = a.gx + (int64_t(t) * B + b) * GH;
      const float* acc = acc_s + b * R;
      auto pre = [&](int gate) {
        const int k = gate * H + j;
        return gx[k] + bias_at(a.b_ih, k) + acc[gate * U + u] + bias_at(a.b_hh, k);
      };
      float h = 0.0f;
      switch (a.mode) {
        case RnnMode::lstm: {
          const LstmCell cell = lstm_cell(pre(0), pre(1), pre(2), pre(3), c_s[b * U + u]);
          c_s[b * U + u] = cell.c;
          a.cells[int64_t(next) * B * H + at] = cell.c;
          save_gates(saved, H, j, cell.i, cell.f, cell.g, cell.o);
          h = cell.h;
          break;
        }
        case RnnMode::gru: {
          const GruCell cell = gru_cell(pre(0), pre(1), gx[2 * H + j] + bias_at(a.b_ih, 2 * H + j),
                                        acc[2 * U + u] + bias_at(a.b_hh, 2 * H + j),
                                        convert<float>(__ldcg(h_prev + at)));
          save_gates(saved, H, j, cell.r, cell.z, cell.n, cell.hn);
          h = cell.h;
          break;
        }
        case RnnMode::rnn_tanh:
          h = tanhf(pre(0));
          break;
        case RnnMode::rnn_relu:
          h = fmaxf(pre(0), 0.0f);
          break;
      }
      const T hv = convert<T>(h);
      h_next[at] = hv;
      *y = hv;
    }
    // Every block's h_next must be complete (and visible) before any block stages it.
    grid.sync();
  }
}

// ---- persistent backward ------------------------------------------------------------------------

// Row stride (elements) of the backward kernel's shared tiles: G * H rounded up to 16 bytes, so
// that rows can be staged with 16-byte copies and read as pairs; the padding holds zeros. A warp
// reads consecutive elements of one row at a time, so no bank padding is needed.
__host__ __device__ inline int backward_row(int GH, int element_bytes) {
  const int per16 = 16 / element_bytes;
  return (GH + per16 - 1) / per16 * per16;
}

// Shared memory of one backward block: W_hh columns [U][ldg] (T), staged dG rows [bt][ldg] (T),
// hidden and cell carries [rows][U] (float) each.
size_t persistent_backward_smem_bytes(int H, int G, int U, int rows, int bt, size_t es) {
  const size_t ldg = size_t(backward_row(G * H, int(es)));
  return align16(size_t(U) * ldg * es) + align16(size_t(bt) * ldg * es) +
         2 * align16(size_t(rows) * U * 4);
}

// Two consecutive elements of a shared row as floats.
__device__ __forceinline__ float2 load_pair(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// Register tile of the recurrent product: each warp computes kTileRows batch rows x kTileUnits
// units, its lanes splitting the reduction over G * H (lane l takes the element pairs l, l + 32,
// ...), then a butterfly over the lanes: a fixed summation order.
constexpr int kTileRows = 4, kTileUnits = 4;

// One block per SM (the plan's grid): the register tiles may use what they need.
template <typename T>
__global__ void __launch_bounds__(kPersistentThreads, 1)
    rnn_persistent_backward_kernel(const PersistentBackwardArgs<T> a, int U, int rows_per_group,
                                   int bt) {
  cg::grid_group grid = cg::this_grid();
  extern __shared__ __align__(16) unsigned char smem[];
  const int H = a.H, G = a.G, B = a.B, GH = G * H;
  const int ldg = backward_row(GH, int(sizeof(T)));
  const int unit_blocks = (H + U - 1) / U;
  const int j0 = int(blockIdx.x) % unit_blocks * U, units = min(U, H - j0);
  const int row0 = int(blockIdx.x) / unit_blocks * rows_per_group;  // first batch row of the group
  const int rows = min(rows_per_group, B - row0);                   // >= 1 (the plan's grid)
  T* w_s = reinterpret_cast<T*>(smem);
  T* g_s = reinterpret_cast<T*>(smem + align16(size_t(U) * ldg * sizeof(T)));
  float* dh_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(g_s) +
                                         align16(size_t(bt) * ldg * sizeof(T)));
  float* dc_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(dh_s) +
                                         align16(size_t(rows_per_group) * U * 4));
  const int tid = int(threadIdx.x), nthreads = int(blockDim.x);
  const int lane = tid % 32, warp = tid / 32, nwarps = nthreads / 32;
  const bool lstm = a.mode == RnnMode::lstm;

  // w_s[u][r] = W_hh[r][j0 + u]: the column of unit u, zero past the last unit and past G * H.
  for (int idx = tid; idx < U * ldg; idx += nthreads) {
    const int r = idx / U, u = idx - r * U;
    w_s[u * ldg + r] = u < units && r < GH ? a.w_hh[int64_t(r) * H + j0 + u] : convert<T>(0.0f);
  }
  // The carries of this block's (row, unit) pairs start from the gradients of h_n and c_n.
  for (int idx = tid; idx < rows * U; idx += nthreads) {
    const int b = idx / U, u = idx - b * U;
    const int64_t at = int64_t(row0 + b) * H + j0 + u;
    const bool own = u < units;
    dh_s[idx] = own && a.grad_h_n != nullptr ? convert<float>(a.grad_h_n[at]) : 0.0f;
    dc_s[idx] = own && a.grad_c_n != nullptr ? convert<float>(a.grad_c_n[at]) : 0.0f;
  }
  __syncthreads();

  for (int s = 0; s < a.T_; ++s) {
    // Reverse of the forward's order: direction 0 ran t = 0..T-1, direction 1 t = T-1..0.
    const int t = a.direction == 0 ? a.T_ - 1 - s : s;
    const int prev = a.direction == 0 ? t : t + 1, next = a.direction == 0 ? t + 1 : t;
    const int64_t step_row = int64_t(t) * B;  // row (t, 0) of the [T, B, ...] tensors
    // 1) Gate gradients of this block's (row, unit) pairs; the hidden carry becomes the direct
    // part.
    for (int idx = tid; idx < rows * units; idx += nthreads) {
      const int b = idx / units, u = idx - b * units, bb = row0 + b, j = j0 + u;
      T* dgx = a.dgx + (step_row + bb) * GH;
      T* dgh = a.dgh + (step_row + bb) * GH;
      if (!step_valid(a.lengths, t, bb)) {
        zero_gate_grads(G, H, j, dgx, dgh);  // both carries pass unchanged
        continue;
      }
      float* dh = dh_s + b * U + u;
      const float dh_total =
          *dh + (a.dy != nullptr ? convert<float>(a.dy[(step_row + bb) * a.ldy + j]) : 0.0f);
      const T* saved = a.gates != nullptr ? a.gates + (step_row + bb) * a.S * H : nullptr;
      const float* c_prev = lstm ? a.cells + int64_t(prev) * B * H : nullptr;
      const float* c_next = lstm ? a.cells + int64_t(next) * B * H : nullptr;
      *dh = cell_backward(a.mode, H, j, dh_total, saved, c_prev, c_next,
                          a.states + int64_t(prev) * B * H, a.states + int64_t(next) * B * H,
                          int64_t(bb) * H + j, dc_s + b * U + u, dgx, dgh);
    }
    // Every block's dG of step t must be complete (and visible) before any block stages it.
    grid.sync();
    // 2) dh_prev += dG W_hh[:, j0 : j0 + U) for the group's rows, bt rows of dG at a time.
    for (int b0 = 0; b0 < rows; b0 += bt) {
      const int nb = min(bt, rows - b0);
      const T* src = a.dgh + (step_row + row0 + b0) * GH;
      if (ldg == GH) {
        // Rows are 16-byte multiples: 16-byte copies from L2 (written by other blocks).
        const int per_row = GH * int(sizeof(T)) / 16;
        const uint4* src4 = reinterpret_cast<const uint4*>(src);
        uint4* dst4 = reinterpret_cast<uint4*>(g_s);
        for (int idx = tid; idx < nb * per_row; idx += nthreads) dst4[idx] = __ldcg(src4 + idx);
      } else {
        for (int idx = tid; idx < nb * ldg; idx += nthreads) {
          const int b = idx / ldg, r = idx - b * ldg;
          g_s[idx] = r < GH ? __ldcg(src + int64_t(b) * GH + r) : convert<T>(0.0f);
        }
      }
      __syncthreads();
      const int row_tiles = (nb + kTileRows - 1) / kTileRows;
      const int unit_tiles = (units + kTileUnits - 1) / kTileUnits;
      for (int tile = warp; tile < row_tiles * unit_tiles; tile += nwarps) {
        const int rb = tile / unit_tiles * kTileRows, ub = tile % unit_tiles * kTileUnits;
        // Rows and units past the end repeat the last one (valid memory); their sums are dropped.
        const T* g_row[kTileRows];
        const T* w_row[kTileUnits];
#pragma unroll
        for (int i = 0; i < kTileRows; ++i) g_row[i] = g_s + min(rb + i, nb - 1) * ldg;
#pragma unroll
        for (int q = 0; q < kTileUnits; ++q) w_row[q] = w_s + min(ub + q, units - 1) * ldg;
        float acc[kTileRows][kTileUnits] = {};
        for (int k = 2 * lane; k < ldg; k += 64) {
          float2 g[kTileRows], w[kTileUnits];
#pragma unroll
          for (int i = 0; i < kTileRows; ++i) g[i] = load_pair(g_row[i] + k);
#pragma unroll
          for (int q = 0; q < kTileUnits; ++q) w[q] = load_pair(w_row[q] + k);
#pragma unroll
          for (int i = 0; i < kTileRows; ++i)
#pragma unroll
            for (int q = 0; q < kTileUnits; ++q) {
              acc[i][q] = fmaf(g[i].x, w[q].x, acc[i][q]);
              acc[i][q] = fmaf(g[i].y, w[q].y, acc[i][q]);
            }
        }
#pragma unroll
        for (int i = 0; i < kTileRows; ++i)
#pragma unroll
          for (int q = 0; q < kTileUnits; ++q)
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2)
              acc[i][q] += __shfl_xor_sync(0xffffffffu, acc[i][q], offset);
        if (lane == 0)
#pragma unroll
          for (int i = 0; i < kTileRows; ++i)
#pragma unroll
            for (int q = 0; q < kTileUnits; ++q)
              if (rb + i < nb && ub + q < units) dh_s[(b0 + rb + i) * U + ub + q] += acc[i][q];
      }
      __syncthreads();
    }
  }
  // The carries are now the gradients of h0 and c0.
  for (int idx = tid; idx < rows * units; idx += nthreads) {
    const int b = idx / units, u = idx - b * units;
    const int64_t at = int64_t(row0 + b) * H + j0 + u;
    if (a.grad_h0 != nullptr) a.grad_h0[at] = convert<T>(dh_s[b * U + u]);
    if (a.grad_c0 != nullptr) a.grad_c0[at] = convert<T>(dc_s[b * U + u]);
  }
}

}  // namespace

namespace {

// The plan for one problem shape on `device` (the current device), T the element type. Both
// kernels split the hidden units over the blocks, each owning U of them, one block per SM where
// possible; the backward also splits the batch into up to 8 groups of at least 4 rows (each group
// with its own blocks: a block then stages only its group's dG rows, G times the size of the
// forward's h rows), taking the most groups whose W_hh columns and a 4-row tile still fit.
template <typename T>
PersistentPlan compute_persistent_plan(Direction direction, int64_t G, int64_t H, int64_t B,
                                       int device) {
  PersistentPlan plan;
  const DeviceProperties& props = device_properties(device);
  if (!props.cooperative_launch || props.sm_count <= 0) return plan;
  const bool forward = direction == Direction::forward;
  const size_t es = sizeof(T);
  const void* kernel = forward ? reinterpret_cast<const void*>(rnn_persistent_forward_kernel<T>)
                               : reinterpret_cast<const void*>(rnn_persistent_backward_kernel<T>);
  // What the kernel may ask for: the device's opt-in limit less the kernel's static shared memory.
  const size_t limit =
      forward ? size_t(opt_in_max_dynamic_shared_memory<rnn_persistent_forward_kernel<T>>(device))
              : size_t(opt_in_max_dynamic_shared_memory<rnn_persistent_backward_kernel<T>>(device));
  auto smem_bytes = [&](int U, int rows, int bt) {
    return forward ? persistent_smem_bytes(int(H), int(G), U, int(B), bt, es)
                   : persistent_backward_smem_bytes(int(H), int(G), U, rows, bt, es);
  };
  const size_t row = forward ? align16(size_t(padded_row(int(H), int(es))) * es)
                             : size_t(backward_row(int(G * H), int(es))) * es;
  for (int64_t groups = forward ? 1 : std::min<int64_t>(8, std::max<int64_t>(1, B / 4));
       groups >= 1; groups /= 2) {
    const int rows = int((B + groups - 1) / groups);
    const int64_t used_groups = (B + rows - 1) / rows;  // every group non-empty
    // The fewest units per block that let all blocks fit on the chip at one block per SM.
    const int64_t unit_blocks = std::max<int64_t>(1, props.sm_count / used_groups);
    const int U = int((H + unit_blocks - 1) / unit_blocks);
    const int64_t blocks = (H + U - 1) / U * used_groups;
    const int min_tile = forward ? 1 : std::min(rows, kTileRows);
    const size_t fixed = smem_bytes(U, rows, 0);
    if (fixed + size_t(min_tile) * row > limit) continue;
    const int bt = int(std::min<size_t>(size_t(rows), (limit - fixed) / row));
    const size_t smem = smem_bytes(U, rows, bt);
    if (smem > limit) continue;
    // The grid must be co-resident: check the occupancy the kernel really gets with this smem.
    int per_sm = 0;
    EMBER_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kPersistentThreads, smem));
    if (per_sm < 1 || int64_t(per_sm) * props.sm_count < blocks) continue;
    plan.ok = true;
    plan.units_per_block = U;
    plan.batch_groups = int(used_groups);
    plan.rows_per_group = rows;
    plan.blocks = int(blocks);
    plan.batch_tile = bt;
    plan.smem_bytes = smem;
    return plan;
  }
  return plan;
}

// What a plan depends on besides the device: direction, gates, hidden size, batch, dtype.
using PlanKey = std::tuple<Direction, int64_t, int64_t, int64_t, DType>;

}  // namespace

// Asked three times per call (applies, cost, run), so each (direction, shape, device) is planned
// once; the cache holds one entry per distinct key seen on the device.
PersistentPlan persistent_plan(const RnnConfig& c, DType dtype, int device, Direction direction) {
  if (c.proj_size > 0 || (dtype != DType::f32 && dtype != DType::bf16)) return {};
  const int64_t H = c.hidden_size, B = c.batch, G = c.gates();
  if (H > 4096 || B > 4096) return {};
  struct Cache {
    std::shared_mutex mutex;
    std::map<PlanKey, PersistentPlan> plans;
  };
  static PerDevice<Cache*> caches;
  Cache& cache = *caches.get(device, [](int) { return new Cache; });  // never freed, as PerDevice
  const PlanKey key{direction, G, H, B, dtype};
  {
    std::shared_lock<std::shared_mutex> lock(cache.mutex);
    const auto it = cache.plans.find(key);
    if (it != cache.plans.end()) return it->second;
  }
  PersistentPlan plan;
  {
    DeviceGuard guard(Device::cuda(device));  // the occupancy query reads the current device
    dispatch_floating<FloatingTypes::f32_bf16>(dtype, "rnn", [&](auto tag) {
      plan = compute_persistent_plan<decltype(tag)>(direction, G, H, B, device);
    });
  }
  std::unique_lock<std::shared_mutex> lock(cache.mutex);
  cache.plans.emplace(key, plan);
  return plan;
}

template <typename T>
void persistent_forward(const PersistentForwardArgs<T>& a, const PersistentPlan& plan,
                        cudaStream_t stream) {
  // A valid plan comes only from persistent_plan, which opted the kernel in to the dynamic shared
  // memory of this device.
  EMBER_INTERNAL_ASSERT(plan.ok, "rnn: persistent kernel launched without a valid plan");
  PersistentForwardArgs<T> args = a;
  int units = plan.units_per_block, tile = plan.batch_tile;
  void* params[] = {&args, &units, &tile};
  EMBER_CUDA_CHECK(cudaLaunchCooperativeKernel(
      reinterpret_cast<const void*>(rnn_persistent_forward_kernel<T>), dim3(unsigned(plan.blocks)),
      dim3(kPersistentThreads), params, plan.smem_bytes, stream));
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void persistent_backward(const PersistentBackwardArgs<T>& a, const PersistentPlan& plan,
                         cudaStream_t stream) {
  EMBER_INTERNAL_ASSERT(plan.ok && plan.batch_groups >= 1,
                        "rnn: persistent backward kernel launched without a valid plan");
  PersistentBackwardArgs<T> args = a;
  int units = plan.units_per_block, rows = plan.rows_per_group, tile = plan.batch_tile;
  void* params[] = {&args, &units, &rows, &tile};
  EMBER_CUDA_CHECK(cudaLaunchCooperativeKernel(
      reinterpret_cast<const void*>(rnn_persistent_backward_kernel<T>), dim3(unsigned(plan.blocks)),
      dim3(kPersistentThreads), params, plan.smem_bytes, stream));
  EMBER_CUDA_LAUNCH_CHECK();
}

template void persistent_forward<float>(const PersistentForwardArgs<float>&, const PersistentPlan&,
                                        cudaStream_t);
template void persistent_forward<__nv_bfloat16>(const PersistentForwardArgs<__nv_bfloat16>&,
                                                const PersistentPlan&, cudaStream_t);
template void persistent_backward<float>(const PersistentBackwardArgs<float>&,
                                         const PersistentPlan&, cudaStream_t);
template void persistent_backward<__nv_bfloat16>(const PersistentBackwardArgs<__nv_bfloat16>&,
                                                 const PersistentPlan&, cudaStream_t);

}  // namespace ember::cuda::rnn
