// The public ops of Ember, as in libtorch's torch:: namespace. Each op checks its arguments
// (ember::Error naming the op, the argument and the shapes), computes the output shape, records a
// backward node when grad mode is on and an input requires grad, and dispatches to a kernel on the
// inputs' device. Shapes: elementwise ops broadcast with numpy rules; reductions take a list of
// dims (negative dims count from the end; an empty list reduces everything).
#pragma once
#include <optional>
#include <vector>

#include "ember/ops/indexing.h"
#include "ember/ops/linalg.h"
#include "ember/ops/reduction_more.h"
#include "ember/ops/shape_more.h"
#include "ember/tensor/runtime/generator.h"
#include "ember/tensor/tensor.h"

namespace ember {

// has_dtype / has_device record whether the dtype / device was given (through a constructor or
// with_*): the *_like factories and tensor({...}) take the rest from the tensor or the values.
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
  MemoryFormat memory_format = MemoryFormat::contiguous;
  bool has_dtype = false;
  bool has_device = false;
  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t), has_dtype(true) {}     // NOLINT
  TensorOptions(Device d) : device(d), has_device(true) {}  // NOLINT
  TensorOptions& with_dtype(DType t) {
    dtype = t;
    has_dtype = true;
    return *this;
  }
  TensorOptions& with_device(Device d) {
    device = d;
    has_device = true;
    return *this;
  }
  TensorOptions& with_requires_grad(bool r = true) {
    requires_grad = r;
    return *this;
  }
  TensorOptions& with_memory_format(MemoryFormat f) {
    memory_format = f;
    return *this;
  }
};
inline TensorOptions dtype(DType t) { return TensorOptions(t); }
inline TensorOptions device(Device d) { return TensorOptions(d); }

// libtorch's dtype and device names (torch::kFloat32, torch::kCUDA, ...).
inline constexpr DType kFloat32 = DType::f32,  // float32
    kFloat = DType::f32,                       // float32
    kFloat64 = DType::f64,                     // float64
    kDouble = DType::f64,                      // float64
    kFloat16 = DType::f16,                     // float16
    kHalf = DType::f16,                        // float16
    kBFloat16 = DType::bf16,                   // bfloat16
    kInt32 = DType::i32,                       // int32
    kInt = DType::i32,                         // int32
    kInt64 = DType::i64,                       // int64
    kLong = DType::i64,                        // int64
    kUInt8 = DType::u8,                        // uint8
    kByte = DType::u8,                         // uint8
    kBool = DType::boolean;                    // bool
inline constexpr Device kCPU = Device::cpu(),  // the CPU
    kCUDA = Device::cuda(0);                   // GPU 0

// ---- creation (ops/factory.cpp) ----
Tensor empty(const Shape& sizes, const TensorOptions& options);
Tensor zeros(const Shape& sizes, const TensorOptions& options = {});
Tensor ones(const Shape& sizes, const TensorOptions& options = {});
Tensor full(const Shape& sizes, double value, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor arange(double start, double end, double step = 1, const TensorOptions& options = {});
Tensor arange(double end, const TensorOptions& options = {});
// Copies host values (converted to options.dtype) into a new tensor of `sizes`.
Tensor from_vector(const std::vector<double>& values, const Shape& sizes,
                   const TensorOptions& options = {});
Tensor from_data(const void* data, DType data_dtype, const Shape& sizes,
                 const TensorOptions& options = {});
Tensor scalar_tensor(double value, const TensorOptions& options = {});
// Random (Philox; the device's default generator unless one is given).
Tensor rand(const Shape& sizes, const TensorOptions& options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& sizes, const TensorOptions& options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& sizes,
               const TensorOptions& options = TensorOptions(DType::i64), Generator* gen = nullptr);
Tensor bernoulli(const Tensor& probs_like, double p, Generator* gen = nullptr);  // same shape, 0/1
Tensor randperm(int64_t n, const TensorOptions& options = TensorOptions(DType::i64),
                Generator* gen = nullptr);
Tensor& uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);

// ---- elementwise (ops/elementwise.cpp) ----
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
Tensor square(const Tensor& a);
Tensor reciprocal(const Tensor& a);
Tensor clamp(const Tensor& a, std::optional<double> min, std::optional<double> max);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor isnan(const Tensor& a);
Tensor isfinite(const Tensor& a);
Tensor logical_not(const Tensor& a);
// In place (record autograd like the out-of-place op; not allowed on leaves that require grad).
Tensor& add_(Tensor& a, const Tensor& b, double alpha = 1);
Tensor& sub_(Tensor& a, const Tensor& b, double alpha = 1);
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& div_(Tensor& a, const Tensor& b);
Tensor& add_(Tensor& a, double b);
Tensor& mul_(Tensor& a, double b);
Tensor& relu_(Tensor& a);
Tensor& clamp_(Tensor& a, std::optional<double> min, std::optional<double> max);
Tensor cast(const Tensor& a, DType dtype);  // same as a.to(dtype); differentiable between floats

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);

// ---- reductions (ops/reduction.cpp) ----
Tensor sum(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, const Shape& dims = {}, bool keepdim = false);
Tensor var(const Tensor& a, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& a, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// The (values, indices) pair of max/min/sort/topk-style ops along a dim, as PyTorch's named tuple.
struct ValuesIndices {
  // The reduced or selected values, in the input's dtype.
  Tensor values, indices;  // indices: their int64 positions along the dim
};
ValuesIndices max(const Tensor& a, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a);  // over all elements
Tensor min(const Tensor& a);
Tensor argmax(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor log_softmax_reference(const Tensor& a, int64_t dim);  // from primitives: a - logsumexp
Tensor logsumexp(const Tensor& a, const Shape& dims, bool keepdim = false);

// ---- linear algebra (ops/linalg.cpp) ----
// Whether fp32 matrix products may use TF32 tensor cores (off by default, as in PyTorch).
void set_matmul_allow_tf32(bool allow);
bool matmul_allow_tf32();
// matmul follows torch.matmul (1-D, 2-D and batched with broadcasting of batch dims).
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1,
             double alpha = 1);
// y = x @ weight^T + bias; x [..., in], weight [out, in], bias [out] (optional).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- indexing (ops/indexing.cpp) ----
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
// weight [num, dim], indices any shape of int32/int64 -> [..., dim]
Tensor embedding(const Tensor& weight, const Tensor& indices);

// ---- shape (ops/shape.cpp; the view methods are on Tensor) ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& a, const Shape& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);

// ---- numerics helpers used by tests ----
// True when |a - b| <= atol + rtol * |b| everywhere (both copied to the CPU as float64).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace ember

// Scalar operands, comparisons with scalars, remainder/fmod, bitwise and logical ops, the
// libtorch-style factories (tensor({...}), from_blob, *_like, linspace, eye).
#include "ember/ops/tensor_api.h"  // IWYU pragma: export

// Issue 34's elementwise and random ops (lerp, atan2, erf..., multinomial, poisson...).
#include "ember/ops/elementwise_more.h"  // IWYU pragma: export
