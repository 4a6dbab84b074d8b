// The view-only shape ops of ops/shape_more.h: movedim / swapaxes, unflatten, narrow_copy, the
// tensor_split family, diagonal, meshgrid, cartesian_prod and the pixel shuffles, with their Tensor
// methods. All are permutes, reshapes, narrows or strided views of the input.
#include <algorithm>
#include <numeric>

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

Tensor movedim(const Tensor& a, const Shape& source, const Shape& destination) {
  const int64_t nd = a.dim();
  EMBER_CHECK(source.size() == destination.size(), "movedim: source ", shape_str(source),
              " and destination ", shape_str(destination), " must have the same number of dims");
  if (nd == 0) {  // a 0-d tensor takes dims 0 / -1, as PyTorch, and stays as it is
    for (size_t i = 0; i < source.size(); ++i) {
      wrap_dim(source[i], 1, "movedim");
      wrap_dim(destination[i], 1, "movedim");
    }
    return a;
  }
  Shape perm(size_t(nd), -1);
  std::vector<bool> src_used(size_t(nd), false);
  for (size_t i = 0; i < source.size(); ++i) {
    const int64_t s = wrap_dim(source[i], nd, "movedim");
    const int64_t d = wrap_dim(destination[i], nd, "movedim");
    EMBER_CHECK(!src_used[size_t(s)], "movedim: repeated dim ", s, " in source ",
                shape_str(source));
    EMBER_CHECK(perm[size_t(d)] < 0, "movedim: repeated dim ", d, " in destination ",
                shape_str(destination));
    src_used[size_t(s)] = true;
    perm[size_t(d)] = s;
  }
  // The dims not moved keep their order in the free destination slots.
  int64_t next = 0;
  for (int64_t i = 0; i < nd; ++i) {
    if (perm[size_t(i)] >= 0) continue;
    while (src_used[size_t(next)]) ++next;
    perm[size_t(i)] = next++;
  }
  return a.permute(perm);
}

Tensor movedim(const Tensor& a, int64_t source, int64_t destination) {
  return movedim(a, Shape{source}, Shape{destination});
}
Tensor moveaxis(const Tensor& a, int64_t source, int64_t destination) {
  return movedim(a, source, destination);
}
Tensor moveaxis(const Tensor& a, const Shape& source, const Shape& destination) {
  return movedim(a, source, destination);
}
Tensor swapaxes(const Tensor& a, int64_t axis0, int64_t axis1) { return a.transpose(axis0, axis1); }
Tensor swapdims(const Tensor& a, int64_t dim0, int64_t dim1) { return a.transpose(dim0, dim1); }

Tensor unflatten(const Tensor& a, int64_t dim, const Shape& sizes) {
  EMBER_CHECK(a.dim() > 0, "unflatten: expects a tensor with at least 1 dim, got a 0-d one");
  const int64_t d = wrap_dim(dim, a.dim(), "unflatten");
  EMBER_CHECK(!sizes.empty(), "unflatten: sizes must be non-empty (input ", a.shape_str(), ")");
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      EMBER_CHECK(infer < 0, "unflatten: only one size may be -1 in ", shape_str(sizes));
      infer = int64_t(i);
    } else {
      EMBER_CHECK(sizes[i] >= 0, "unflatten: invalid size ", sizes[i], " in ", shape_str(sizes));
      known *= sizes[i];
    }
  }
  Shape sz = sizes;
  const int64_t n = a.size(d);
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && n % known == 0, "unflatten: sizes ", shape_str(sizes),
                " cannot split dim ", d, " of size ", n, " (input ", a.shape_str(), ")");
    sz[size_t(infer)] = n / known;
  } else {
    EMBER_CHECK(known == n, "unflatten: sizes ", shape_str(sizes), " multiply to ", known,
                " but dim ", d, " of ", a.shape_str(), " has size ", n);
  }
  Shape out(a.sizes().begin(), a.sizes().begin() + d);
  out.insert(out.end(), sz.begin(), sz.end());
  out.insert(out.end(), a.sizes().begin() + d + 1, a.sizes().end());
  return a.reshape(out);
}

