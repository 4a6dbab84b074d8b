// Custom autograd functions written as libtorch writes them:
//
//   struct MulConstant : ember::autograd::Function<MulConstant> {
//     static Tensor forward(AutogradContext* ctx, Tensor x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
//       return {grad_outputs[0] * ctx->saved_data["c"].toDouble(), Tensor()};
//     }
//   };
//   Tensor y = MulConstant::apply(x, 2.0);
//
// forward runs without recording; its tensor arguments (Tensor or std::vector<Tensor>, flattened)
// become the node's inputs, other arguments pass through untouched. backward returns one gradient
// per forward argument (an undefined Tensor for non-tensor arguments and inputs needing none). It
// runs with grad mode on under create_graph, so writing it with differentiable ops gives
// higher-order gradients. record_backward (autograd/graph/node.h) is the lighter form ops use.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "ember/autograd/graph/graph.h"
#include "ember/tensor/tensor.h"

namespace ember::autograd {

// A list of tensors: what forward may return and what backward takes and returns (libtorch's
// torch::autograd::variable_list).
using variable_list = std::vector<Tensor>;

// A value kept in AutogradContext::saved_data (libtorch's IValue, for the kinds custom functions
// keep): none, double, int64, bool, string, Tensor, or a list of int64. The to*() accessors throw
// an Error naming the kind held when asked for another.
class IValue {
 public:
  // None.
  IValue() = default;
  // Implicit conversions from the kinds kept: floating values become double, integers (int,
  // int64_t, uint64_t/size_t) become int64, a C string becomes a string.
  IValue(double v) : v_(v) {}
  IValue(float v) : v_(double(v)) {}
  IValue(int64_t v) : v_(v) {}
  IValue(int v) : v_(int64_t(v)) {}
  IValue(uint64_t v) : v_(int64_t(v)) {}  // size_t
  IValue(bool v) : v_(v) {}
  IValue(std::string v) : v_(std::move(v)) {}
  IValue(const char* v) : v_(std::string(v)) {}
  IValue(Tensor v) : v_(std::move(v)) {}
  IValue(std::vector<int64_t> v) : v_(std::move(v)) {}

  // Whether the value holds that kind.
  bool isNone() const { return v_.index() == 0; }
  bool isDouble() const { return std::holds_alternative<double>(v_); }
  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isString() const { return std::holds_alternative<std::string>(v_); }
  bool isTensor() const { return std::holds_alternative<Tensor>(v_); }
  bool isIntList() const { return std::holds_alternative<std::vector<int64_t>>(v_); }

  double toDouble() const;  // also converts an int64
  // The value as that kind; throws bad_param naming the kind held when it holds another.
  int64_t toInt() const;
  bool toBool() const;
  const std::string& toStringRef() const;
  const Tensor& toTensor() const;
  const std::vector<int64_t>& toIntVector() const;
  // The kind held, for messages: "None", "double", "int", "bool", "string", "Tensor", "int list".
  const char* kind() const;

 private:
  std::variant<std::monostate, double, int64_t, bool, std::string, Tensor, std::vector<int64_t>> v_;
};

class CustomFunctionNode;

// The ctx argument of forward and backward.
class AutogradContext {
 public:
  // Keeps tensors for backward, checked for in-place writes when unpacked (inputs or outputs of
  // forward; outputs are held without a reference cycle).
  void save_for_backward(variable_list to_save);
  // The saved tensors; with their history under create_graph.
  variable_list get_saved_variables() const;
  // Inputs that forward modified in place: their history moves onto this function's node.
  void mark_dirty(const variable_list& inputs);
  // Outputs that are not differentiable (indices, masks): they do not require grad.
  void mark_non_differentiable(const variable_list& outputs);
  // Whether outputs that got no gradient reach backward as zeros (true, the default) or as
  // undefined Tensors.
  void set_materialize_grads(bool value) { materialize_grads_ = value; }
  // Whether the i-th tensor input (counting tensors only) needs a gradient.
  bool needs_input_grad(size_t i) const;

  // Non-tensor values forward keeps for backward (ctx->saved_data["c"] = c), as libtorch's.
  // Tensors belong in save_for_backward, which checks them for in-place writes.
  std::unordered_map<std::string, IValue> saved_data;

 private:
  friend class CustomFunctionNode;
  template <class T>
  friend struct Function;

