// The channels_last (NHWC) pooling kernels as algorithms of the algorithm cache's CUDA slots
// "pooling.forward" and "pooling.backward" (kernel_interface/pooling.h): window_nhwc,
// window_3x3_nhwc, window_tiles_nhwc, window_avg_tiles_nhwc, window_disjoint_nhwc, global_nhwc
// and global_nchw, beside pooling.cu's generic kernels. Each one's applies() is the condition
// under which its kernel runs the problem (dtype, dense layouts, 32-bit offsets, alignment, window
// shape, the indices' encoding); the heuristic costs rank them so that the heuristic picks the
// most specialised kernel that applies: 3x3 windows over the window loop forward; disjoint
// windows, then tiles, over the per-pixel loop backward; NHWC over NCHW for global pooling; any
// of them over the generic kernels. Packed uint8 taps: the forwards on whole 16-byte vectors
// (window_3x3_nhwc; window_nhwc where the channels and pointers allow vectors) write them, so
// they apply to a packed forward exactly there (ops/pooling.cpp allocates packed taps where the
// chosen forward applies to them); every window backward reads them.
#include "ember/cuda_kernels/pooling/pooling_nhwc.cuh"
#include "ember/dispatch/algorithm.h"

namespace ember::cuda {
namespace {

using dispatch::Direction;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int64_t volume(const PoolArgs& a, const int64_t (&spatial)[3]) {
  return a.batch * a.channels * spatial[0] * spatial[1] * spatial[2];
}

// True when a and b (of equal sizes) place every element at the same element offset.
bool same_offsets(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) != 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

// Every offset the window kernels form along one spatial dim fits in an int.
bool window_dim_fits(const PoolArgs& a, int dim) {
  const int64_t limit = int64_t(1) << 30;
  const int64_t values[6] = {a.in_size[dim], a.out_size[dim], a.kernel[dim],
                             a.stride[dim],  a.padding[dim],  a.dilation[dim]};
  for (int64_t v : values)
    if (v > limit) return false;
  const int64_t extent = (a.out_size[dim] + 1) * a.stride[dim] + a.kernel[dim] * a.dilation[dim] +
                         a.padding[dim] + a.in_size[dim];
  return extent <= kInt32Max;
}

// The fast kernels' dtypes, and their vector width in elements (16 bytes' worth).
bool fast_dtype(DType dtype) { return dtype == DType::f32 || dtype == DType::bf16; }
int vector_of(DType dtype) { return kVectorBytes / int(element_size(dtype)); }

// Which global kernel runs adaptive average pooling to size 1 `p`, if any (global_nhwc forward
// and backward, global_nchw backward; the NHWC one where both apply).
bool global_applies(const PoolProblem& p, PoolFastKernel kernel) {
  const PoolArgs& a = p.args;
  if (!fast_dtype(a.input.dtype()) || a.mode != PoolMode::adaptive_avg || a.out_size[0] != 1 ||
      a.out_size[1] != 1 || a.out_size[2] != 1)
    return false;
  const int vector = vector_of(a.input.dtype());
  if (volume(a, a.in_size) > kInt32Max) return false;
  const bool vector_channels = a.channels % vector == 0;
  const bool input_nhwc = pool_is_dense(true, a.batch, a.channels, a.in_size, a.in_strides);
  if (p.direction == Direction::forward)
    return kernel == PoolFastKernel::global_nhwc && input_nhwc && vector_channels &&
           aligned16(a.input) && aligned16(a.output) &&
           pool_is_dense(true, a.batch, a.channels, a.out_size, a.out_strides);
  // The gradient of the output is read through its strides (broadcast ones included).
  if (a.out_strides[0] < 0 || a.out_strides[1] < 0 || !aligned16(a.input)) return false;
  if (kernel == PoolFastKernel::global_nhwc) return input_nhwc && vector_channels;
  return kernel == PoolFastKernel::global_nchw &&
         pool_is_dense(false, a.batch, a.channels, a.in_size, a.in_strides);
}

// A 2-input-pixel tile along `dim` meets at most two windows: (kernel - 1) * dilation + 2 <=
// 2 * stride (the spans of two adjacent pixels' windows' starts cover fewer than two strides).
bool tile_meets_two_windows(const PoolArgs& a, int dim) {
  return (a.kernel[dim] - 1) * a.dilation[dim] + 2 <= 2 * a.stride[dim];
}

// The windows along `dim` tile the input without overlap: kernel == stride, no padding or dilation.
bool windows_disjoint(const PoolArgs& a, int dim) {
  return a.kernel[dim] == a.stride[dim] && a.padding[dim] == 0 && a.dilation[dim] == 1;
}

// What the window kernels need of 2-D max / average pooling `p`: `applies` when the input and
// output (and gradients) are dense channels_last, every offset fits 32 bits and max pooling's
// indices sit at the output's offsets; `v` is the elements per access (16 bytes' worth when the
// channels fill vectors and the pointers are 16-byte aligned, else 1), `vector` 16 bytes' worth.
struct WindowPlan {
  bool applies = false;
  int v = 1, vector = 1;
};
WindowPlan window_plan(const PoolProblem& p) {
  const PoolArgs& a = p.args;
  if (!fast_dtype(a.input.dtype()) || a.mode == PoolMode::adaptive_avg) return {};
  if (a.in_size[0] != 1 || a.out_size[0] != 1 || a.kernel[0] != 1 || a.padding[0] != 0) return {};
  if (volume(a, a.in_size) > kInt32Max || volume(a, a.out_size) > kInt32Max ||
      !window_dim_fits(a, 1) || !window_dim_fits(a, 2))
    return {};
  if (!pool_is_dense(true, a.batch, a.channels, a.in_size, a.in_strides) ||
      !pool_is_dense(true, a.batch, a.channels, a.out_size, a.out_strides))
    return {};
  // Indices already allocated (the forward is chosen before they are: then they will be fresh).
  const bool max_indices = a.mode == PoolMode::max && a.indices.defined();
  // The kernels read and write indices at the output's offsets (as pooling.cu does); packed taps
  // at half of them (the output is dense, so its offsets are its memory order).
  if (max_indices && !a.packed_taps && !same_offsets(a.indices, a.output)) return {};
  const bool aligned =
      aligned16(a.input) && aligned16(a.output) && (!max_indices || aligned16(a.indices));
  WindowPlan plan;
  plan.applies = true;
  plan.vector = vector_of(a.input.dtype());
  plan.v = a.channels % plan.vector == 0 && aligned ? plan.vector : 1;
  return plan;
}

// Whether the window kernel `kernel` runs `p` (window_plan's conditions and its own).
bool window_applies(const PoolProblem& p, PoolFastKernel kernel) {
  const WindowPlan plan = window_plan(p);
  if (!plan.applies) return false;
  const PoolArgs& a = p.args;
  const bool whole_vectors = plan.v == plan.vector;
  if (p.direction == Direction::forward) {
    // Packed taps are written on whole vectors only (a thread's taps are then whole bytes).
    if (p.indices == PoolIndices::taps_packed && !(whole_vectors && pool_packed_taps_fit(a)))
      return false;
    if (kernel == PoolFastKernel::window_nhwc) return true;
    // Max or average pooling over 3x3 windows: one 16-byte vector of channels per thread, max
    // with uint8 taps or none (channels not filling vectors take the window loop, one element
    // per access).
    return kernel == PoolFastKernel::window_3x3_nhwc && whole_vectors && a.kernel[1] == 3 &&
           a.kernel[2] == 3 && p.indices != PoolIndices::flat_i64;
  }
  if (kernel == PoolFastKernel::window_nhwc) return true;  // it reads every encoding
  // Backward by disjoint windows or by tiles: whole vectors, average pooling or uint8 taps (int64
  // positions, only for users' indices, keep the per-pixel kernel).
  const bool tile_indices = a.mode != PoolMode::max || p.indices == PoolIndices::taps_u8 ||
                            p.indices == PoolIndices::taps_packed;
  if (plan.v == 1 || !tile_indices) return false;
  switch (kernel) {
    case PoolFastKernel::window_disjoint_nhwc:
      return windows_disjoint(a, 1) && windows_disjoint(a, 2);
    case PoolFastKernel::window_tiles_nhwc:
      return a.mode == PoolMode::max && tile_meets_two_windows(a, 1) &&
             tile_meets_two_windows(a, 2);
    case PoolFastKernel::window_avg_tiles_nhwc:
      return a.mode == PoolMode::avg && tile_meets_two_windows(a, 1) &&
             tile_meets_two_windows(a, 2) && avg_tiles_launch(a, plan.v).fits;
    default:
      return false;
  }
}

bool is_global(PoolFastKernel kernel) {
  return kernel == PoolFastKernel::global_nhwc || kernel == PoolFastKernel::global_nchw;
}

// The heuristic's ranking (lower first): the most specialised kernel that applies.
double heuristic_cost(PoolFastKernel kernel) {
  switch (kernel) {
    case PoolFastKernel::window_3x3_nhwc:
    case PoolFastKernel::window_disjoint_nhwc:
    case PoolFastKernel::global_nhwc:
      return 1;
    case PoolFastKernel::window_tiles_nhwc:
    case PoolFastKernel::window_avg_tiles_nhwc:
    case PoolFastKernel::global_nchw:
      return 2;
    case PoolFastKernel::window_nhwc:
      return 3;
  }
  return 3;
}

dispatch::Algorithm<PoolProblem> make_algorithm(const char* name, PoolFastKernel kernel) {
  dispatch::Algorithm<PoolProblem> algo;
  algo.name = name;
  algo.deterministic = true;  // gathers, no atomics
  algo.applies = [kernel](const PoolProblem& p) {
    return is_global(kernel) ? global_applies(p, kernel) : window_applies(p, kernel);
  };
  algo.heuristic_cost = [kernel](const PoolProblem&) { return heuristic_cost(kernel); };
  algo.run = [kernel](const PoolProblem& p, void*) {
    const PoolArgs& a = p.args;
    const bool forward = p.direction == Direction::forward;
    if ((forward ? a.output : a.input).numel() == 0) return;
    DeviceGuard device_guard(a.input.device());
    cudaStream_t stream = stream_of(a.input.device());
    if (is_global(kernel))
      launch_global(a, kernel, p.direction, stream);
    else if (kernel == PoolFastKernel::window_3x3_nhwc)
      launch_window_3x3(a, stream);
    else if (forward)
      launch_window_forward(a, window_plan(p).v, stream);
    else
      launch_window_backward(a, kernel, window_plan(p).v, stream);
  };
  return algo;
}

}  // namespace

Pool2dGeometry make_geometry(const PoolArgs& a, int vector, PoolFastKernel kernel,
                             dispatch::Direction direction) {
  Pool2dGeometry g{};
  g.channels = int(a.channels);
  g.in_h = int(a.in_size[1]);
  g.in_w = int(a.in_size[2]);
  g.out_h = int(a.out_size[1]);
  g.out_w = int(a.out_size[2]);
  g.kernel_h = int(a.kernel[1]);
  g.kernel_w = int(a.kernel[2]);
  g.stride_h = int(a.stride[1]);
  g.stride_w = int(a.stride[2]);
  g.pad_h = int(a.padding[1]);
  g.pad_w = int(a.padding[2]);
  g.dilation_h = int(a.dilation[1]);
  g.dilation_w = int(a.dilation[2]);
  g.groups = g.channels / vector;
  g.in_image = g.in_h * g.in_w * g.channels;
  g.out_image = g.out_h * g.out_w * g.channels;
  g.count_include_pad = a.count_include_pad;
  g.by_groups = FastDivmod(uint32_t(g.groups));
  if (direction == dispatch::Direction::forward) {
    g.by_x = FastDivmod(uint32_t(g.out_w));
    g.by_y = FastDivmod(uint32_t(g.out_h));
  } else if (kernel == PoolFastKernel::window_tiles_nhwc) {
    const int band = 2 * tile_band_rows(a);
    g.by_x = FastDivmod(uint32_t((g.in_w + 1) / 2));
    g.by_y = FastDivmod(uint32_t((g.in_h + band - 1) / band));
  } else if (kernel == PoolFastKernel::window_disjoint_nhwc) {
    g.by_x = FastDivmod(uint32_t((g.in_w + g.stride_w - 1) / g.stride_w));
    g.by_y = FastDivmod(uint32_t((g.in_h + g.stride_h - 1) / g.stride_h));
  } else {
    g.by_x = FastDivmod(uint32_t(g.in_w));
    g.by_y = FastDivmod(uint32_t(g.in_h));
  }
  g.by_stride_h = FastDivmod(uint32_t(g.stride_h));
  g.by_stride_w = FastDivmod(uint32_t(g.stride_w));
  g.by_dilation_h = FastDivmod(uint32_t(g.dilation_h));
  g.by_dilation_w = FastDivmod(uint32_t(g.dilation_w));
  return g;
}

int pool_nhwc_vector(const PoolProblem& p) {
  if (p.args.mode == PoolMode::adaptive_avg) return vector_of(p.args.input.dtype());
  return window_plan(p).v;
}

}  // namespace ember::cuda