Tensor narrow_copy(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  EMBER_CHECK(a.dim() > 0, "narrow_copy: expects a tensor with at least 1 dim, got a 0-d one");
  return a.narrow(dim, start, length).clone(MemoryFormat::contiguous);
}

std::vector<Tensor> tensor_split(const Tensor& a, int64_t sections, int64_t dim) {
  EMBER_CHECK(a.dim() > 0, "tensor_split: expects a tensor with at least 1 dim, got a 0-d one");
  EMBER_CHECK(sections > 0, "tensor_split: sections must be positive, got ", sections);
  const int64_t d = wrap_dim(dim, a.dim(), "tensor_split");
  const int64_t n = a.size(d), base = n / sections, extra = n % sections;
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t i = 0; i < sections; ++i) {
    const int64_t len = base + (i < extra ? 1 : 0);
    out.push_back(a.narrow(d, off, len));
    off += len;
  }
  return out;
}

std::vector<Tensor> tensor_split(const Tensor& a, const Shape& indices, int64_t dim) {
  EMBER_CHECK(a.dim() > 0, "tensor_split: expects a tensor with at least 1 dim, got a 0-d one");
  const int64_t d = wrap_dim(dim, a.dim(), "tensor_split");
  const int64_t n = a.size(d);
  std::vector<Tensor> out;
  int64_t start = 0;
  // Part i is [indices[i-1], indices[i]): indices past the end clamp, negative ones count from
  // the end, and an index below the one before gives an empty part (as PyTorch).
  auto clampi = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  for (int64_t idx : indices) {
    const int64_t end = clampi(idx);
    out.push_back(a.slice(d, start, std::max(end, start)));
    start = end;
  }
  out.push_back(a.slice(d, start, n));
  return out;
}

namespace {
std::vector<Tensor> split_dim_check(const char* op, const Tensor& a, int64_t min_dim, int64_t dim,
                                    int64_t sections) {
  EMBER_CHECK(a.dim() >= min_dim, op, ": expects a tensor with at least ", min_dim, " dims, got ",
              a.shape_str());
  EMBER_CHECK(sections > 0 && a.size(dim) % sections == 0, op, ": dim ", dim, " of size ",
              a.size(dim), " (shape ", a.shape_str(), ") does not split into ", sections,
              " equal parts");
  return tensor_split(a, sections, dim);
}
int64_t hsplit_dim(const Tensor& a) { return a.dim() == 1 ? 0 : 1; }
void check_min_dim(const char* op, const Tensor& a, int64_t min_dim) {
  EMBER_CHECK(a.dim() >= min_dim, op, ": expects a tensor with at least ", min_dim, " dims, got ",
              a.shape_str());
}
}  // namespace

std::vector<Tensor> hsplit(const Tensor& a, int64_t sections) {
  check_min_dim("hsplit", a, 1);
  return split_dim_check("hsplit", a, 1, hsplit_dim(a), sections);
}
std::vector<Tensor> hsplit(const Tensor& a, const Shape& indices) {
  check_min_dim("hsplit", a, 1);
  return tensor_split(a, indices, hsplit_dim(a));
}
std::vector<Tensor> vsplit(const Tensor& a, int64_t sections) {
  return split_dim_check("vsplit", a, 2, 0, sections);
}
std::vector<Tensor> vsplit(const Tensor& a, const Shape& indices) {
  check_min_dim("vsplit", a, 2);
  return tensor_split(a, indices, 0);
}
std::vector<Tensor> dsplit(const Tensor& a, int64_t sections) {
  check_min_dim("dsplit", a, 3);
  return split_dim_check("dsplit", a, 3, 2, sections);
}
std::vector<Tensor> dsplit(const Tensor& a, const Shape& indices) {
  check_min_dim("dsplit", a, 3);
  return tensor_split(a, indices, 2);
}

