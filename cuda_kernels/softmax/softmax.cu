// The CUDA softmax / log_softmax algorithms of kernel_interface/softmax.h: what each applies to,
// its heuristic cost, and its registration in the "softmax" slots (forward and backward), so that
// the algorithm cache picks one per shape:
//   warp_per_row     rows of <= 1024 values held in registers, one warp per row (warp_smem.cu);
//   block_smem       one block per row, the row cached in shared memory (warp_smem.cu);
//   cluster_rows     rows of 1025 to 65536 values (backward 32768), sm_90: a cluster of up to 8
//                    blocks per row, each holding its segment in registers, the blocks' partial
//                    statistics exchanged through distributed shared memory (1 read + 1 write;
//                    several rows per SM at once, where block_smem fits one f32 row of 32768)
//                    (cluster.cu);
//   block_tma_ring   forward rows of 1025 to 32768 values in 16-byte vectors, sm_90: a persistent
//                    block per SM holding each row in registers while TMA bulk copies stream the
//                    next rows into a ring of shared-memory chunks (1 read + 1 write; loads in
//                    flight through every row's reduction and stores) (ring.cu);
//   block_multipass  one block per row re-reading global memory (multipass.cu);
//   multi_block      each row split over several blocks, for few very long rows (multipass.cu);
//   column           the reduced dim is not innermost: a thread per column (multipass.cu).
// f16/bf16/f32 compute in float (f64 in double, which only block_multipass, multi_block and
// column accept). 16-byte vector accesses wherever the row length and pointers allow; the online
// statistics take a whole vector at a time (one max, at most one rescale, one exponential per
// value), which keeps 16-bit rows at memory speed. Every kernel writes its output (gradients are
// never accumulated) and is deterministic. Cross-entropy is in cross_entropy.cu.
#include "ember/cuda_kernels/softmax/launch.cuh"

