// Tensor::str() and operator<<: tensors print as PyTorch prints them (torch/_tensor_str.py's
// rules): one width for every element; floating values whose finite values are all integers print
// as "1.", others with 4 decimals, switching to scientific notation when the finite non-zero
// magnitudes span more than 1000x or leave [1e-4, 1e8]; bools as True/False; rows wrap at 80
// columns; a tensor over 1000 elements shows its first and last 3 items per dim. The dtype is
// named unless it is the default of its kind (float32, int64, bool), the device unless it is the
// CPU.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember {
namespace {

constexpr int64_t kSummaryThreshold = 1000;  // elements; more are summarised
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;
constexpr int kPrecision = 4;

std::string printf_string(const char* format, int width, int precision, double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, width, precision, v);
  return buffer;
}

// How every element of one tensor is written (PyTorch's _Formatter).
class ElementFormat {
 public:
  ElementFormat(DType dtype, const std::vector<double>& shown) {
    if (dtype == DType::boolean) {
      kind_ = Kind::boolean;
      for (double v : shown) width_ = std::max(width_, v != 0 ? 4 : 5);
      return;
    }
    if (!is_floating(dtype)) {
      kind_ = Kind::integer;
      for (double v : shown) width_ = std::max(width_, int(std::to_string(int64_t(v)).size()));
      return;
    }
    double lo = INFINITY, hi = 0;
    bool integral = true;
    for (double v : shown) {
      if (!std::isfinite(v) || v == 0) continue;
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
      integral = integral && v == std::ceil(v);
    }
    kind_ = Kind::integral_float;
    if (hi == 0) return;  // only zeros and non-finite values: "0.", "nan", "inf"
    if (integral) {
      if (hi / lo > 1000 || hi > 1e8) kind_ = Kind::scientific;
    } else {
      kind_ = (hi / lo > 1000 || hi > 1e8 || lo < 1e-4) ? Kind::scientific : Kind::fixed;
    }
    for (double v : shown)
      if (std::isfinite(v) && v != 0)
        width_ = std::max(width_, int(unpadded(v).size()) + (kind_ == Kind::integral_float));
  }

  std::string operator()(double v) const {
    std::string s = unpadded(v);
    if (kind_ == Kind::integral_float && std::isfinite(v)) s += ".";
    if (int(s.size()) < width_) s.insert(0, size_t(width_) - s.size(), ' ');
    return s;
  }
  int width() const { return width_; }

 private:
  enum class Kind { boolean, integer, integral_float, fixed, scientific };

  std::string unpadded(double v) const {
    switch (kind_) {
      case Kind::boolean:
        return v != 0 ? "True" : "False";
      case Kind::integer:
        return std::to_string(int64_t(v));
      default:
        break;
    }
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (kind_) {
      case Kind::integral_float:
        return printf_string("%*.*f", 0, 0, v);
      case Kind::fixed:
        return printf_string("%*.*f", 0, kPrecision, v);
      default:
        return printf_string("%*.*e", 0, kPrecision, v);
    }
  }

  Kind kind_ = Kind::integer;
  int width_ = 1;
};

// Walks the elements a print shows (all, or the edges of each dim when summarising) in order.
struct Printer {
  const std::vector<double>& values;  // all elements, row-major
  const Shape& sizes;
  bool summarise;

  bool elided(int64_t n) const { return summarise && n > 2 * kEdgeItems; }

  // The shown indices along a dim of n items; -1 marks the "..." between the edges.
  std::vector<int64_t> shown_indices(int64_t n) const {
    std::vector<int64_t> out;
    if (!elided(n)) {
      for (int64_t i = 0; i < n; ++i) out.push_back(i);
      return out;
    }
    for (int64_t i = 0; i < kEdgeItems; ++i) out.push_back(i);
    out.push_back(-1);
    for (int64_t i = n - kEdgeItems; i < n; ++i) out.push_back(i);
    return out;
  }

  void collect(size_t dim, int64_t offset, std::vector<double>& out) const {
    if (dim == sizes.size()) {
      out.push_back(values[size_t(offset)]);
      return;
    }
    int64_t inner = 1;
    for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
    for (int64_t i : shown_indices(sizes[dim]))
      if (i >= 0) collect(dim + 1, offset + i * inner, out);
  }

  std::string print(size_t dim, int64_t offset, int indent, const ElementFormat& format) const {
    int64_t inner = 1;
    for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
    const std::vector<int64_t> indices = shown_indices(sizes[dim]);
    std::vector<std::string> items;
    if (dim + 1 == sizes.size()) {
      for (int64_t i : indices)
        items.push_back(i < 0 ? " ..." : format(values[size_t(offset + i)]));
      const int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / (format.width() + 2));
      std::string s = "[";
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0)
          s += int64_t(k) % per_line == 0 ? ",\n" + std::string(size_t(indent + 1), ' ') : ", ";
        s += items[k];
      }
      return s + "]";
    }
    for (int64_t i : indices)
      items.push_back(i < 0 ? "..." : print(dim + 1, offset + i * inner, indent + 1, format));
    // Built by appending: GCC 12 misreads `"," + std::string(...)` as an overlapping memcpy.
    std::string separator = ",";
    separator.append(sizes.size() - dim - 1, '\n').append(size_t(indent + 1), ' ');
    std::string s = "[";
    for (size_t k = 0; k < items.size(); ++k) s += (k > 0 ? separator : "") + items[k];
    return s + "]";
  }
};

bool is_default_dtype(DType t) { return t == DType::f32 || t == DType::i64 || t == DType::boolean; }

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  const std::vector<double> values = to_vector();
  const Shape& shape = sizes();
  std::ostringstream os;
  os << "tensor(";
  if (numel() == 0) {
    os << "[]";
    if (dim() != 1) {
      os << ", size=(";
      for (int64_t d = 0; d < dim(); ++d) os << (d > 0 ? ", " : "") << size(d);
      os << ")";
    }
  } else if (dim() == 0) {
    os << ElementFormat(dtype(), values)(values[0]);
  } else {
    const Printer printer{values, shape, numel() > kSummaryThreshold};
    std::vector<double> shown;
    printer.collect(0, 0, shown);
    os << printer.print(0, 0, 7, ElementFormat(dtype(), shown));
  }
  if (!is_default_dtype(dtype())) os << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ember