Tensor diagonal(const Tensor& a, int64_t offset, int64_t dim1, int64_t dim2) {
  EMBER_CHECK(a.dim() >= 2, "diagonal: expects a tensor with at least 2 dims, got ", a.shape_str());
  const int64_t d1 = wrap_dim(dim1, a.dim(), "diagonal");
  const int64_t d2 = wrap_dim(dim2, a.dim(), "diagonal");
  EMBER_CHECK(d1 != d2, "diagonal: dim1 and dim2 are both ", d1, " (shape ", a.shape_str(),
              "); give two different dims");
  const int64_t n1 = a.size(d1), n2 = a.size(d2);
  const int64_t len =
      std::max<int64_t>(0, offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2));
  int64_t off = a.offset();
  if (len > 0) off += offset >= 0 ? offset * a.stride(d2) : -offset * a.stride(d1);
  Shape sz, st;
  for (int64_t i = 0; i < a.dim(); ++i) {
    if (i == d1 || i == d2) continue;
    sz.push_back(a.size(i));
    st.push_back(a.stride(i));
  }
  sz.push_back(len);
  st.push_back(a.stride(d1) + a.stride(d2));
  Tensor out = make_view(a, sz, st, off);
  if (autograd::needs_grad({&a})) {
    const Shape in = a.sizes();
    const DType dt = a.dtype();
    const Device dev = a.device();
    autograd::record_backward(
        "diagonal", {a}, {&out}, [in, dt, dev, offset, d1, d2](const auto& g, const auto&) {
          if (autograd::grad_enabled()) {
            // A create_graph backward: a copy into a view of zeros would
            // give them no history, so add g at the diagonal's flat
            // positions with index_add (differentiable).
            const int64_t n = shape_numel(in);
            Tensor flat_pos =
                diagonal(
                    arange(0, double(n), 1, TensorOptions(DType::i64).with_device(dev)).reshape(in),
                    offset, d1, d2)
                    .reshape({-1});
            Tensor r = zeros({n}, TensorOptions(dt).with_device(dev));
            return std::vector<Tensor>{index_add(r, 0, flat_pos, g[0].reshape({-1})).reshape(in)};
          }
          Tensor r = zeros(in, TensorOptions(dt).with_device(dev));
          diagonal(r, offset, d1, d2).copy_(g[0]);
          return std::vector<Tensor>{r};
        });
  }
  return out;
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  EMBER_CHECK(indexing == "ij" || indexing == "xy",
              "meshgrid: indexing must be \"ij\" or \"xy\", got \"", indexing, "\"");
  EMBER_CHECK(!tensors.empty(), "meshgrid: expects a non-empty list of tensors");
  const bool swap = indexing == "xy" && tensors.size() >= 2;
  Shape shape;
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].dim() <= 1, "meshgrid: tensor ", i, " has shape ",
                tensors[i].shape_str(), "; expects 0-d or 1-d tensors");
    EMBER_CHECK(
        tensors[i].dtype() == tensors[0].dtype() && tensors[i].device() == tensors[0].device(),
        "meshgrid: tensor ", i, " differs in dtype or device from tensor 0");
    shape.push_back(tensors[i].numel());
  }
  if (swap) std::swap(shape[0], shape[1]);
  std::vector<Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    size_t pos = i;
    if (swap && i < 2) pos = 1 - i;
    Shape view(shape.size(), 1);
    view[pos] = tensors[i].numel();
    out.push_back(tensors[i].reshape(view).expand(shape));
  }
  return out;
}

Tensor cartesian_prod(const std::vector<Tensor>& tensors) {
  EMBER_CHECK(!tensors.empty(), "cartesian_prod: expects a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    EMBER_CHECK(tensors[i].dim() == 1, "cartesian_prod: tensor ", i, " has shape ",
                tensors[i].shape_str(), "; expects 1-d tensors");
  if (tensors.size() == 1) return tensors[0];
  std::vector<Tensor> grids = meshgrid(tensors, "ij");
  for (Tensor& g : grids) g = g.reshape({-1});
  return stack(grids, 1);
}

