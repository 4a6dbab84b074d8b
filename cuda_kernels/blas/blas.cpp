// gemm_kernel on cuBLAS (kernel_interface/) and the cuBLAS handle pool behind cublas_handle()
// (cuda_kernels/blas/blas.h). GEMMs run through cublasGemmStridedBatchedEx_64: Ember's row-major
// C = op(A) op(B) is cuBLAS's column-major C^T = op(B)^T op(A)^T, so the operands and m/n swap
// and no data moves. f16/bf16 use CUBLAS_COMPUTE_32F (fp32 accumulation), f32 uses
// CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_FAST_TF32 when allow_tf32, f64 CUBLAS_COMPUTE_64F.
#include "ember/cuda_kernels/blas/blas.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "ember/kernel_interface/elementwise.h"
#include "ember/kernel_interface/gemm.h"
#include "ember/tensor/runtime/allocator.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_device.h"
#include "ember/tensor/runtime/stream.h"

namespace ember::cuda {
namespace {

// cuBLAS's recommended workspace for Hopper; it lets cuBLAS pick split-K and other algorithms
// without allocating (which a captured graph would forbid).
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// A cuBLAS handle and the workspace of each stream it has run on (two streams sharing one
// workspace could run at once and overwrite each other's scratch data).
struct HandleEntry {
  cublasHandle_t handle = nullptr;
  struct StreamWorkspace {
    void* stream;
    DataPtr memory;
  };
  std::vector<StreamWorkspace> workspaces;

