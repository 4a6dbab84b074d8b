// The multi-tensor apply machinery shared by the optimizer kernels of this family
// (cuda_kernels/optim/optim.cu, optim_more.cu): the host packs the pointers and sizes of many
// tensors into the kernel argument (MultiTensorMeta, under the classic 4 KB parameter limit), every
// block takes one chunk of kMultiTensorChunk elements of one tensor, and apply_to_chunk walks the
// chunk with 16-byte vectors when all of its pointers allow, else element by element. Everything
// is in an unnamed namespace: each .cu of the family gets its own copy of these small templates.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/optim.h"

namespace ember::cuda {
namespace {

constexpr int kMultiTensorThreads = 512;
constexpr int kMaxBlocksPerLaunch = 320;
// What the pointer lists may take of the 4 KB kernel-parameter space, after the block tables and
// the kernels' scalar arguments.
constexpr int kPointerBytes = 4096 - kMaxBlocksPerLaunch * (1 + 4) - 256;

template <int Depth>
struct MultiTensorMeta {
  // Per tensor: Depth list pointers, the size and one more pointer (steps).
  static constexpr int kMaxTensors =
      kPointerBytes / ((Depth + 2) * 8) < 110 ? kPointerBytes / ((Depth + 2) * 8) : 110;
  void* ptrs[Depth][kMaxTensors];
  int64_t numel[kMaxTensors];
  // Optimizers only: the step count (already incremented), or the per-tensor float64 factors of
  // optim_more.cu, whose pointer travels in this slot.
  const float* steps[kMaxTensors];
  unsigned char block_to_tensor[kMaxBlocksPerLaunch];
  int32_t block_to_chunk[kMaxBlocksPerLaunch];
};
static_assert(MultiTensorMeta<5>::kMaxTensors >= 32 && MultiTensorMeta<1>::kMaxTensors < 256);
static_assert(sizeof(MultiTensorMeta<1>) <= 4096 - 256 && sizeof(MultiTensorMeta<5>) <= 4096 - 256,
              "the tensor lists must leave room for the kernels' other arguments");

// ---- host: packing ------------------------------------------------------------------------------

// Calls launch(meta, num_blocks) for consecutive packs of the tensors of `lists` (Depth lists of
// equal length; list 0 gives the sizes). `steps` (may be null) fills meta.steps. Empty tensors are
// skipped.
template <int Depth, typename Launch>
void for_each_pack(const std::array<const std::vector<Tensor>*, Depth>& lists,
                   const std::vector<Tensor>* steps, Launch&& launch) {
  using Meta = MultiTensorMeta<Depth>;
  Meta meta{};
  int num_tensors = 0, num_blocks = 0;
  const size_t count = lists[0]->size();
  for (size_t t = 0; t < count; ++t) {
    const int64_t numel = (*lists[0])[t].numel();
    if (numel == 0) continue;
    for (int d = 0; d < Depth; ++d) meta.ptrs[d][num_tensors] = (*lists[d])[t].data_ptr();
    meta.numel[num_tensors] = numel;
    meta.steps[num_tensors] =
        steps != nullptr ? static_cast<const float*>((*steps)[t].data_ptr()) : nullptr;
    ++num_tensors;
    const int64_t chunks = (numel + kMultiTensorChunk - 1) / kMultiTensorChunk;
    EMBER_CHECK(chunks <= INT32_MAX, "multi-tensor kernel: a tensor of ", numel,
                " elements is too large");
    for (int64_t c = 0; c < chunks; ++c) {
      meta.block_to_tensor[num_blocks] = static_cast<unsigned char>(num_tensors - 1);
      meta.block_to_chunk[num_blocks] = static_cast<int32_t>(c);
      ++num_blocks;
      const bool last_chunk = c + 1 == chunks;
      if (num_blocks == kMaxBlocksPerLaunch || (num_tensors == Meta::kMaxTensors && last_chunk)) {
        launch(meta, num_blocks);
        num_blocks = 0;
        if (last_chunk) {
          num_tensors = 0;
        } else {  // the current tensor continues in the next launch, as its slot 0
          for (int d = 0; d < Depth; ++d) meta.ptrs[d][0] = meta.ptrs[d][num_tensors - 1];
          meta.numel[0] = meta.numel[num_tensors - 1];
          meta.steps[0] = meta.steps[num_tensors - 1];
          num_tensors = 1;
        }
      }
    }
  }
  if (num_blocks > 0) launch(meta, num_blocks);
}

inline int64_t total_chunks(const std::vector<Tensor>& tensors) {
  int64_t chunks = 0;
  for (const Tensor& t : tensors) chunks += (t.numel() + kMultiTensorChunk - 1) / kMultiTensorChunk;
  return chunks;
}

template <typename T>
T* device_ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// ---- device: walking one chunk ------------------------------------------------------------------

__device__ __forceinline__ bool is_aligned_16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

__device__ __forceinline__ bool step_skipped(const float* found_inf) {
  return found_inf != nullptr && *found_inf != 0.0f;
}

// This block's chunk of tensor block_to_tensor[blockIdx.x]: the Depth list pointers moved to the
// chunk's start, and how many elements it has.
template <typename T, int Depth>
struct Chunk {
  T* ptr[Depth];
  int64_t n;
  int tensor;
};

template <typename T, int Depth>
__device__ __forceinline__ Chunk<T, Depth> this_chunk(const MultiTensorMeta<Depth>& meta) {
  Chunk<T, Depth> c;
  c.tensor = meta.block_to_tensor[blockIdx.x];
  const int64_t begin = int64_t(meta.block_to_chunk[blockIdx.x]) * kMultiTensorChunk;
  const int64_t left = meta.numel[c.tensor] - begin;
  c.n = left < kMultiTensorChunk ? left : kMultiTensorChunk;
#pragma unroll
  for (int d = 0; d < Depth; ++d) c.ptr[d] = static_cast<T*>(meta.ptrs[d][c.tensor]) + begin;
  return c;
}

// Applies op(v) to every element of the chunk, where v holds the element's value in each of the
// Depth lists (in the compute type) and may be changed; lists whose bit is set in WriteMask are
// stored back. 16-byte vectors of every list when the chunk's pointers allow, else elements.
template <typename T, int Depth, unsigned WriteMask, typename Op>
__device__ __forceinline__ void apply_to_chunk(const Chunk<T, Depth>& c, Op& op) {
  using A = OpMath<T>;
  constexpr int V = 16 / sizeof(T);
  bool aligned = true;
#pragma unroll
  for (int d = 0; d < Depth; ++d) aligned = aligned && is_aligned_16(c.ptr[d]);
  int64_t done = 0;
  if (aligned) {
    const int64_t num_vectors = c.n / V;
    for (int64_t i = threadIdx.x; i < num_vectors; i += blockDim.x) {
      AlignedVec<T, V> vec[Depth];
#pragma unroll
      for (int d = 0; d < Depth; ++d)
        vec[d] = reinterpret_cast<const AlignedVec<T, V>*>(c.ptr[d])[i];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        A v[Depth];
#pragma unroll
        for (int d = 0; d < Depth; ++d) v[d] = convert<A>(vec[d].v[j]);
        op(v);
#pragma unroll
        for (int d = 0; d < Depth; ++d)
          if (WriteMask & (1u << d)) vec[d].v[j] = convert<T>(v[d]);
      }
#pragma unroll
      for (int d = 0; d < Depth; ++d)
        if (WriteMask & (1u << d)) reinterpret_cast<AlignedVec<T, V>*>(c.ptr[d])[i] = vec[d];
    }
    done = num_vectors * V;
  }
  for (int64_t i = done + threadIdx.x; i < c.n; i += blockDim.x) {
    A v[Depth];
#pragma unroll
    for (int d = 0; d < Depth; ++d) v[d] = convert<A>(c.ptr[d][i]);
    op(v);
#pragma unroll
    for (int d = 0; d < Depth; ++d)
      if (WriteMask & (1u << d)) c.ptr[d][i] = convert<T>(v[d]);
  }
}

// ---- step counts
// ----------------------------------------------------------------------------------

constexpr int kMaxStepsPerLaunch = 480;
struct StepList {
  float* steps[kMaxStepsPerLaunch];
  int count;
};

__global__ void increment_steps_kernel(StepList list, const float* found_inf) {
  if (step_skipped(found_inf)) return;
  const int i = threadIdx.x;
  if (i < list.count) *list.steps[i] += 1.0f;
}

// Adds one to every step count (unless found_inf is set), before the update kernels read them.
inline void increment_steps(const std::vector<Tensor>& steps, const float* found_inf,
                            cudaStream_t stream) {
  for (size_t first = 0; first < steps.size(); first += kMaxStepsPerLaunch) {
    StepList list;
    list.count = int(std::min<size_t>(kMaxStepsPerLaunch, steps.size() - first));
    for (int i = 0; i < list.count; ++i)
      list.steps[i] = static_cast<float*>(steps[first + i].data_ptr());
    increment_steps_kernel<<<1, kMultiTensorThreads, 0, stream>>>(list, found_inf);
    EMBER_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace
}  // namespace ember::cuda
