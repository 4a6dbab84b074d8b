// Adaptive max pooling, LP pooling, max unpooling, unfold and fold (ops/pooling_more.h), composed
// from differentiable ops so that their backward is the composition's.
//
// Adaptive max pooling gathers every window padded to the largest window of its dim by repeating
// the window's last element (a repeat never changes the maximum, and coming after the window's
// own elements it never wins a tie), takes max along the flattened window, and maps the winning
// tap to its input position through a small table. Unfold gathers rows and columns of the
// zero-padded input with index_select; fold scatters them back with index_add.
#include "ember/ops/pooling_more.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>

#include "ember/ops/indexing.h"
#include "ember/ops/shape_more.h"
#include "ember/ops/tensor_api.h"

namespace ember {

namespace {

std::string list_str(const IntList& v) { return shape_str(Shape(v.begin(), v.end())); }

// One value per spatial dim from a list of 1 or k values (empty gives `fallback`).
IntList per_dim(const char* op, const char* name, const IntList& v, int64_t k,
                const IntList& fallback = {}) {
  if (v.empty() && !fallback.empty()) return fallback;
  EMBER_CHECK(v.size() == 1 || int64_t(v.size()) == k, op, ": ", name, " ", list_str(v),
              " must hold one value or ", k, " (one per spatial dim)");
  return v.size() == 1 ? IntList(size_t(k), v[0]) : v;
}

// x as [N, C, *spatial] (unbatched inputs get N = 1); `batched` says which it was.
Tensor batched_input(const char* op, const Tensor& x, int64_t k, bool& batched) {
  EMBER_CHECK(x.defined(), op, ": the input is undefined");
  EMBER_CHECK(x.dim() == k + 1 || x.dim() == k + 2, op, ": expected a ", k + 1, "-d [C, *] or ",
              k + 2, "-d [N, C, *] input with ", k, " spatial dim(s), got ", x.shape_str());
  batched = x.dim() == k + 2;
  return batched ? x : x.unsqueeze(0);
}

Tensor int_tensor(const std::vector<double>& v, const Shape& shape, Device device) {
  return from_vector(v, shape, TensorOptions(DType::i64).with_device(device));
}

ValuesIndices adaptive_max_pool_nd(const char* op, const Tensor& x0, const IntList& output_size0,
                                   int64_t k) {
  bool batched = true;
  const Tensor x = batched_input(op, x0, k, batched);
  const IntList out = per_dim(op, "output_size", output_size0, k);
  for (int64_t i = 0; i < k; ++i) {
    EMBER_CHECK(out[size_t(i)] > 0, op, ": output_size ", list_str(output_size0),
                " must be positive");
    EMBER_CHECK(x.size(2 + i) > 0, op, ": expected non-empty spatial dims, got input ",
                x0.shape_str());
  }
  const Device dev = x.device();
  // Per dim: the gathered positions [O * taps] and the window size `taps`.
  std::vector<std::vector<int64_t>> positions(static_cast<size_t>(k));
  IntList taps(static_cast<size_t>(k));
  Tensor y = x;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t in = x.size(2 + i), o_n = out[size_t(i)];
    int64_t t = 0;
    for (int64_t o = 0; o < o_n; ++o)
      t = std::max(t, (((o + 1) * in + o_n - 1) / o_n) - (o * in) / o_n);
    taps[size_t(i)] = t;
    std::vector<double> idx;
    for (int64_t o = 0; o < o_n; ++o) {
      const int64_t s = (o * in) / o_n, e = ((o + 1) * in + o_n - 1) / o_n;
      for (int64_t j = 0; j < t; ++j) {
        idx.push_back(double(std::min(s + j, e - 1)));
        positions[size_t(i)].push_back(std::min(s + j, e - 1));
      }
    }
    y = index_select(y, 2 + i, int_tensor(idx, {int64_t(idx.size())}, dev));
  }
  // [N, C, O0 * t0, ...] -> [N, C, O0, ..., t0 * ...]
  Shape split = {x.size(0), x.size(1)}, perm = {0, 1}, flat = {x.size(0), x.size(1)};
  for (int64_t i = 0; i < k; ++i) {
    split.push_back(out[size_t(i)]);
    split.push_back(taps[size_t(i)]);
    perm.push_back(2 + 2 * i);
    flat.push_back(out[size_t(i)]);
  }
  for (int64_t i = 0; i < k; ++i) perm.push_back(3 + 2 * i);
  const int64_t window = std::accumulate(taps.begin(), taps.end(), int64_t(1), std::multiplies<>());
  flat.push_back(window);
  y = y.reshape(split).permute(perm).reshape(flat);
  auto [values, tap] = max(y, -1);
  // table[o..., w]: the flat input position of tap w of output cell o.
  Shape cells(out.begin(), out.end());
  const int64_t n_cells = std::accumulate(out.begin(), out.end(), int64_t(1), std::multiplies<>());
  std::vector<double> table(static_cast<size_t>(n_cells * window));
  for (int64_t c = 0; c < n_cells; ++c)
    for (int64_t w = 0; w < window; ++w) {
      int64_t rest_c = c, rest_w = w, pos = 0;
      std::array<int64_t, 3> oc{}, tc{};
      for (int64_t i = k - 1; i >= 0; --i) {
        oc[size_t(i)] = rest_c % out[size_t(i)];
        rest_c /= out[size_t(i)];
        tc[size_t(i)] = rest_w % taps[size_t(i)];
        rest_w /= taps[size_t(i)];
      }
      for (int64_t i = 0; i < k; ++i)
        pos = pos * x.size(2 + i) +
              positions[size_t(i)][size_t(oc[size_t(i)] * taps[size_t(i)] + tc[size_t(i)])];
      table[size_t(c * window + w)] = double(pos);
    }
  Shape table_shape = {1, 1};
  table_shape.insert(table_shape.end(), cells.begin(), cells.end());
  table_shape.push_back(window);
  Shape expanded = flat;
  Tensor indices =
      gather(int_tensor(table, table_shape, dev).expand(expanded), -1, tap.unsqueeze(-1))
          .squeeze(-1);
  if (!batched) return {values.squeeze(0), indices.squeeze(0)};
  return {values, indices};
}

Tensor lp_pool_nd(const char* op, const Tensor& x, double norm_type, const IntList& kernel0,
                  const IntList& stride, bool ceil_mode, int64_t k) {
  EMBER_CHECK(x.defined(), op, ": the input is undefined");
  EMBER_CHECK(norm_type > 0, op, ": norm_type must be positive, got ", norm_type);
  const IntList kernel = per_dim(op, "kernel_size", kernel0, k);
  const int64_t window =
      std::accumulate(kernel.begin(), kernel.end(), int64_t(1), std::multiplies<>());
  const Tensor powered = pow(x, norm_type);
  Tensor avg = k == 1   ? avg_pool1d(powered, kernel, stride, {0}, ceil_mode)
               : k == 2 ? avg_pool2d(powered, kernel, stride, {0}, ceil_mode)
                        : avg_pool3d(powered, kernel, stride, {0}, ceil_mode);
  // sign * relu(abs) as PyTorch writes it: a negative average (odd p) stays negative.
  return pow(mul(mul(sign(avg), relu(abs(avg))), double(window)), 1.0 / norm_type);
}

Tensor max_unpool_nd(const char* op, const Tensor& x0, const Tensor& indices0,
                     const IntList& kernel0, const IntList& stride0, const IntList& padding0,
                     const std::optional<IntList>& output_size, int64_t k) {
  bool batched = true;
  const Tensor x = batched_input(op, x0, k, batched);
  EMBER_CHECK(indices0.defined() && indices0.dtype() == DType::i64 &&
                  indices0.sizes() == x0.sizes() && indices0.device() == x0.device(),
              op, ": indices must be an int64 tensor of the input's shape ", x0.shape_str(),
              " and device (as max_pool returns them), got ",
              indices0.defined() ? indices0.shape_str() + " " + dtype_name(indices0.dtype())
                                 : std::string("undefined"));
  const IntList kernel = per_dim(op, "kernel_size", kernel0, k);
  const IntList stride = per_dim(op, "stride", stride0, k, kernel);
  const IntList padding = per_dim(op, "padding", padding0, k);
  IntList size(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i)
    size[size_t(i)] =
        (x.size(2 + i) - 1) * stride[size_t(i)] - 2 * padding[size_t(i)] + kernel[size_t(i)];
  if (output_size) {
    const IntList& os = *output_size;
    EMBER_CHECK(int64_t(os.size()) == k || int64_t(os.size()) == x0.dim(), op, ": output_size ",
                list_str(os), " must hold ", k, " spatial sizes or ", x0.dim(), " sizes");
    for (int64_t i = 0; i < k; ++i) {
      const int64_t want = os[os.size() - size_t(k) + size_t(i)];
      EMBER_CHECK(
          want > size[size_t(i)] - stride[size_t(i)] && want < size[size_t(i)] + stride[size_t(i)],
          op, ": output_size ", list_str(os), " must be within stride ", list_str(stride),
          " of the default size ", list_str(size), " for input ", x0.shape_str());
      size[size_t(i)] = want;
    }
  }
  const int64_t plane = std::accumulate(size.begin(), size.end(), int64_t(1), std::multiplies<>());
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor idx = (batched ? indices0 : indices0.unsqueeze(0)).reshape({n, c, -1});
  if (idx.numel() > 0 && idx.device().type == DeviceType::CPU) {
    const double lo = min(idx).item(), hi = max(idx).item();
    EMBER_CHECK(lo >= 0 && hi < double(plane), op, ": found an invalid max index ",
                lo < 0 ? lo : hi, " (the output plane ", list_str(size), " holds ", plane,
                " positions)");
  }
  Tensor out = zeros({n, c, plane}, TensorOptions(x.dtype()).with_device(x.device()));
  out = scatter(out, 2, idx, x.reshape({n, c, -1}));
  Shape shape = {n, c};
  shape.insert(shape.end(), size.begin(), size.end());
  out = out.reshape(shape);
  return batched ? out : out.squeeze(0);
}

// The sliding-window geometry of unfold and fold (2 spatial dims).
struct Windows {
  IntList kernel, dilation, padding, stride;
  std::array<int64_t, 2> blocks{};  // L_h, L_w
  // Per dim: the padded-input position of (kernel tap, block), tap-major.
  std::array<std::vector<double>, 2> rows;
};

Windows windows(const char* op, const IntList& size, const IntList& kernel0,
                const IntList& dilation0, const IntList& padding0, const IntList& stride0,
                const Tensor& x) {
  Windows w;
  w.kernel = per_dim(op, "kernel_size", kernel0, 2);
  w.dilation = per_dim(op, "dilation", dilation0, 2);
  w.padding = per_dim(op, "padding", padding0, 2);
  w.stride = per_dim(op, "stride", stride0, 2);
  for (size_t i = 0; i < 2; ++i) {
    EMBER_CHECK(w.kernel[i] > 0 && w.dilation[i] > 0 && w.stride[i] > 0 && w.padding[i] >= 0, op,
                ": kernel_size ", list_str(w.kernel), ", dilation ", list_str(w.dilation),
                " and stride ", list_str(w.stride), " must be positive and padding ",
                list_str(w.padding), " non-negative");
    const int64_t span = size[i] + 2 * w.padding[i] - w.dilation[i] * (w.kernel[i] - 1) - 1;
    EMBER_CHECK(span >= 0, op, ": the ", list_str(w.kernel), " kernel (dilation ",
                list_str(w.dilation), ") does not fit the padded size ", list_str(size), " + 2 * ",
                list_str(w.padding), " (input ", x.shape_str(), ")");
    w.blocks[i] = span / w.stride[i] + 1;
    for (int64_t t = 0; t < w.kernel[i]; ++t)
      for (int64_t b = 0; b < w.blocks[i]; ++b)
        w.rows[i].push_back(double(t * w.dilation[i] + b * w.stride[i]));
  }
  return w;
}

}  // namespace

