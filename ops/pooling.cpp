// Pooling ops (ops/pooling.h): argument checks, output sizes (PyTorch's rules), output layout
// (the input's memory format), the 3-D PoolArgs every variant becomes, autograd (max pooling saves
// its indices, one byte per output -- or half of one where the chosen forward packs them -- when
// only autograd needs them; average pooling saves nothing but the geometry), and the algorithm
// cache's glue for PoolProblem (slots, key, choice).
#include "ember/ops/pooling.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "ember/autograd/graph/graph.h"

namespace ember {

using dispatch::Direction;

namespace {

std::string list_str(const IntList& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

struct PoolSpec {
  const char* op;
  int spatial;  // 1, 2 or 3
  PoolMode mode;
  IntList kernel, stride, padding, dilation, output_size;
  bool ceil_mode = false;
  bool count_include_pad = true;
};

// One value per spatial dim (a single value is repeated), placed in the last `spatial` of the 3
// slots; the leading slots get `fill`.
std::array<int64_t, 3> per_dim(const PoolSpec& s, const char* name, const IntList& v,
                               int64_t fill) {
  EMBER_CHECK(v.size() == 1 || v.size() == size_t(s.spatial), s.op, ": ", name, " ", list_str(v),
              " must hold 1 or ", s.spatial, " values");
  std::array<int64_t, 3> r = {fill, fill, fill};
  for (int i = 0; i < s.spatial; ++i)
    r[size_t(3 - s.spatial + i)] = v.size() == 1 ? v[0] : v[size_t(i)];
  return r;
}

int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  if (span < 0) return 0;  // reported by the caller
  int64_t out = (span + (ceil_mode ? s - 1 : 0)) / s + 1;
  // The last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// The 5-D (n, c, d, h, w) strides of a tensor of rank spatial + 2; unit dims get stride 0.
void strides5(const Tensor& t, int spatial, int64_t (&out)[5]) {
  out[0] = t.stride(0);
  out[1] = t.stride(1);
  for (int i = 0; i < 3; ++i) {
    const int dim = i - (3 - spatial);
    out[2 + i] = dim >= 0 ? t.stride(2 + dim) : 0;
  }
}

// Whether `forward`, chosen for max pooling `p` with unpacked uint8 taps, writes them packed: the
// encoding fits and the algorithm applies to the packed problem (the forward kernels that can
// pack do so wherever they apply to it).
bool packs_taps(const dispatch::Algorithm<PoolProblem>& forward, const PoolProblem& p) {
  if (!pool_packed_taps_fit(p.args)) return false;
  PoolProblem packed = p;
  packed.indices = PoolIndices::taps_packed;
  packed.args.packed_taps = true;
  return forward.applies && forward.applies(packed);
}

struct PoolResult {
  Tensor output, indices;
};

// `return_indices`: the caller hands max pooling's indices to the user (int64 flat positions).
PoolResult pool(const Tensor& x0, const PoolSpec& s, bool return_indices = false) {
  const char* op = s.op;
  const int rank = s.spatial + 2;
  EMBER_CHECK(x0.defined(), op, ": the input is an undefined tensor");
  EMBER_CHECK(x0.dim() == rank || x0.dim() == rank - 1, op, ": expected a ", rank, "-D [N, C, ",
              s.spatial == 1   ? "L"
              : s.spatial == 2 ? "H, W"
                               : "D, H, W",
              "] or ", rank - 1, "-D unbatched input, got shape ", x0.shape_str());
  EMBER_CHECK_STATUS(is_floating(x0.dtype()), not_supported, op, ": input has dtype ",
                     dtype_name(x0.dtype()), "; pooling needs a floating dtype");
  const bool unbatched = x0.dim() == rank - 1;
  Tensor x = unbatched ? x0.detach().unsqueeze(0) : x0.detach();
  for (int i = 0; i < s.spatial; ++i)
    EMBER_CHECK(x.size(2 + i) > 0, op, ": spatial dims must be non-empty, got input shape ",
                x0.shape_str());

  PoolArgs a;
  a.mode = s.mode;
  a.batch = x.size(0);
  a.channels = x.size(1);
  for (int i = 0; i < 3; ++i) {
    const int dim = i - (3 - s.spatial);
    a.in_size[i] = dim >= 0 ? x.size(2 + dim) : 1;
  }
  Shape out_shape = {a.batch, a.channels};
  if (s.mode == PoolMode::adaptive_avg) {
    const auto out = per_dim(s, "output_size", s.output_size, 1);
    for (int i = 0; i < 3; ++i) {
      EMBER_CHECK(out[size_t(i)] >= 1, op, ": output_size must be positive, got ",
                  list_str(s.output_size));
      a.out_size[i] = out[size_t(i)];
    }
  } else {
    const auto k = per_dim(s, "kernel_size", s.kernel, 1);
    const auto st = per_dim(s, "stride", s.stride.empty() ? s.kernel : s.stride, 1);
    const auto p = per_dim(s, "padding", s.padding, 0);
    const auto d = per_dim(s, "dilation", s.dilation, 1);
    for (int i = 0; i < 3; ++i) {
      const size_t u = size_t(i);
      EMBER_CHECK(k[u] >= 1 && st[u] >= 1 && d[u] >= 1 && p[u] >= 0, op, ": kernel_size ",
                  list_str(s.kernel), ", stride ", list_str(s.stride), " and dilation ",
                  list_str(s.dilation), " must be positive and padding ", list_str(s.padding),
                  " non-negative");
      EMBER_CHECK(p[u] <= k[u] / 2, op, ": padding ", list_str(s.padding),
                  " must be at most half of kernel_size ", list_str(s.kernel));
      a.kernel[i] = k[u];
      a.stride[i] = st[u];
      a.padding[i] = p[u];
      a.dilation[i] = d[u];
      a.out_size[i] = pooled_size(a.in_size[i], k[u], st[u], p[u], d[u], s.ceil_mode);
      EMBER_CHECK(a.out_size[i] >= 1, op, ": the input ", x0.shape_str(),
                  " is too small for kernel_size ", list_str(s.kernel), " with dilation ",
                  list_str(s.dilation), " and padding ", list_str(s.padding),
                  " (the output would be empty); use a smaller kernel or more padding");
    }
  }
  for (int i = 3 - s.spatial; i < 3; ++i) out_shape.push_back(a.out_size[i]);
  a.count_include_pad = s.count_include_pad;
  a.channels_last = a.channels > 1 && x.stride(1) == 1;

  // The output keeps a channels_last input's format.
  const MemoryFormat format =
      (rank == 4 || rank == 5) ? x.suggest_memory_format() : MemoryFormat::contiguous;
  a.input = x;
  a.output = empty(out_shape, x.dtype(), x.device(), format);
  strides5(x, s.spatial, a.in_strides);
  strides5(a.output, s.spatial, a.out_strides);
  const bool needs_grad = autograd::needs_grad({&x0});
  PoolProblem problem;  // forward; its indices are allocated once the algorithm is chosen
  problem.args = a;
  if (s.mode == PoolMode::max && (return_indices || needs_grad)) {
    // Backward alone needs only which tap of its window each output took: one byte instead of
    // eight (half a byte where the chosen forward packs them), written by the forward and read
    // by the backward (the user's indices stay int64).
    const int64_t window_taps = a.kernel[0] * a.kernel[1] * a.kernel[2];
    const bool taps = !return_indices && window_taps <= kPoolMaxTapsU8;
    problem.indices = taps ? PoolIndices::taps_u8 : PoolIndices::flat_i64;
  }
  // The forward is chosen for the problem with unpacked taps, in any mode (benchmarked too), and
  // the encoding follows from that choice: packed where the chosen algorithm applies to the
  // packed problem (packs_taps). The backward's problem carries the encoding (its key and every
  // applies() see it), so whichever forward the cache picked, the backward chosen reads what it
  // wrote: forward and backward agree in every mode, and a forced backward that cannot read it is
  // an error, never a wrong result. Benchmarking the forward times its candidates writing
  // unpacked taps (the scratch problem's encoding): a slight handicap to the packing kernels only.
  const dispatch::Algorithm<PoolProblem>& forward = pool_choose(problem);
  if (problem.indices == PoolIndices::taps_u8 && packs_taps(forward, problem)) {
    problem.indices = PoolIndices::taps_packed;
    problem.args.packed_taps = true;
  }
  if (problem.indices != PoolIndices::none) {
    Shape index_shape = out_shape;
    if (problem.args.packed_taps) index_shape[1] /= 2;  // two channels' taps a byte
    problem.args.indices =
        empty(index_shape, problem.indices == PoolIndices::flat_i64 ? DType::i64 : DType::u8,
              x.device(), format);
  }
  a = problem.args;
  if (a.output.numel() > 0) forward.run(problem, nullptr);  // no pooling algorithm has workspace

  PoolResult r{a.output, a.indices};
  if (unbatched) {
    r.output = r.output.squeeze(0);
    if (r.indices.defined()) r.indices = r.indices.squeeze(0);
  }
  if (needs_grad) {
    PoolArgs saved = a;
    saved.input = Tensor();
    saved.output = Tensor();
    const Shape x_shape = x.sizes();
    const Shape input_shape = x0.sizes();
    const DType dtype = x.dtype();
    const Device device = x.device();
    const int spatial = s.spatial;
    // Max pooling's double backward gathers at the argmax, found again from the input.
    const autograd::SavedTensor saved_x(s.mode == PoolMode::max ? x0 : Tensor(), op);
    autograd::record_backward(
        op, {x0}, {&r.output},
        [saved, saved_x, spec = s, indices = problem.indices, x_shape, input_shape, dtype, device,
         format, spatial](const std::vector<Tensor>& grads, const auto&) {
          PoolArgs b = saved;
          Tensor g = grads[0].dtype() == dtype ? grads[0] : grads[0].to(dtype);
          if (g.dim() == spatial + 1) g = g.unsqueeze(0);
          // Max pooling reads indices at the offsets of the output, so its gradient takes the
          // output's dense layout.
          if (b.mode == PoolMode::max) g = g.contiguous(format);
          b.output = g.detach();
          strides5(g, spatial, b.out_strides);
          b.input = empty(x_shape, dtype, device, format);
          strides5(b.input, spatial, b.in_strides);
          if (b.input.numel() > 0) {
            PoolProblem backward;
            backward.direction = Direction::backward;
            backward.args = b;
            backward.indices = indices;
            pool_run(backward);
          }
          Tensor grad = b.input;
          if (grad.sizes() != input_shape) grad = grad.view(input_shape);
          if (autograd::needs_grad({&grads[0]})) {
            // A create_graph backward: the backward is linear in the incoming gradient (and
            // piecewise constant in x), so its own backward is the pooling map applied to the
            // gradient of its result: the forward for average pooling, a gather at the argmax
            // for max pooling.
            const Tensor xv = saved_x.unpack();
            const DType g_dtype = grads[0].dtype();
            autograd::record_backward(
                (std::string(spec.op) + "_backward").c_str(), {grads[0]}, {&grad},
                [spec, xv = xv.defined() ? xv.detach() : Tensor(), g_dtype](
                    const std::vector<Tensor>& gg, const auto&) {
                  Tensor out;
                  if (spec.mode != PoolMode::max) {
                    out = pool(gg[0], spec).output;
                  } else {
                    Tensor flat_indices;
                    {
                      autograd::NoGradGuard no_grad;
                      flat_indices = pool(xv, spec, /*return_indices=*/true).indices;
                    }
                    const int64_t lead = gg[0].dim() - spec.spatial;
                    Shape plane = gg[0].sizes(), index_plane = flat_indices.sizes();
                    plane.resize(size_t(lead));
                    plane.push_back(-1);
                    index_plane.resize(size_t(lead));
                    index_plane.push_back(-1);
                    out = gather(gg[0].reshape(plane), lead, flat_indices.reshape(index_plane))
                              .reshape(flat_indices.sizes());
                  }
                  return std::vector<Tensor>{out.dtype() == g_dtype ? out : out.to(g_dtype)};
                });
          }
          return std::vector<Tensor>{grad};
        });
  }
  return r;
}

PoolSpec max_spec(const char* op, int spatial, const IntList& k, const IntList& s, const IntList& p,
                  const IntList& d, bool ceil_mode) {
  PoolSpec spec{op, spatial, PoolMode::max, k, s, p, d, {}, ceil_mode, true};
  return spec;
}
PoolSpec avg_spec(const char* op, int spatial, const IntList& k, const IntList& s, const IntList& p,
                  bool ceil_mode, bool count_include_pad) {
  PoolSpec spec{op, spatial, PoolMode::avg, k, s, p, {1}, {}, ceil_mode, count_include_pad};
  return spec;
}
PoolSpec adaptive_spec(const char* op, int spatial, const IntList& output_size) {
  PoolSpec spec{op, spatial, PoolMode::adaptive_avg, {1}, {1}, {0}, {1}, output_size, false, true};
  return spec;
}

}  // namespace

Tensor max_pool1d(const Tensor& x, const IntList& k, const IntList& s, const IntList& p,
                  const IntList& d, bool ceil_mode) {
  return pool(x, max_spec("max_pool1d", 1, k, s, p, d, ceil_mode)).output;
}
ValuesIndices max_pool1d_with_indices(const Tensor& x, const IntList& k, const IntList& s,
                                      const IntList& p, const IntList& d, bool ceil_mode) {
  PoolResult r = pool(x, max_spec("max_pool1d_with_indices", 1, k, s, p, d, ceil_mode),
                      /*return_indices=*/true);
  return {r.output, r.indices};
}
Tensor max_pool2d(const Tensor& x, const IntList& k, const IntList& s, const IntList& p,
                  const IntList& d, bool ceil_mode) {
  return pool(x, max_spec("max_pool2d", 2, k, s, p, d, ceil_mode)).output;
}
ValuesIndices max_pool2d_with_indices(const Tensor& x, const IntList& k, const IntList& s,
                                      const IntList& p, const IntList& d, bool ceil_mode) {
  PoolResult r = pool(x, max_spec("max_pool2d_with_indices", 2, k, s, p, d, ceil_mode),
                      /*return_indices=*/true);
  return {r.output, r.indices};
}
Tensor max_pool3d(const Tensor& x, const IntList& k, const IntList& s, const IntList& p,
                  const IntList& d, bool ceil_mode) {
  return pool(x, max_spec("max_pool3d", 3, k, s, p, d, ceil_mode)).output;
}

ValuesIndices max_pool3d_with_indices(const Tensor& x, const IntList& k, const IntList& s,
                                      const IntList& p, const IntList& d, bool ceil_mode) {
  PoolResult r = pool(x, max_spec("max_pool3d_with_indices", 3, k, s, p, d, ceil_mode),
                      /*return_indices=*/true);
  return {r.output, r.indices};
}

Tensor avg_pool1d(const Tensor& x, const IntList& k, const IntList& s, const IntList& p,
                  bool ceil_mode, bool count_include_pad) {
  return pool(x, avg_spec("avg_pool1d", 1, k, s, p, ceil_mode, count_include_pad)).output;
}
Tensor avg_pool2d(const Tensor& x, const IntList& k, const IntList& s, const IntList& p,
                  bool ceil_mode, bool count_include_pad) {
  return pool(x, avg_spec("avg_pool2d", 2, k, s, p, ceil_mode, count_include_pad)).output;
}
Tensor avg_pool3d(const Tensor& x, const IntList& k, const IntList& s, const IntList& p,
                  bool ceil_mode, bool count_include_pad) {
  return pool(x, avg_spec("avg_pool3d", 3, k, s, p, ceil_mode, count_include_pad)).output;
}

Tensor adaptive_avg_pool1d(const Tensor& x, const IntList& output_size) {
  return pool(x, adaptive_spec("adaptive_avg_pool1d", 1, output_size)).output;
}
Tensor adaptive_avg_pool2d(const Tensor& x, const IntList& output_size) {
  return pool(x, adaptive_spec("adaptive_avg_pool2d", 2, output_size)).output;
}
Tensor adaptive_avg_pool3d(const Tensor& x, const IntList& output_size) {
  return pool(x, adaptive_spec("adaptive_avg_pool3d", 3, output_size)).output;
}
Tensor global_avg_pool2d(const Tensor& x) {
  return pool(x, adaptive_spec("global_avg_pool2d", 2, {1})).output;
}

// ---- algorithm cache glue ---------------------------------------------------------------------

namespace {

uint8_t pointer_alignment(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 16;
  const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
  uint8_t align = 16;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// The operand's layout as the algorithms see it: dense channels_last first (a tensor dense both
// ways counts as channels_last; the flags in extra[1] keep both), else dense NCHW, else strided.
dispatch::OperandLayout layout_of(bool dense_cl, bool dense_nchw) {
  if (dense_cl) return dispatch::OperandLayout::channels_last;
  return dense_nchw ? dispatch::OperandLayout::contiguous : dispatch::OperandLayout::strided;
}

}  // namespace

dispatch::OpId pool_op() {
  static const dispatch::OpId id = dispatch::op_id("pooling");
  return id;
}

dispatch::AlgoSlot& pool_slot(Direction direction, DeviceType device_type) {
  return dispatch::algo_slot(pool_op(), direction, device_type);
}

dispatch::AlgoKey pool_key(const PoolProblem& p) {
  const PoolArgs& a = p.args;
  dispatch::AlgoKey key = dispatch::make_algo_key(pool_op(), p.direction, p.device());
  key.rank = 5;
  key.assign(key.input_sizes[0], a.batch);
  key.assign(key.input_sizes[1], a.channels);
  key.assign(key.output_sizes[0], a.batch);
  key.assign(key.output_sizes[1], a.channels);
  for (int i = 0; i < 3; ++i) {
    key.assign(key.input_sizes[2 + i], a.in_size[i]);
    key.assign(key.output_sizes[2 + i], a.out_size[i]);
    key.assign(key.weight_sizes[i], a.kernel[i]);
    key.assign(key.stride[i], a.stride[i]);
    key.assign(key.padding[i], a.padding[i]);
    key.assign(key.dilation[i], a.dilation[i]);
  }
  key.input_dtype = uint8_t(a.input.dtype());
  key.output_dtype = uint8_t(a.output.dtype());
  if (a.indices.defined()) key.weight_dtype = uint8_t(a.indices.dtype());
  const bool in_cl = pool_is_dense(true, a.batch, a.channels, a.in_size, a.in_strides);
  const bool in_nchw = pool_is_dense(false, a.batch, a.channels, a.in_size, a.in_strides);
  const bool out_cl = pool_is_dense(true, a.batch, a.channels, a.out_size, a.out_strides);
  const bool out_nchw = pool_is_dense(false, a.batch, a.channels, a.out_size, a.out_strides);
  key.input_layout = uint8_t(layout_of(in_cl, in_nchw));
  key.output_layout = uint8_t(layout_of(out_cl, out_nchw));
  key.alignment_bytes = std::min(
      {pointer_alignment(a.input), pointer_alignment(a.output), pointer_alignment(a.indices)});
  // Indices at the output's offsets (allocated by the forward in the output's layout; packed
  // ones at half of them).
  bool indices_at_output = true;
  if (a.indices.defined() && !a.packed_taps) {
    indices_at_output = a.indices.sizes() == a.output.sizes();
    for (int64_t d = 0; indices_at_output && d < a.output.dim(); ++d)
      indices_at_output = a.output.size(d) == 1 || a.indices.stride(d) == a.output.stride(d);
  }
  key.extra[0] = int32_t(a.mode) | int32_t(p.indices) << 8 | int32_t(a.count_include_pad) << 16 |
                 int32_t(a.channels_last) << 17 | int32_t(a.packed_taps) << 18;
  key.extra[1] = int32_t(in_cl) | int32_t(in_nchw) << 1 | int32_t(out_cl) << 2 |
                 int32_t(out_nchw) << 3 | int32_t(indices_at_output) << 4 |
                 int32_t(a.out_strides[0] < 0) << 5 | int32_t(a.out_strides[1] < 0) << 6;
  return key;
}

const dispatch::Algorithm<PoolProblem>& pool_choose(const PoolProblem& p) {
  return dispatch::algo_cache().choose(pool_slot(p.direction, p.device().type), pool_key(p), p);
}

void pool_run(const PoolProblem& p) {
  EMBER_INTERNAL_ASSERT(p.args.indices.defined() == (p.indices != PoolIndices::none),
                        "pooling: the indices must be allocated in the problem's encoding");
  dispatch::algo_cache().run(pool_slot(p.direction, p.device().type), pool_key(p), p);
}

bool pool_forward_packs_taps(const PoolProblem& p) {
  return p.direction == Direction::forward && p.indices == PoolIndices::taps_u8 &&
         packs_taps(pool_choose(p), p);
}

}  // namespace ember
