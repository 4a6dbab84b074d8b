// Custom autograd functions: the context (saved tensors and data, dirty and non-differentiable
// outputs), the node that runs the user's backward, and IValue's accessors.
#include "ember/autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>

#include "ember/ops/ops.h"

namespace ember::autograd {

// ---- IValue ----

const char* IValue::kind() const {
  static const char* const kinds[] = {"None",   "double", "int",     "bool",
                                      "string", "Tensor", "int list"};
  return kinds[v_.index()];
}

double IValue::toDouble() const {
  if (isInt()) return double(std::get<int64_t>(v_));
  EMBER_CHECK(isDouble(), "IValue::toDouble: the value holds ", kind(), ", not a double");
  return std::get<double>(v_);
}
int64_t IValue::toInt() const {
  EMBER_CHECK(isInt(), "IValue::toInt: the value holds ", kind(), ", not an int");
  return std::get<int64_t>(v_);
}
bool IValue::toBool() const {
  EMBER_CHECK(isBool(), "IValue::toBool: the value holds ", kind(), ", not a bool");
  return std::get<bool>(v_);
}
const std::string& IValue::toStringRef() const {
  EMBER_CHECK(isString(), "IValue::toStringRef: the value holds ", kind(), ", not a string");
  return std::get<std::string>(v_);
}
const Tensor& IValue::toTensor() const {
  EMBER_CHECK(isTensor(), "IValue::toTensor: the value holds ", kind(), ", not a Tensor");
  return std::get<Tensor>(v_);
}
const std::vector<int64_t>& IValue::toIntVector() const {
  EMBER_CHECK(isIntList(), "IValue::toIntVector: the value holds ", kind(), ", not an int list");
  return std::get<std::vector<int64_t>>(v_);
}

std::string demangled_function_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  return name;
}

// ---- AutogradContext ----

void AutogradContext::save_for_backward(variable_list to_save) { to_save_ = std::move(to_save); }

variable_list AutogradContext::get_saved_variables() const {
  variable_list out;
  out.reserve(saved_.size());
  for (const SavedTensor& s : saved_) out.push_back(s.unpack());
  return out;
}

void AutogradContext::mark_dirty(const variable_list& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined()) dirty_.insert(t.impl());
}

void AutogradContext::mark_non_differentiable(const variable_list& outputs) {
  for (const Tensor& t : outputs)
    if (t.defined()) non_differentiable_.insert(t.impl());
}

bool AutogradContext::needs_input_grad(size_t i) const {
  return i < needs_input_grad_.size() && needs_input_grad_[i];
}

// ---- CustomFunctionNode ----

void CustomFunctionNode::set_inputs(const variable_list& inputs) {
  const bool record = needs_grad(inputs);
  sequence_nr = next_sequence_nr();
  for (const Tensor& in : inputs) {
    input_meta_.push_back(in.defined() ? OutputMeta{in.sizes(), in.dtype(), in.device()}
                                       : OutputMeta{});
    next_edges.push_back(record ? gradient_edge(in) : Edge{});
    ctx.needs_input_grad_.push_back(next_edges.back().valid());
  }
}