  std::vector<Tensor> to_save_;  // held between forward and the wiring of outputs
  std::vector<SavedTensor> saved_;
  std::unordered_set<const TensorImpl*> dirty_, non_differentiable_;
  bool materialize_grads_ = true;
  std::vector<bool> needs_input_grad_;
};

// The node of one custom function call: runs the user's backward through a type-erased pointer.
class CustomFunctionNode : public Node {
 public:
  // The user's backward, as Function<T> passes it (T::backward).
  using BackwardCall = variable_list (*)(AutogradContext*, variable_list);
  // A node named `name` (T's name) calling `backward`; is_var says, per forward argument, whether
  // it was a tensor. Function<T>::apply makes it; user code does not.
  CustomFunctionNode(std::string name, BackwardCall backward, std::vector<bool> is_var)
      : name_(std::move(name)), backward_(backward), is_var_(std::move(is_var)) {}
  // The function's name (grad_fn()->name()).
  std::string name() const override { return name_; }
  // Runs the user's backward on the output gradients (undefined ones made zeros unless
  // set_materialize_grads(false)) and returns one gradient per tensor input, summed down to the
  // input's shape when it broadcasts and cast to its dtype. Throws bad_param when backward
  // returns the wrong number of gradients, a gradient for a non-tensor argument or one of a
  // shape that does not broadcast to its input's, and when the node was already released.
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  // Frees the saved tensors once backward ran without retain_graph.
  void release() override;

  // The context forward and backward receive.
  AutogradContext ctx;

  // Makes the node's edges from the tensor inputs, before forward runs (so that forward can ask
  // needs_input_grad).
  void set_inputs(const variable_list& inputs);
  // After forward: saves the tensors given to save_for_backward and gives the outputs this node
  // as grad_fn (or keeps them non-differentiable). Returns the outputs the caller gets.
  variable_list wire_outputs(const variable_list& inputs, variable_list outputs);

 private:
  std::string name_;
  BackwardCall backward_;
  std::vector<bool> is_var_;  // per forward argument: whether it was a tensor
  std::vector<bool> output_defined_;
  std::vector<OutputMeta> input_meta_;  // shape and dtype each input's gradient must have
  bool released_ = false;
};

// T's readable name (the node's name in errors and grad_fn()->name()).
std::string demangled_function_name(const char* mangled);

namespace detail {
struct ExtractVariables {
  std::vector<bool>& is_var;
  variable_list& list;
  void operator()(const Tensor& x) {
    is_var.push_back(true);
    list.push_back(x);
  }
  void operator()(const std::vector<Tensor>& xs) {
    for (const Tensor& x : xs) {
      is_var.push_back(true);
      list.push_back(x);
    }
  }
  template <typename T>
  void operator()(const T&) {
    is_var.push_back(false);
  }
};

inline variable_list to_output_list(const Tensor& t) { return {t}; }
inline variable_list to_output_list(const variable_list& ts) { return ts; }
template <typename Out>
Out from_output_list(variable_list&& outs) {
  if constexpr (std::is_same_v<Out, Tensor>)
    return outs[0];
  else
    return std::move(outs);
}
}  // namespace detail

// The base of a custom function T (CRTP, libtorch's torch::autograd::Function<T>): T defines
// static forward(AutogradContext*, args...) returning a Tensor or a variable_list, and static
// backward(AutogradContext*, variable_list grad_outputs) returning one gradient per argument (see
// the top of this file).
template <class T>
struct Function {
  // Calls T::forward(ctx, args...) without recording and, when a tensor argument requires grad,
  // makes the outputs' grad_fn a node that calls T::backward. Returns what forward returns.
  template <typename... Args>
  static auto apply(Args&&... args) {
    using Out = std::decay_t<decltype(T::forward(static_cast<AutogradContext*>(nullptr),
                                                 std::forward<Args>(args)...))>;
    static_assert(std::is_same_v<Out, Tensor> || std::is_same_v<Out, variable_list>,
                  "autograd::Function: forward must return Tensor or variable_list");
    std::vector<bool> is_var;
    variable_list inputs;
    detail::ExtractVariables extract{is_var, inputs};
    (extract(args), ...);

    auto node = std::make_shared<CustomFunctionNode>(demangled_function_name(typeid(T).name()),
                                                     &call_backward, std::move(is_var));
    node->set_inputs(inputs);
    variable_list outputs;
    {
      NoGradGuard no_grad;
      outputs = detail::to_output_list(T::forward(&node->ctx, std::forward<Args>(args)...));
    }
    return detail::from_output_list<Out>(node->wire_outputs(inputs, std::move(outputs)));
  }

 private:
  static variable_list call_backward(AutogradContext* ctx, variable_list grads) {
    return T::backward(ctx, std::move(grads));
  }
};

}  // namespace ember::autograd