ValuesIndices adaptive_max_pool1d_with_indices(const Tensor& x, const IntList& output_size) {
  return adaptive_max_pool_nd("adaptive_max_pool1d", x, output_size, 1);
}
ValuesIndices adaptive_max_pool2d_with_indices(const Tensor& x, const IntList& output_size) {
  return adaptive_max_pool_nd("adaptive_max_pool2d", x, output_size, 2);
}
ValuesIndices adaptive_max_pool3d_with_indices(const Tensor& x, const IntList& output_size) {
  return adaptive_max_pool_nd("adaptive_max_pool3d", x, output_size, 3);
}
Tensor adaptive_max_pool1d(const Tensor& x, const IntList& output_size) {
  return adaptive_max_pool1d_with_indices(x, output_size).values;
}
Tensor adaptive_max_pool2d(const Tensor& x, const IntList& output_size) {
  return adaptive_max_pool2d_with_indices(x, output_size).values;
}
Tensor adaptive_max_pool3d(const Tensor& x, const IntList& output_size) {
  return adaptive_max_pool3d_with_indices(x, output_size).values;
}

Tensor lp_pool1d(const Tensor& x, double p, const IntList& k, const IntList& s, bool ceil_mode) {
  return lp_pool_nd("lp_pool1d", x, p, k, s, ceil_mode, 1);
}
Tensor lp_pool2d(const Tensor& x, double p, const IntList& k, const IntList& s, bool ceil_mode) {
  return lp_pool_nd("lp_pool2d", x, p, k, s, ceil_mode, 2);
}
Tensor lp_pool3d(const Tensor& x, double p, const IntList& k, const IntList& s, bool ceil_mode) {
  return lp_pool_nd("lp_pool3d", x, p, k, s, ceil_mode, 3);
}