namespace ember {
using cuda::PoolFastKernel;
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", forward, CUDA,
                         cuda::make_algorithm("window_3x3_nhwc", PoolFastKernel::window_3x3_nhwc));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", forward, CUDA,
                         cuda::make_algorithm("window_nhwc", PoolFastKernel::window_nhwc));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", forward, CUDA,
                         cuda::make_algorithm("global_nhwc", PoolFastKernel::global_nhwc));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", backward, CUDA,
                         cuda::make_algorithm("window_disjoint_nhwc",
                                              PoolFastKernel::window_disjoint_nhwc));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", backward, CUDA,
                         cuda::make_algorithm("window_tiles_nhwc",
                                              PoolFastKernel::window_tiles_nhwc));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", backward, CUDA,
                         cuda::make_algorithm("window_avg_tiles_nhwc",
                                              PoolFastKernel::window_avg_tiles_nhwc));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", backward, CUDA,
                         cuda::make_algorithm("window_nhwc", PoolFastKernel::window_nhwc));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", backward, CUDA,
                         cuda::make_algorithm("global_nhwc", PoolFastKernel::global_nhwc));
EMBER_REGISTER_ALGORITHM(PoolProblem, "pooling", backward, CUDA,
                         cuda::make_algorithm("global_nchw", PoolFastKernel::global_nchw));
}  // namespace ember