  void* workspace_for(void* stream, int device) {
    for (const StreamWorkspace& w : workspaces)
      if (w.stream == stream) return w.memory.ptr;
    // Allocated on the current stream (== `stream`), kept for the life of the handle.
    workspaces.push_back({stream, allocate(kWorkspaceBytes, Device::cuda(device))});
    return workspaces.back().memory.ptr;
  }
};

// Handles given back by threads that ended, reused by new threads, per device. Never destroyed:
// destroying cuBLAS handles during static destruction races the CUDA runtime's own teardown,
// and the pool is bounded by the peak number of threads that used cuBLAS.
struct HandlePool {
  std::mutex mutex;
  std::vector<HandleEntry*> free_entries;
};

HandlePool& handle_pool(int device) {
  static HandlePool* pools = new HandlePool[size_t(std::max(device_count(), 1))];
  return pools[device];
}

// The entries one thread holds, by device; they go back to the pool when the thread ends.
struct ThreadHandles {
  std::vector<HandleEntry*> by_device;
  ~ThreadHandles() {
    for (size_t d = 0; d < by_device.size(); ++d) {
      if (by_device[d] == nullptr) continue;
      HandlePool& pool = handle_pool(int(d));
      std::lock_guard lock(pool.mutex);
      pool.free_entries.push_back(by_device[d]);
    }
  }
};

HandleEntry* acquire_entry(int device) {
  HandlePool& pool = handle_pool(device);
  {
    std::lock_guard lock(pool.mutex);
    if (!pool.free_entries.empty()) {
      HandleEntry* e = pool.free_entries.back();
      pool.free_entries.pop_back();
      return e;
    }
  }
  auto entry = std::make_unique<HandleEntry>();
  EMBER_CUBLAS_CHECK(cublasCreate(&entry->handle));
  EMBER_CUBLAS_CHECK(cublasSetMathMode(
      entry->handle,
      cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  return entry.release();
}

}  // namespace

cublasHandle_t cublas_handle() {
  const int device = current_device();
  thread_local ThreadHandles thread_handles;
  if (thread_handles.by_device.size() <= size_t(device))
    thread_handles.by_device.resize(size_t(device) + 1);
  HandleEntry*& entry = thread_handles.by_device[size_t(device)];
  if (entry == nullptr) entry = acquire_entry(device);
  void* stream = current_stream(Device::cuda(device)).handle;
  EMBER_CUBLAS_CHECK(cublasSetStream(entry->handle, static_cast<cudaStream_t>(stream)));
  // cublasSetStream resets the workspace to cuBLAS's own pool, so set ours after it, every time.
  EMBER_CUBLAS_CHECK(
      cublasSetWorkspace(entry->handle, entry->workspace_for(stream, device), kWorkspaceBytes));
  return entry->handle;
}

namespace {

// k == 0: the product is empty, so C = beta * C (C is not read when beta == 0, as in BLAS). Done
// with the elementwise kernels because cuBLAS rejects the leading dims of empty operands.
void scale_output_by_beta(const GemmArgs& g) {
  if (g.beta == 1) return;
  const int64_t es = int64_t(element_size(g.dtype));
  ElementwiseIter it;
  it.ndim = 3;
  it.numel = g.batch * g.m * g.n;
  it.device = g.device;
  const int64_t sizes[3] = {g.batch, g.m, g.n};
  const int64_t strides[3] = {g.stride_c * es, g.ldc * es, es};
  it.num_operands = g.beta == 0 ? 1 : 2;  // fill has no input
  for (int k = 0; k < it.num_operands; ++k) {
    it.data[k] = static_cast<char*>(g.c);
    it.dtypes[k] = g.dtype;
    for (int d = 0; d < 3; ++d) it.strides[k][d] = strides[d];
  }
  for (int d = 0; d < 3; ++d) it.sizes[d] = sizes[d];
  const UnaryOp op = g.beta == 0 ? UnaryOp::fill : UnaryOp::mul_scalar;
  unary_kernel().get(DeviceType::CUDA, g.dtype)(it, op, UnaryParams{g.beta == 0 ? 0.0 : g.beta, 0});
}

// A matrix that has at most one column (in cuBLAS's column-major view) never uses its leading
// dim, but cuBLAS still requires ld >= rows; views of vectors often carry ld = 1.
int64_t fix_ld(int64_t ld, int64_t rows, int64_t cols) {
  return cols <= 1 ? std::max({ld, rows, int64_t(1)}) : ld;
}

void gemm_cuda(const GemmArgs& g) {
  EMBER_INTERNAL_ASSERT(g.device.is_cuda(), "gemm_kernel (CUDA) called for ", g.device.str());
  EMBER_INTERNAL_ASSERT(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0,
                        "gemm_kernel: negative size m=", g.m, " n=", g.n, " k=", g.k,
                        " batch=", g.batch);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  DeviceGuard device_guard(g.device);
  if (g.k == 0) {
    scale_output_by_beta(g);
    return;
  }
  // Column-major view: first operand = B (rows n, cols k after op), second = A (rows k, cols m).
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ld_first = g.trans_b ? fix_ld(g.ldb, g.k, g.n) : fix_ld(g.ldb, g.n, g.k);
  const int64_t ld_second = g.trans_a ? fix_ld(g.lda, g.m, g.k) : fix_ld(g.lda, g.k, g.m);
  const int64_t ld_c = fix_ld(g.ldc, g.n, g.m);
  EMBER_INTERNAL_ASSERT(
      ld_first >= (g.trans_b ? g.k : g.n) && ld_second >= (g.trans_a ? g.m : g.k) && ld_c >= g.n,
      "gemm_kernel: leading dims lda=", g.lda, " ldb=", g.ldb, " ldc=", g.ldc,
      " are too small for m=", g.m, " n=", g.n, " k=", g.k, " trans_a=", g.trans_a,
      " trans_b=", g.trans_b);

  cudaDataType_t data_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  const float alpha_f = float(g.alpha), beta_f = float(g.beta);
  const double alpha_d = g.alpha, beta_d = g.beta;
  const void* alpha = &alpha_f;
  const void* beta = &beta_f;
  switch (g.dtype) {
    case DType::f32:
      compute = g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::f16:
      data_type = CUDA_R_16F;
      break;
    case DType::bf16:
      data_type = CUDA_R_16BF;
      break;
    case DType::f64:
      data_type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      alpha = &alpha_d;
      beta = &beta_d;
      break;
    default:
      EMBER_THROW(not_supported, "gemm: dtype ", dtype_name(g.dtype),
                  " is not supported on CUDA; use float32, float64, float16 or bfloat16");
  }
  cublasHandle_t handle = cublas_handle();
  EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      handle, op_first, op_second, g.n, g.m, g.k, alpha, g.b, data_type, ld_first, g.stride_b, g.a,
      data_type, ld_second, g.stride_a, beta, g.c, data_type, ld_c, g.stride_c, g.batch, compute,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(gemm_kernel, CUDA, dispatch::kFloatingTypes, &cuda::gemm_cuda);
}  // namespace ember