namespace ember::cuda::softmax_impl {
namespace {

// ---- algorithms -------------------------------------------------------------------------------

enum class SoftmaxAlgo { warp, smem, cluster, ring, block, multi_block, column };

// The name each algorithm is registered and reported under.
const char* algo_name(SoftmaxAlgo algo) {
  switch (algo) {
    case SoftmaxAlgo::warp:
      return "warp_per_row";
    case SoftmaxAlgo::smem:
      return "block_smem";
    case SoftmaxAlgo::cluster:
      return "cluster_rows";
    case SoftmaxAlgo::ring:
      return "block_tma_ring";
    case SoftmaxAlgo::block:
      return "block_multipass";
    case SoftmaxAlgo::multi_block:
      return "multi_block";
    case SoftmaxAlgo::column:
      return "column";
  }
  return "unknown";
}

void check_problem(const SoftmaxProblem& p) {
  EMBER_INTERNAL_ASSERT(p.input.device().is_cuda() && p.output.device() == p.input.device() &&
                            p.output.dtype() == p.input.dtype() &&
                            p.outer * p.dim_size * p.inner == p.output.numel() &&
                            (p.direction == Direction::forward ||
                             (p.grad_output.defined() && p.grad_output.dtype() == p.input.dtype())),
                        "softmax (CUDA): inconsistent problem [", p.outer, ", ", p.dim_size, ", ",
                        p.inner, "] for output ", p.output.shape_str());
}

void run_softmax(SoftmaxAlgo algo, const SoftmaxProblem& p, void* workspace) {
  check_problem(p);
  if (p.output.numel() == 0) return;
  DeviceGuard device_guard(p.device());
  cudaStream_t stream = stream_of(p.device());
  const DType dtype = p.input.dtype();
  // warp, smem, cluster and ring are built for the float-computed dtypes only; their applies()
  // keep float64 out.
  auto dispatch_reduced = [&](auto launch) {
    dispatch_floating<FloatingTypes::no_f64>(dtype, "softmax", algo_name(algo), launch);
  };
  auto dispatch_all = [&](auto launch) {
    dispatch_floating(dtype, "softmax", algo_name(algo), launch);
  };
  switch (algo) {
    case SoftmaxAlgo::warp:
      dispatch_reduced([&](auto tag) { launch_warp<decltype(tag)>(p, stream); });
      break;
    case SoftmaxAlgo::smem:
      dispatch_reduced([&](auto tag) { launch_smem<decltype(tag)>(p, stream); });
      break;
    case SoftmaxAlgo::cluster:
      dispatch_reduced([&](auto tag) { launch_cluster<decltype(tag)>(p, stream); });
      break;
    case SoftmaxAlgo::ring:
      dispatch_reduced([&](auto tag) { launch_ring<decltype(tag)>(p, stream); });
      break;
    case SoftmaxAlgo::block:
      dispatch_all([&](auto tag) { launch_block<decltype(tag)>(p, 1, nullptr, stream); });
      break;
    case SoftmaxAlgo::multi_block:
      dispatch_all([&](auto tag) {
        launch_block<decltype(tag)>(p, multi_block_splits(p), workspace, stream);
      });
      break;
    case SoftmaxAlgo::column:
      dispatch_all([&](auto tag) { launch_column<decltype(tag)>(p, stream); });
      break;
  }
}

dispatch::Algorithm<SoftmaxProblem> make_algorithm(SoftmaxAlgo algo) {
  dispatch::Algorithm<SoftmaxProblem> a;
  a.name = algo_name(algo);
  a.deterministic = true;
  a.run = [algo](const SoftmaxProblem& p, void* workspace) { run_softmax(algo, p, workspace); };
  switch (algo) {
    case SoftmaxAlgo::warp:
      a.applies = [](const SoftmaxProblem& p) {
        return p.inner == 1 && p.dim_size <= 32 * kWarpSize && p.input.dtype() != DType::f64;
      };
      // The best forward for rows <= 1024; in the backward the shared-memory variant is as fast
      // or faster.
      a.heuristic_cost = [](const SoftmaxProblem& p) {
        return p.direction == Direction::forward ? 1.0 : 2.0;
      };
      break;
    case SoftmaxAlgo::smem:
      a.applies = [](const SoftmaxProblem& p) {
        return p.inner == 1 && p.input.dtype() != DType::f64 && smem_bytes(p) <= smem_limit(p);
      };
      // Backward rows above 64 KiB (y and dL/dy) leave too few blocks per SM: re-reading from L2
      // (block_multipass) is faster.
      a.heuristic_cost = [](const SoftmaxProblem& p) {
        if (p.direction == Direction::forward) return 2.0;
        return smem_bytes(p) <= 64 * 1024 ? 1.5 : 3.5;
      };
      break;
    case SoftmaxAlgo::cluster:
      // Thread-block clusters need sm_90; rows of up to 1024 values are the warp kernel's.
      a.applies = [](const SoftmaxProblem& p) {
        return p.inner == 1 && p.input.dtype() != DType::f64 && p.dim_size > 32 * kWarpSize &&
               cluster_blocks(p) <= kClusterMaxBlocks &&
               device_properties(p.device().index).major >= 9;
      };
      // First for f32 rows over 8192 values when there are at least as many rows as SMs: the f32
      // backward, whose rows (y and dL/dy) fit no block_smem block and which block_multipass
      // reads twice, and the f32 forward (one exponential per element, 4 rows' segments per SM).
      // 16-bit rows hold half the bytes in flight per thread and stay block_smem's. Up to 8192
      // values block_smem keeps 4 blocks of 512 threads per SM without cluster barriers; fewer
      // rows than SMs stay multi_block's. Forward rows that block_tma_ring takes (whole vectors,
      // up to 32768 values) are its (0.8); f32 rows of 32769-65536 values, and unaligned ones,
      // stay here.
      a.heuristic_cost = [](const SoftmaxProblem& p) {
        const bool many_rows = p.outer >= device_properties(p.device().index).sm_count;
        const bool wide_f32 = p.input.element_size() == 4 && p.dim_size > 8192;
        if (wide_f32 && many_rows) return 0.9;
        return p.input.element_size() == 4 ? 2.5 : 4.0;
      };
      break;
    case SoftmaxAlgo::ring:
      // Forward only: with two inputs per row the backward's loads already keep HBM busy in
      // cluster_rows and block_smem. TMA bulk copies need whole 16-byte
      // vectors on aligned rows; the ring must hold a row and prefetch at least 2 chunks more;
      // a block counts its stream's chunks in an int.
      a.applies = [](const SoftmaxProblem& p) {
        return p.direction == Direction::forward && p.inner == 1 && p.input.dtype() != DType::f64 &&
               p.dim_size > 32 * kWarpSize && p.dim_size <= kRingMaxDim && rows_vectorizable(p) &&
               device_properties(p.device().index).major >= 9 &&
               ring_chunks_per_row(p) + 2 <= ring_slots(p) &&
               p.outer / device_properties(p.device().index).sm_count < (int64_t(1) << 27);
      };
      // Rows over 8192 values, at least one per SM: the rows where block_smem (one f32 row or
      // two bf16 rows per SM) and cluster_rows (blocks that load, reduce and store in step)
      // leave HBM idle between rows; the ring is the fastest there for f32 and 16-bit rows.
      // Shorter rows keep block_smem (4 blocks per SM, no idle threads), fewer rows than SMs
      // multi_block.
      a.heuristic_cost = [](const SoftmaxProblem& p) {
        const bool many_rows = p.outer >= device_properties(p.device().index).sm_count;
        return many_rows && p.dim_size > 8192 ? 0.8 : 2.2;
      };
      break;
    case SoftmaxAlgo::block:
      a.applies = [](const SoftmaxProblem& p) { return p.inner == 1; };
      a.heuristic_cost = [](const SoftmaxProblem&) { return 3.0; };
      break;
    case SoftmaxAlgo::multi_block:
      a.applies = [](const SoftmaxProblem& p) { return multi_block_splits(p) >= 2; };
      a.workspace_bytes = [](const SoftmaxProblem& p) {
        const size_t acc = p.input.dtype() == DType::f64 ? sizeof(double) : sizeof(float);
        const size_t per_split = p.direction == Direction::forward ? 2 * acc : acc;
        return size_t(p.outer) * size_t(multi_block_splits(p)) * per_split;
      };
      // Few long rows: one block per row would leave most of the GPU idle.
      a.heuristic_cost = [](const SoftmaxProblem&) { return 1.2; };
      break;
    case SoftmaxAlgo::column:
      a.applies = [](const SoftmaxProblem& p) { return p.inner > 1; };
      a.heuristic_cost = [](const SoftmaxProblem&) { return 1.0; };
      break;
  }
  return a;
}

}  // namespace
}  // namespace ember::cuda::softmax_impl

namespace ember {
using cuda::softmax_impl::make_algorithm;
using cuda::softmax_impl::SoftmaxAlgo;
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA,
                         make_algorithm(SoftmaxAlgo::warp));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA,
                         make_algorithm(SoftmaxAlgo::smem));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA,
                         make_algorithm(SoftmaxAlgo::cluster));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA,
                         make_algorithm(SoftmaxAlgo::ring));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA,
                         make_algorithm(SoftmaxAlgo::block));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA,
                         make_algorithm(SoftmaxAlgo::multi_block));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CUDA,
                         make_algorithm(SoftmaxAlgo::column));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA,
                         make_algorithm(SoftmaxAlgo::warp));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA,
                         make_algorithm(SoftmaxAlgo::smem));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA,
                         make_algorithm(SoftmaxAlgo::cluster));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA,
                         make_algorithm(SoftmaxAlgo::block));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA,
                         make_algorithm(SoftmaxAlgo::multi_block));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CUDA,
                         make_algorithm(SoftmaxAlgo::column));
}  // namespace ember
