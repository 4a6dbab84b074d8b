// DType names, sizes and promotion rules.
#include "ember/tensor/dtype.h"

namespace ember {

size_t element_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
    case DType::boolean:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  if (n == "float32" || n == "f32" || n == "float") return DType::f32;
  if (n == "float64" || n == "f64" || n == "double") return DType::f64;
  if (n == "float16" || n == "f16" || n == "half" || n == "fp16") return DType::f16;
  if (n == "bfloat16" || n == "bf16") return DType::bf16;
  if (n == "int32" || n == "i32" || n == "int") return DType::i32;
  if (n == "int64" || n == "i64" || n == "long") return DType::i64;
  if (n == "uint8" || n == "u8") return DType::u8;
  if (n == "bool") return DType::boolean;
  EMBER_THROW(bad_param, "unknown dtype '", n,
              "'; expected one of float32, float64, float16, bfloat16, int32, int64, uint8, bool");
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
bool is_integral(DType t) { return !is_floating(t); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // Order of "rank" within a category: bool < u8 < i32 < i64 < f16/bf16 < f32 < f64.
  auto rank = [](DType t) {
    switch (t) {
      case DType::boolean:
        return 0;
      case DType::u8:
        return 1;
      case DType::i32:
        return 2;
      case DType::i64:
        return 3;
      case DType::f16:
        return 4;
      case DType::bf16:
        return 4;
      case DType::f32:
        return 5;
      case DType::f64:
        return 6;
    }
    return 0;
  };
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16))
    return DType::f32;
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace ember