Tensor pixel_shuffle(const Tensor& a, int64_t r) {
  EMBER_CHECK(a.dim() >= 3, "pixel_shuffle: expects an input of at least 3 dims [*, C, H, W], got ",
              a.shape_str());
  EMBER_CHECK(r > 0, "pixel_shuffle: upscale_factor must be positive, got ", r);
  const int64_t c = a.size(-3), h = a.size(-2), w = a.size(-1);
  EMBER_CHECK(c % (r * r) == 0, "pixel_shuffle: the channel count ", c, " of ", a.shape_str(),
              " is not divisible by upscale_factor^2 = ", r * r);
  Shape lead(a.sizes().begin(), a.sizes().end() - 3);
  const int64_t b = int64_t(lead.size());
  Shape s6 = lead;
  s6.insert(s6.end(), {c / (r * r), r, r, h, w});
  Shape perm(static_cast<size_t>(b));
  std::iota(perm.begin(), perm.end(), 0);
  perm.insert(perm.end(), {b, b + 3, b + 1, b + 4, b + 2});
  Shape out = lead;
  out.insert(out.end(), {c / (r * r), h * r, w * r});
  return a.reshape(s6).permute(perm).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& a, int64_t r) {
  EMBER_CHECK(a.dim() >= 3,
              "pixel_unshuffle: expects an input of at least 3 dims [*, C, H, W], got ",
              a.shape_str());
  EMBER_CHECK(r > 0, "pixel_unshuffle: downscale_factor must be positive, got ", r);
  const int64_t c = a.size(-3), h = a.size(-2), w = a.size(-1);
  EMBER_CHECK(h % r == 0 && w % r == 0, "pixel_unshuffle: the height ", h, " and width ", w, " of ",
              a.shape_str(), " must be divisible by downscale_factor ", r);
  Shape lead(a.sizes().begin(), a.sizes().end() - 3);
  const int64_t b = int64_t(lead.size());
  Shape s6 = lead;
  s6.insert(s6.end(), {c, h / r, r, w / r, r});
  Shape perm(static_cast<size_t>(b));
  std::iota(perm.begin(), perm.end(), 0);
  perm.insert(perm.end(), {b, b + 2, b + 4, b + 1, b + 3});
  Shape out = lead;
  out.insert(out.end(), {c * r * r, h / r, w / r});
  return a.reshape(s6).permute(perm).reshape(out);
}

// ---- Tensor methods ----
Tensor Tensor::movedim(int64_t s, int64_t d) const { return ember::movedim(*this, s, d); }
Tensor Tensor::movedim(const Shape& s, const Shape& d) const { return ember::movedim(*this, s, d); }
Tensor Tensor::moveaxis(int64_t s, int64_t d) const { return ember::movedim(*this, s, d); }
Tensor Tensor::moveaxis(const Shape& s, const Shape& d) const {
  return ember::movedim(*this, s, d);
}
Tensor Tensor::swapaxes(int64_t a0, int64_t a1) const { return transpose(a0, a1); }
Tensor Tensor::swapdims(int64_t d0, int64_t d1) const { return transpose(d0, d1); }
Tensor Tensor::unflatten(int64_t d, const Shape& sizes) const {
  return ember::unflatten(*this, d, sizes);
}
Tensor Tensor::narrow_copy(int64_t d, int64_t start, int64_t length) const {
  return ember::narrow_copy(*this, d, start, length);
}
std::vector<Tensor> Tensor::tensor_split(int64_t sections, int64_t d) const {
  return ember::tensor_split(*this, sections, d);
}
std::vector<Tensor> Tensor::tensor_split(const Shape& indices, int64_t d) const {
  return ember::tensor_split(*this, indices, d);
}
std::vector<Tensor> Tensor::hsplit(int64_t s) const { return ember::hsplit(*this, s); }
std::vector<Tensor> Tensor::hsplit(const Shape& i) const { return ember::hsplit(*this, i); }
std::vector<Tensor> Tensor::vsplit(int64_t s) const { return ember::vsplit(*this, s); }
std::vector<Tensor> Tensor::vsplit(const Shape& i) const { return ember::vsplit(*this, i); }
std::vector<Tensor> Tensor::dsplit(int64_t s) const { return ember::dsplit(*this, s); }
std::vector<Tensor> Tensor::dsplit(const Shape& i) const { return ember::dsplit(*this, i); }
Tensor Tensor::diagonal(int64_t offset, int64_t d1, int64_t d2) const {
  return ember::diagonal(*this, offset, d1, d2);
}

}  // namespace ember
