// Host-side helpers of the CUDA conv2d algorithms (see conv_common.h): problem sizes, dense forms
// and staging into workspace memory, the GEMM wrapper, the cost model and registration.
#include "cuda_kernels/conv_common.h"

#include <algorithm>
#include <memory>

#include "tensor/cuda_check.h"
#include "tensor/stream.h"

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

size_t staging_bytes(const Tensor& t, Form f) { return dense_as(t, f) ? 0 : align_workspace(t.nbytes()); }

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
    case DType::bf16: peak_flops = 769e12; break;
    case DType::f32: peak_flops = allow_tf32 ? 386e12 : 50e12; break;
    case DType::f64: peak_flops = 60e12; break;
    default: break;
  }
  return 2.0 * macs / (peak_flops * std::max(efficiency, 1e-6)) * 1e6;
}

double memory_time_us(double bytes) { return bytes / 4.0e12 * 1e6; }

dispatch::AlgorithmHandle register_conv_algorithm(ConvAlgorithmSpec spec) {
  dispatch::Algorithm<ConvProblem> a;
  a.name = spec.name;
  a.deterministic = spec.deterministic;
  a.applies = [dtypes = spec.dtypes, applies = spec.applies](const ConvProblem& pr) {
    return uniform_cuda_dtype(pr, dtypes) && (!applies || applies(pr));
  };
  if (spec.workspace_bytes) a.workspace_bytes = spec.workspace_bytes;
  if (spec.cost_us) a.heuristic_cost = spec.cost_us;
  a.run = [run = spec.run, workspace_bytes = spec.workspace_bytes](const ConvProblem& pr,
                                                                    void* workspace) {
    DeviceGuard device_guard(pr.device());
    run(pr, workspace, workspace_bytes ? workspace_bytes(pr) : 0);
  };
  return dispatch::register_algorithm<ConvProblem>(conv2d_op(), spec.direction, DeviceType::CUDA,
                                                   std::move(a));
}

}  // namespace ember::cuda::conv
