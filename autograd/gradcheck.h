// gradcheck: compares autograd's gradients with central finite differences, in fp64 on the CPU;
// gradgradcheck does the same for the gradients of the first-order gradient (double backward).
// Every differentiable op is tested with both (tests/cpu/test_gradcheck.cpp holds the table).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember::autograd {

// The function under test: maps the inputs (in order) to one output tensor.
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// `inputs` must be float64 CPU tensors; those with requires_grad are checked. The function's
// output may have any shape. On mismatch returns false and, when `report` is given, describes the
// first mismatching entry (input, element, output element, analytic vs numeric).
bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
               double atol = 1e-5, double rtol = 1e-3, std::string* report = nullptr);

// Checks second derivatives as PyTorch's gradgradcheck does: gradchecks the map
// (inputs, v) -> d(fn(inputs) . v)/d(inputs) computed with create_graph, where v (the gradient of
// fn's output) is `grad_output` when given (fp64 CPU, the output's shape), else uniform in [-1, 1)
// from a fixed seed. v requires grad too, so the backward's dependence on the incoming gradient is
// checked as well.
bool gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                   const Tensor& grad_output = Tensor(), double eps = 1e-6, double atol = 1e-5,
                   double rtol = 1e-3, std::string* report = nullptr);

}  // namespace ember::autograd
