// Host-side helpers of the CUDA conv2d algorithms (cuda_kernels/conv/conv.h): dense forms and
// staging into workspace memory, the GEMM wrappers (fp32-output and pointer-array variants for
// split-K partials), the cost model and registration (with the epilogue's two paths).
#include "ember/cuda_kernels/conv/conv.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "ember/cuda_kernels/blas/blas.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::cuda::conv {

MemoryFormat memory_format_of(Form f) {
  return f == Form::nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

bool dense_as(const Tensor& t, Form f) { return t.is_contiguous(memory_format_of(f)); }

void* WorkspaceArena::take(size_t bytes) {
  const size_t piece = align_workspace(bytes);
  EMBER_INTERNAL_ASSERT(used_ + piece <= bytes_, "conv2d workspace: asked for ", piece,
                        " more bytes with ", used_, " of ", bytes_, " used");
  void* p = base_ + used_;
  used_ += piece;
  return p;
}

void WorkspacePlan::add(size_t piece) { bytes += align_workspace(piece); }

size_t staging_bytes(const Tensor& t, Form f) {
  return dense_as(t, f) ? 0 : align_workspace(t.nbytes());
}

Tensor workspace_tensor(void* memory, const Shape& sizes, DType dtype, Device device, Form f) {
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = size_t(shape_numel(sizes)) * element_size(dtype);
  // Non-owning: the memory belongs to the algorithm cache's workspace for this call.
  impl->storage = std::make_shared<StorageImpl>(DataPtr{memory, nullptr}, nbytes, device);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes, memory_format_of(f));
  impl->offset = 0;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor workspace_tensor(WorkspaceArena& arena, const Shape& sizes, DType dtype, Device device,
                        Form f) {
  const size_t nbytes = size_t(shape_numel(sizes)) * element_size(dtype);
  return workspace_tensor(arena.take(nbytes), sizes, dtype, device, f);
}

Tensor stage_read(const Tensor& t, Form f, WorkspaceArena& arena) {
  if (dense_as(t, f)) return t;
  Tensor staged = workspace_tensor(arena, t.sizes(), t.dtype(), t.device(), f);
  staged.copy_(t.detach());
  return staged;
}

Tensor stage_write(const Tensor& t, Form f, WorkspaceArena& arena) {
  if (dense_as(t, f)) return t;
  return workspace_tensor(arena, t.sizes(), t.dtype(), t.device(), f);
}

void finish_write(const Tensor& dst, const Tensor& staged) {
  if (dst.is_same(staged)) return;
  Tensor out = dst;
  out.copy_(staged);
}

void gemm(const GemmArgs& args) { gemm_kernel().get(DeviceType::CUDA, args.dtype)(args); }

namespace {
// cuBLAS's column-major view of the row-major product (as in cuda_kernels/blas/blas.cpp): the first
// operand is B, the second A, and C comes out transposed, so nothing is copied.
struct F32OutCall {
  cublasOperation_t op_first, op_second;
  cudaDataType_t in_type;
  cublasComputeType_t compute;
  float alpha, beta;
};

F32OutCall f32_out_call(const GemmArgs& g) {
  EMBER_INTERNAL_ASSERT(g.device.is_cuda() && g.m > 0 && g.n > 0 && g.k > 0 && g.batch > 0,
                        "conv2d gemm_f32_out: bad sizes m=", g.m, " n=", g.n, " k=", g.k,
                        " batch=", g.batch);
  F32OutCall c{};
  c.op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  c.compute = CUBLAS_COMPUTE_32F;
  switch (g.dtype) {
    case DType::f32:
      c.in_type = CUDA_R_32F;
      if (g.allow_tf32) c.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
      break;
    case DType::f16:
      c.in_type = CUDA_R_16F;
      break;
    case DType::bf16:
      c.in_type = CUDA_R_16BF;
      break;
    default:
      EMBER_THROW(internal, "conv2d gemm_f32_out: dtype ", dtype_name(g.dtype),
                  " is not an f32/f16/bf16 operand type");
  }
  c.alpha = float(g.alpha);
  c.beta = float(g.beta);
  return c;
}
}  // namespace

void gemm_f32_out(const GemmArgs& g) {
  const F32OutCall c = f32_out_call(g);
  DeviceGuard device_guard(g.device);
  cublasHandle_t handle = cublas_handle();
  EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      handle, c.op_first, c.op_second, g.n, g.m, g.k, &c.alpha, g.b, c.in_type, g.ldb, g.stride_b,
      g.a, c.in_type, g.lda, g.stride_a, &c.beta, g.c, CUDA_R_32F, g.ldc, g.stride_c, g.batch,
      c.compute, CUBLAS_GEMM_DEFAULT));
}