Tensor max_unpool1d(const Tensor& x, const Tensor& indices, const IntList& k, const IntList& s,
                    const IntList& p, const std::optional<IntList>& output_size) {
  return max_unpool_nd("max_unpool1d", x, indices, k, s, p, output_size, 1);
}
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const IntList& k, const IntList& s,
                    const IntList& p, const std::optional<IntList>& output_size) {
  return max_unpool_nd("max_unpool2d", x, indices, k, s, p, output_size, 2);
}
Tensor max_unpool3d(const Tensor& x, const Tensor& indices, const IntList& k, const IntList& s,
                    const IntList& p, const std::optional<IntList>& output_size) {
  return max_unpool_nd("max_unpool3d", x, indices, k, s, p, output_size, 3);
}

Tensor unfold(const Tensor& x0, const IntList& kernel_size, const IntList& dilation,
              const IntList& padding, const IntList& stride) {
  const char* op = "unfold";
  bool batched = true;
  const Tensor x = batched_input(op, x0, 2, batched);
  const Windows w = windows(op, {x.size(2), x.size(3)}, kernel_size, dilation, padding, stride, x);
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t kh = w.kernel[0], kw = w.kernel[1], lh = w.blocks[0], lw = w.blocks[1];
  Tensor y = w.padding[0] || w.padding[1]
                 ? pad(x, {w.padding[1], w.padding[1], w.padding[0], w.padding[0]})
                 : x;
  y = index_select(y, 2, int_tensor(w.rows[0], {kh * lh}, x.device()));
  y = index_select(y, 3, int_tensor(w.rows[1], {kw * lw}, x.device()));
  // [N, C, kh * lh, kw * lw] -> [N, C, kh, kw, lh, lw] -> [N, C * kh * kw, lh * lw]
  y = y.reshape({n, c, kh, lh, kw, lw})
          .permute({0, 1, 2, 4, 3, 5})
          .reshape({n, c * kh * kw, lh * lw});
  return batched ? y : y.squeeze(0);
}