variable_list CustomFunctionNode::wire_outputs(const variable_list& inputs, variable_list outputs) {
  bool record = false;
  for (const Edge& e : next_edges) record = record || e.valid();

  auto is_input = [&](const TensorImpl* impl) {
    for (const Tensor& in : inputs)
      if (in.defined() && in.impl() == impl) return true;
    return false;
  };
  for (const TensorImpl* d : ctx.dirty_)
    EMBER_CHECK(is_input(d), name_,
                ": mark_dirty was given a tensor that is not an input of forward; mark only the "
                "inputs that forward modified in place");

  // Saved tensors first, while inputs still have the history they had before this call: a saved
  // output (or dirty input) is found again through this node when unpacked.
  auto is_output = [&](const Tensor& t) {
    for (const Tensor& o : outputs)
      if (o.defined() && o.impl() == t.impl())
        return !is_input(t.impl()) || ctx.dirty_.count(t.impl());
    return false;
  };
  for (const Tensor& t : ctx.to_save_)
    ctx.saved_.emplace_back(t, "a custom autograd::Function", t.defined() && is_output(t));
  ctx.to_save_.clear();

  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    if (!out.defined()) {
      this->outputs.push_back({});
      output_impls.emplace_back();
      output_defined_.push_back(false);
      continue;
    }
    const bool dirty = ctx.dirty_.count(out.impl()) > 0;
    if (record && dirty) {
      EMBER_CHECK(!(out.requires_grad() && out.is_leaf()), name_,
                  ": a leaf tensor that requires grad (shape ", out.shape_str(),
                  ") was modified in place by forward (mark_dirty); clone it first");
    } else if (is_input(out.impl())) {
      // An input returned as it is becomes a new alias, so its own history stays untouched.
      const bool non_diff = ctx.non_differentiable_.count(out.impl()) > 0;
      out = out.detach();
      if (non_diff) ctx.non_differentiable_.insert(out.impl());
    }
    this->outputs.push_back({out.sizes(), out.dtype(), out.device()});
    output_impls.push_back(out.impl_ptr());
    output_defined_.push_back(true);
    const bool differentiable =
        is_floating(out.dtype()) && !ctx.non_differentiable_.count(out.impl());
    if (record && differentiable) {
      auto& meta = out.impl()->autograd;
      if (!meta) meta = std::make_shared<AutogradMeta>();
      meta->requires_grad = true;
      meta->grad_fn = shared_from_this();
      meta->output_nr = uint32_t(i);
    }
  }
  return outputs;
}

std::vector<Tensor> CustomFunctionNode::apply(std::vector<Tensor>&& grads) {
  EMBER_CHECK(!released_, "autograd: trying to backward through ", name_,
              " a second time, after its saved tensors were freed; pass retain_graph=true to the "
              "first backward() if you need to backward twice");
  grads.resize(outputs.size());
  if (ctx.materialize_grads_)
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined() && output_defined_[i])
        grads[i] =
            zeros(outputs[i].sizes, TensorOptions(outputs[i].dtype).with_device(outputs[i].device));
  variable_list result;
  {
    CurrentBackwardNodeGuard current(this);
    result = backward_(&ctx, std::move(grads));
  }
  // Extra trailing undefined gradients are allowed, as in libtorch.
  if (result.size() > is_var_.size()) {
    bool all_undefined = true;
    for (size_t i = is_var_.size(); i < result.size(); ++i) all_undefined &= !result[i].defined();
    if (all_undefined) result.resize(is_var_.size());
  }
  EMBER_CHECK(result.size() == is_var_.size(), name_, ": backward returned ", result.size(),
              " gradients but forward takes ", is_var_.size(),
              " arguments; return one per argument (an undefined Tensor for non-tensor "
              "arguments and inputs that need no gradient)");
  std::vector<Tensor> per_input;
  for (size_t i = 0; i < result.size(); ++i) {
    if (is_var_[i]) {
      per_input.push_back(std::move(result[i]));
      continue;
    }
    EMBER_CHECK(!result[i].defined(), name_, ": backward returned a gradient at position ", i,
                ", but forward's argument there is not a tensor; return an undefined Tensor");
  }
  // Each gradient takes its input's shape (summing a broadcast one down) and dtype.
  for (size_t k = 0; k < per_input.size(); ++k) {
    Tensor& g = per_input[k];
    if (!g.defined() || k >= next_edges.size() || !next_edges[k].valid()) continue;
    const OutputMeta& in = input_meta_[k];
    if (g.sizes() != in.sizes) {
      bool expandable = g.dim() >= int64_t(in.sizes.size());
      const size_t lead = size_t(g.dim()) - in.sizes.size();
      for (size_t d = 0; expandable && d < in.sizes.size(); ++d)
        expandable = in.sizes[d] == 1 || in.sizes[d] == g.size(int64_t(lead + d));
      EMBER_CHECK(expandable, name_, ": backward returned a gradient of shape ", g.shape_str(),
                  " for input ", k, " of shape ", shape_str(in.sizes),
                  "; return a gradient of the input's shape");
      g = sum_to(g, in.sizes);
    }
    if (g.dtype() != in.dtype) g = g.to(in.dtype);
  }
  return per_input;
}

void CustomFunctionNode::release() {
  ctx.saved_.clear();
  released_ = true;
}

}  // namespace ember::autograd