void gemm_f32_out_pointer_array(const GemmArgs& g) {
  const F32OutCall c = f32_out_call(g);
  DeviceGuard device_guard(g.device);
  cublasHandle_t handle = cublas_handle();
  EMBER_CUBLAS_CHECK(cublasGemmBatchedEx_64(
      handle, c.op_first, c.op_second, g.n, g.m, g.k, &c.alpha,
      static_cast<const void* const*>(g.b), c.in_type, g.ldb, static_cast<const void* const*>(g.a),
      c.in_type, g.lda, &c.beta, static_cast<void* const*>(g.c), CUDA_R_32F, g.ldc, g.batch,
      c.compute, CUBLAS_GEMM_DEFAULT));
}

Tensor workspace_view(void* memory, int64_t elements, const Shape& sizes, const Shape& strides,
                      DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  // Non-owning, like workspace_tensor.
  impl->storage = std::make_shared<StorageImpl>(DataPtr{memory, nullptr},
                                                size_t(elements) * element_size(dtype), device);
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = 0;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int sm_count(Device device) { return std::max(device_properties(device.index).sm_count, 1); }

namespace {
int alignment_of(const Tensor& t) {
  if (t.numel() == 0) return 16;
  auto bits = reinterpret_cast<uintptr_t>(t.data_ptr());
  if (bits == 0) return 16;
  uintptr_t lowest = bits & (~bits + 1);
  return lowest >= 16 ? 16 : int(lowest);
}
}  // namespace

int operand_alignment(const ConvProblem& pr) {
  return std::min({alignment_of(pr.input), alignment_of(pr.weight), alignment_of(pr.output)});
}

bool uniform_cuda_dtype(const ConvProblem& pr, const std::vector<DType>& allowed) {
  const DType t = pr.input.dtype();
  return pr.input.device().is_cuda() && pr.weight.dtype() == t && pr.output.dtype() == t &&
         pr.weight.device() == pr.input.device() && pr.output.device() == pr.input.device() &&
         pr.input.dim() == 4 && pr.weight.dim() == 4 && pr.output.dim() == 4 &&
         std::find(allowed.begin(), allowed.end(), t) != allowed.end();
}

double math_time_us(double macs, DType dtype, bool allow_tf32, double efficiency) {
  double peak_flops = 50e12;  // fp32 on CUDA cores
  switch (dtype) {
    case DType::f16:
    case DType::bf16:
      peak_flops = 769e12;
      break;
    case DType::f32:
      peak_flops = allow_tf32 ? 386e12 : 50e12;
      break;
    case DType::f64:
      peak_flops = 60e12;
      break;
    default:
      break;
  }
  return 2.0 * macs / (peak_flops * std::max(efficiency, 1e-6)) * 1e6;
}

double memory_time_us(double bytes) { return bytes / 4.0e12 * 1e6; }

dispatch::AlgorithmHandle register_conv_algorithm(
    ConvAlgorithmSpec spec, std::function<bool(const ConvProblem&)> fuses_epilogue) {
  dispatch::Algorithm<ConvProblem> a;
  a.name = spec.name;
  a.deterministic = spec.deterministic;
  a.applies = [dtypes = spec.dtypes, applies = spec.applies](const ConvProblem& pr) {
    return uniform_cuda_dtype(pr, dtypes) && (!applies || applies(pr));
  };
  if (spec.workspace_bytes) a.workspace_bytes = spec.workspace_bytes;
  if (spec.cost_us) a.heuristic_cost = spec.cost_us;
  a.run = [run = spec.run, workspace_bytes = spec.workspace_bytes,
           fuses = std::move(fuses_epilogue)](const ConvProblem& pr, void* workspace) {
    DeviceGuard device_guard(pr.device());
    const size_t bytes = workspace_bytes ? workspace_bytes(pr) : 0;
    if (!pr.epilogue.active() || (fuses && fuses(pr))) {
      run(pr, workspace, bytes);
      return;
    }
    run(pr.without_epilogue(), workspace, bytes);
    apply_conv_epilogue(pr);
  };
  return dispatch::register_algorithm<ConvProblem>(conv2d_op(), spec.direction, DeviceType::CUDA,
                                                   std::move(a));
}

}  // namespace ember::cuda::conv