Tensor fold(const Tensor& x0, const IntList& output_size, const IntList& kernel_size,
            const IntList& dilation, const IntList& padding, const IntList& stride) {
  const char* op = "fold";
  EMBER_CHECK(x0.defined() && (x0.dim() == 2 || x0.dim() == 3), op,
              ": expected a 2-d [C * kH * kW, L] or 3-d [N, C * kH * kW, L] input, got ",
              x0.defined() ? x0.shape_str() : std::string("undefined"));
  const bool batched = x0.dim() == 3;
  const Tensor x = batched ? x0 : x0.unsqueeze(0);
  const IntList size = per_dim(op, "output_size", output_size, 2);
  const Windows w = windows(op, size, kernel_size, dilation, padding, stride, x0);
  const int64_t kh = w.kernel[0], kw = w.kernel[1], lh = w.blocks[0], lw = w.blocks[1];
  const int64_t n = x.size(0);
  EMBER_CHECK(x.size(1) % (kh * kw) == 0, op, ": the input's dim ", x0.dim() - 2, " (", x.size(1),
              " in ", x0.shape_str(), ") must be divisible by the kernel's ", kh * kw,
              " taps (kernel_size ", list_str(w.kernel), ")");
  EMBER_CHECK(x.size(2) == lh * lw, op, ": the input ", x0.shape_str(), " holds ", x.size(2),
              " blocks but output_size ", list_str(size), ", kernel_size ", list_str(w.kernel),
              ", dilation ", list_str(w.dilation), ", padding ", list_str(w.padding),
              " and stride ", list_str(w.stride), " make ", lh * lw, " (", lh, " x ", lw, ")");
  const int64_t c = x.size(1) / (kh * kw);
  const int64_t ph = size[0] + 2 * w.padding[0], pw = size[1] + 2 * w.padding[1];
  const TensorOptions opts = TensorOptions(x.dtype()).with_device(x.device());
  Tensor y = x.reshape({n, c, kh, kw, lh, lw})
                 .permute({0, 1, 2, 4, 3, 5})
                 .reshape({n, c, kh * lh, kw * lw});
  y = index_add(zeros({n, c, kh * lh, pw}, opts), 3, int_tensor(w.rows[1], {kw * lw}, x.device()),
                y);
  y = index_add(zeros({n, c, ph, pw}, opts), 2, int_tensor(w.rows[0], {kh * lh}, x.device()), y);
  if (w.padding[0] || w.padding[1])
    y = y.narrow(2, w.padding[0], size[0]).narrow(3, w.padding[1], size[1]);
  return batched ? y : y.squeeze(0);
}

}  // namespace ember
