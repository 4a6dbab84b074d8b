// The op table shared by the gradcheck suite (CPU, fp64) and the CUDA parity suite: one row per
// differentiable op. A new op joins both suites by adding a row in op_table.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"

namespace ember::testing {

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;  // one per tensor input
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  double low = -1, high = 1;   // range of the random input values
  bool bf16_ok = true;         // compared in bf16 on CUDA too
  bool fp64_gradcheck = true;  // false for ops that round through a lower precision
  bool gradgradcheck = true;   // false where PyTorch itself has no double backward
};

// Every row: the core ops (op_table.cpp) followed by each area's rows.
const std::vector<OpCase>& op_cases();
const std::vector<OpCase>& op_cases_core();       // op_table.cpp
const std::vector<OpCase>& op_cases_norm();       // op_table_norm.cpp
const std::vector<OpCase>& op_cases_act();        // op_table_act.cpp
const std::vector<OpCase>& op_cases_nn();         // op_table_nn.cpp
const std::vector<OpCase>& op_cases_rnn();        // op_table_rnn.cpp
const std::vector<OpCase>& op_cases_conv();       // op_table_conv.cpp
const std::vector<OpCase>& op_cases_index();      // op_table_index.cpp
const std::vector<OpCase>& op_cases_tapi();       // op_table_tapi.cpp
const std::vector<OpCase>& op_cases_reduce();     // op_table_reduce.cpp
const std::vector<OpCase>& op_cases_shape();      // op_table_shape.cpp
const std::vector<OpCase>& op_cases_ewise();      // op_table_elementwise_more.cpp
const std::vector<OpCase>& op_cases_linalg();     // op_table_linalg.cpp (+ op_cases_linalg_decomp)
const std::vector<OpCase>& op_cases_nnfunc();     // op_table_nnfunc.cpp
const std::vector<OpCase>& op_cases_attention();  // op_table_attention.cpp
const std::vector<OpCase>& op_cases_nn_extra();   // op_table_nn_extra.cpp
const std::vector<OpCase>& op_cases_vision();     // op_table_vision.cpp

enum class Layout { contiguous, transposed, channels_last };

// Deterministic inputs for a case: uniform in [low, high), made on the CPU from `seed` and moved
// to `device`/`dtype`. `transposed` gives each input of >= 2 dims reversed strides (a permuted
// view of a dense tensor), `channels_last` gives 4-D inputs NHWC strides; values are identical
// across devices and layouts.
std::vector<Tensor> make_inputs(const OpCase& c, DType dtype, Device device, uint64_t seed,
                                Layout layout, bool requires_grad);

}  // namespace ember::testing
