// The face of the CUDA convolution family (cuda_kernels/conv/): the host-side pieces its conv2d
// algorithms share and what another family may use: the two dense forms the kernels compute in
// (NCHW/KCRS and NHWC/KRSC) with staging of operands that are in neither form into the
// algorithm's workspace, row-major GEMMs on cuBLAS, a rough cost model for the heuristic, the
// epilogue pass, and the helper every algorithm registers through. Include only from sources
// compiled with CUDA (cuda_kernels/).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ember/kernel_interface/conv.h"
#include "ember/kernel_interface/gemm.h"

namespace ember::cuda::conv {

using dispatch::Direction;

// The dense forms the kernels compute in. For activations nchw is NCHW-contiguous and nhwc is
// channels_last; for weights [K, Cg, R, S] nchw is KCRS and nhwc is KRSC (channels_last).
enum class Form : uint8_t { nchw, nhwc };
bool dense_as(const Tensor& t, Form f);
MemoryFormat memory_format_of(Form f);

// The tensor a direction writes, and the ones it reads (forward role names as in ConvProblem).
inline bool writes_input(const ConvProblem& pr) { return pr.direction == Direction::backward_data; }
inline bool writes_weight(const ConvProblem& pr) {
  return pr.direction == Direction::backward_filter;
}
inline bool writes_output(const ConvProblem& pr) { return pr.direction == Direction::forward; }

// Carves 256-byte aligned pieces out of one algorithm workspace, in order. Its byte count is
// computed by a WorkspacePlan that asks for the same pieces in the same order.
class WorkspaceArena {
 public:
  WorkspaceArena(void* base, size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  void* take(size_t bytes);

 private:
  char* base_;
  size_t bytes_;
  size_t used_ = 0;
};
struct WorkspacePlan {
  size_t bytes = 0;
  void add(size_t piece);
};
inline constexpr size_t kWorkspaceAlign = 256;
inline size_t align_workspace(size_t bytes) {
  return (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// Staging: an operand that is not dense in the form a kernel needs is copied into (or, when
// written, computed in) workspace memory. staging_bytes is 0 when no copy is needed.
size_t staging_bytes(const Tensor& t, Form f);
// A tensor over `bytes` of workspace memory, dense in form f.
Tensor workspace_tensor(void* memory, const Shape& sizes, DType dtype, Device device, Form f);
Tensor workspace_tensor(WorkspaceArena& arena, const Shape& sizes, DType dtype, Device device,
                        Form f);
// t dense in form f: t itself, or a copy of it in the arena (queued on the current stream).
Tensor stage_read(const Tensor& t, Form f, WorkspaceArena& arena);
// Where to compute t's new values dense in form f: t itself, or arena memory. After computing,
// finish_write(t, staged) copies staged values into t when they differ.
Tensor stage_write(const Tensor& t, Form f, WorkspaceArena& arena);
void finish_write(const Tensor& dst, const Tensor& staged);

// Row-major strided-batched GEMM on the current stream through Ember's cuBLAS wrapper:
// C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]; f16/bf16 accumulate in fp32; fp32 uses TF32
// tensor cores when allow_tf32.
void gemm(const GemmArgs& args);

// Like gemm(), but C is fp32 whatever args.dtype (f32, f16 or bf16 operands, fp32 accumulation):
// split-K partials keep fp32 precision. args.c points to floats; ldc and stride_c count floats.
void gemm_f32_out(const GemmArgs& args);
// The same product for args.batch problems whose operands come from device arrays of pointers:
// args.a, args.b and args.c each point to args.batch device pointers (strides unused). For
// batches whose operands are not evenly spaced (e.g. pixel chunks of every image).
void gemm_f32_out_pointer_array(const GemmArgs& args);
// A view with arbitrary element strides of `memory` (workspace), which holds `elements` elements.
Tensor workspace_view(void* memory, int64_t elements, const Shape& sizes, const Shape& strides,
                      DType dtype, Device device);

// ---- device facts and the cost model --------------------------------------------------------

int sm_count(Device device);
// Smallest base-pointer alignment of the three operands in bytes, capped at 16 (what the
// algorithm-cache key records, so alignment-dependent choices are cached correctly).
int operand_alignment(const ConvProblem& pr);
// Whether all three operands are CUDA tensors of one floating dtype among `allowed`.
bool uniform_cuda_dtype(const ConvProblem& pr, const std::vector<DType>& allowed);

// The heuristic's estimates, in microseconds: tensor-core or CUDA-core math at a fraction of
// peak (H200 ceilings: 769 TFLOP/s bf16/f16, 386 tf32, 50 fp32), and memory traffic at 4 TB/s.
double math_time_us(double macs, DType dtype, bool allow_tf32, double efficiency);
double memory_time_us(double bytes);
inline constexpr double kLaunchUs = 4.0;  // a kernel or cuBLAS call's fixed cost

// ---- registration ---------------------------------------------------------------------------

// A CUDA conv2d algorithm: the common precondition (a CUDA problem whose three operands share a
// dtype among `dtypes`) is checked before `applies`; `run` executes with the problem's device
// current. Registered in the (conv2d, direction, CUDA) slot at library load.
// A forward problem's epilogue (ConvProblem::epilogue): where the algorithm's `fuses_epilogue`
// holds for the problem, `run` gets it and applies it in its own kernel; otherwise (and always
// without one) `run` gets the problem without it and the registration applies it afterwards with
// apply_conv_epilogue. Either way it is the same algorithm, chosen once, with the workspace the
// cache allocated for it.
struct ConvAlgorithmSpec {
  const char* name = "";
  Direction direction = Direction::forward;
  bool deterministic = true;
  std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16};
  std::function<bool(const ConvProblem&)> applies;
  std::function<size_t(const ConvProblem&)> workspace_bytes;
  std::function<double(const ConvProblem&)> cost_us;
  std::function<void(const ConvProblem&, void* workspace, size_t workspace_bytes)> run;
};
dispatch::AlgorithmHandle register_conv_algorithm(
    ConvAlgorithmSpec spec, std::function<bool(const ConvProblem&)> fuses_epilogue = {});

// Applies pr.epilogue to pr.output (a forward problem's output holding the convolution) in one
// pass over it (cuda_kernels/conv/epilogue.cu; conv2d_epilogue_kernel on CUDA).
void apply_conv_epilogue(const ConvProblem& pr);

}  // namespace ember::cuda::conv
