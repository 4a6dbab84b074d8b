// gradcheck: compares autograd's gradients with central finite differences, in fp64 on the CPU.
// Every differentiable op is tested with it (tests/cpu/test_gradcheck.cpp holds the table).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember::autograd {

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// `inputs` must be float64 CPU tensors; those with requires_grad are checked. The function's
// output may have any shape. On mismatch returns false and, when `report` is given, describes the
// first mismatching entry (input, element, output element, analytic vs numeric).
bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
               double atol = 1e-5, double rtol = 1e-3, std::string* report = nullptr);

}  // namespace ember::autograd
