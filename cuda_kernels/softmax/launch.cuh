// Host side of the softmax algorithms (cuda_kernels/softmax/): the launch geometry that the
// algorithms' applies() and heuristics share with the launchers, and the launchers, one per
// algorithm family, each defined in that family's .cu and instantiated there for the dtypes its
// algorithm runs (float, __half, __nv_bfloat16; also double for launch_block and launch_column).
// Private to this family.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ember/cuda_kernels/softmax/rows.cuh"
#include "ember/kernel_interface/softmax.h"

namespace ember::cuda::softmax_impl {

using dispatch::Direction;

// cluster_rows (cluster.cu): blocks of 256 threads, up to 8 per row.
constexpr int kClusterThreads = 256;
constexpr int kClusterMaxBlocks = 8;  // the portable cluster size
// Values per thread: forward x; backward y and dL/dy (twice the registers per value).
template <bool Backward>
inline constexpr int kClusterPerThread = Backward ? 16 : 32;
template <bool Backward>
inline constexpr int64_t kClusterSegment = int64_t(kClusterThreads) * kClusterPerThread<Backward>;

// block_tma_ring (ring.cu): one block of 1024 threads per SM, 16 KiB chunks of shared memory.
constexpr int kRingThreads = 1024;
constexpr int kRingValues = 32;                     // per thread
constexpr int kRingChunkBytes = kRingThreads * 16;  // one 16-byte vector per thread
constexpr int kRingMaxSlots = 16;                   // barriers reserved (227 KiB: 14 used)
constexpr int64_t kRingMaxDim = int64_t(kRingThreads) * kRingValues;

// ---- host side: launch geometry ---------------------------------------------------------------

inline bool is_aligned16(const Tensor& t) { return !t.defined() || is_aligned(t.data_ptr(), 16); }

// 16-byte vectors along the rows: the row length a multiple of the vector and every base aligned.
inline bool rows_vectorizable(const SoftmaxProblem& p) {
  const int64_t V = 16 / int64_t(p.input.element_size());
  return p.dim_size % V == 0 && is_aligned16(p.input) && is_aligned16(p.output) &&
         is_aligned16(p.grad_output);
}

// Threads per block for rows of `length` elements: enough for about 4 vectors per thread.
inline int block_threads_for(int64_t length, size_t element_size) {
  const int64_t vectors = (length * int64_t(element_size) + 15) / 16;
  int threads = 128;
  while (threads < kMaxBlockThreads && int64_t(threads) * 4 < vectors) threads *= 2;
  return threads;
}

inline unsigned row_grid(int64_t rows) {
  return unsigned(std::min<int64_t>(rows, std::numeric_limits<int32_t>::max()));
}

inline size_t smem_bytes(const SoftmaxProblem& p) {
  const size_t row = size_t((p.dim_size + 7) / 8 * 8) * p.input.element_size();
  return p.direction == Direction::forward ? row : 2 * row;
}

inline size_t smem_limit(const SoftmaxProblem& p) {
  // The opt-in per-block limit, less the kernels' static scratch (32 x 16 bytes at most).
  const size_t optin = device_properties(p.device().index).shared_memory_per_block_optin;
  return optin > 1024 ? optin - 1024 : 0;
}

// multi_block: how many blocks share a row so that about two waves of the GPU are busy, each
// segment at least kMinSegment elements. 1 when not worth it.
constexpr int64_t kMinSegment = 4096;
inline int64_t multi_block_splits(const SoftmaxProblem& p) {
  if (p.inner != 1) return 1;
  const int64_t sms = device_properties(p.device().index).sm_count;
  if (p.outer >= sms) return 1;
  const int64_t wanted = (2 * sms + p.outer - 1) / p.outer;
  return std::max<int64_t>(1, std::min(wanted, p.dim_size / kMinSegment));
}
inline int64_t multi_block_segment(const SoftmaxProblem& p, int64_t splits) {
  const int64_t V = 16 / int64_t(p.input.element_size());
  const int64_t seg = (p.dim_size + splits - 1) / splits;
  return (seg + V - 1) / V * V;  // vector aligned; the last segment may be shorter
}

// cluster_rows: blocks per row (each holds a segment of kClusterSegment values); more than
// kClusterMaxBlocks means the algorithm does not apply.
inline int64_t cluster_blocks(const SoftmaxProblem& p) {
  const int64_t segment =
      p.direction == Direction::forward ? kClusterSegment<false> : kClusterSegment<true>;
  return (p.dim_size + segment - 1) / segment;
}

// block_tma_ring: chunks of shared memory the ring has on this device, and chunks a row takes.
inline int ring_slots(const SoftmaxProblem& p) {
  return int(std::min<size_t>(kRingMaxSlots, smem_limit(p) / kRingChunkBytes));
}
inline int64_t ring_chunks_per_row(const SoftmaxProblem& p) {
  const int64_t vectors = p.dim_size / (16 / int64_t(p.input.element_size()));
  return (vectors + kRingThreads - 1) / kRingThreads;
}

// ---- launchers --------------------------------------------------------------------------------

// warp_per_row (warp_smem.cu).
template <typename T>
void launch_warp(const SoftmaxProblem& p, cudaStream_t stream);
// block_smem (warp_smem.cu).
template <typename T>
void launch_smem(const SoftmaxProblem& p, cudaStream_t stream);
// cluster_rows (cluster.cu).
template <typename T>
void launch_cluster(const SoftmaxProblem& p, cudaStream_t stream);
// block_tma_ring, forward only (ring.cu).
template <typename T>
void launch_ring(const SoftmaxProblem& p, cudaStream_t stream);
// block_multipass (splits == 1) and multi_block (multipass.cu).
template <typename T>
void launch_block(const SoftmaxProblem& p, int64_t splits, void* workspace, cudaStream_t stream);
// column (multipass.cu).
template <typename T>
void launch_column(const SoftmaxProblem& p, cudaStream_t stream);

}  // namespace ember::cuda::softmax_impl
