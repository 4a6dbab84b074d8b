// embedding_bag (ops/embedding_bag.h): argument checks, the normalization of every input form to
// 1-D indices with int64 bag bounds, the kernel calls and the backward formula.
#include "ember/ops/embedding_bag.h"

#include "ember/autograd/graph/graph.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

std::string shape_or_undefined(const Tensor& t) {
  return t.defined() ? t.shape_str() : std::string("undefined");
}

bool is_index_dtype(const Tensor& t) { return t.dtype() == DType::i64 || t.dtype() == DType::i32; }

// [num_bags + 1] int64 bounds on the input's device, from offsets or the 2-D input's rows.
Tensor bag_bounds(const Tensor& input, const EmbeddingBagParams& p, int64_t& num_bags) {
  const TensorOptions i64 = TensorOptions(DType::i64).with_device(input.device());
  if (input.dim() == 2) {
    EMBER_CHECK(!p.offsets.defined(), "embedding_bag: offsets must be undefined when input is 2-D ",
                input.shape_str(), " (each row is a bag); got offsets ", p.offsets.shape_str(),
                ". Pass a 1-D input to use offsets");
    num_bags = input.size(0);
    return arange(0, double(num_bags + 1), 1, i64) * double(input.size(1));
  }
  EMBER_CHECK(input.dim() == 1,
              "embedding_bag: input must be 1-D (with offsets) or 2-D [B, L], got ",
              input.shape_str());
  EMBER_CHECK(p.offsets.defined() && p.offsets.dim() == 1 && is_index_dtype(p.offsets),
              "embedding_bag: a 1-D input ", input.shape_str(),
              " needs 1-D int32/int64 offsets (where each bag starts), got ",
              shape_or_undefined(p.offsets));
  EMBER_CHECK(p.offsets.device() == input.device(), "embedding_bag: offsets are on ",
              p.offsets.device().str(), " but input is on ", input.device().str(),
              "; move them with .to(device)");
  Tensor offsets = p.offsets.to(DType::i64).contiguous();
  Tensor bounds;
  if (p.include_last_offset) {
    EMBER_CHECK(offsets.numel() >= 1, "embedding_bag: with include_last_offset, offsets ",
                offsets.shape_str(), " needs at least one entry (the end of the last bag)");
    num_bags = offsets.numel() - 1;
    bounds = offsets;
  } else {
    num_bags = offsets.numel();
    bounds = cat({offsets, full({1}, double(input.numel()), i64)});
  }
  if (bounds.device().is_cpu()) {
    const int64_t* b = bounds.data<int64_t>();
    EMBER_CHECK(num_bags == 0 || b[0] == 0, "embedding_bag: offsets[0] must be 0 (the first bag ",
                "starts at the first entry), got ", b[0]);
    for (int64_t i = 0; i < num_bags; ++i)
      EMBER_CHECK(b[i] <= b[i + 1] && b[i + 1] <= input.numel(), "embedding_bag: offsets must be ",
                  "non-decreasing and at most the input's length ", input.numel(), ", got ", b[i],
                  " then ", b[i + 1], " at bag ", i);
  }
  return bounds;
}

}  // namespace

Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagParams& p) {
  EMBER_CHECK(weight.defined() && weight.dim() == 2 && is_floating(weight.dtype()),
              "embedding_bag: weight must be a 2-D floating tensor [num_embeddings, dim], got ",
              weight.defined() ? weight.shape_str() + " " + dtype_name(weight.dtype())
                               : std::string("undefined"));
  EMBER_CHECK(input.defined() && is_index_dtype(input),
              "embedding_bag: input must be an int64 or int32 tensor of indices, got ",
              input.defined() ? dtype_name(input.dtype()) : "an undefined tensor");
  EMBER_CHECK(input.device() == weight.device(), "embedding_bag: input is on ",
              input.device().str(), " but weight is on ", weight.device().str(),
              "; move the indices with .to(device)");
  const int64_t rows = weight.size(0), dim = weight.size(1);
  int64_t num_bags = 0;
  EmbeddingBagArgs a;
  a.bounds = bag_bounds(input, p, num_bags);
  a.num_bags = num_bags;
  a.mode = p.mode;
  a.indices = input.reshape({-1}).contiguous();
  a.weight = weight.detach().contiguous();
  if (p.per_sample_weights.defined()) {
    const Tensor& psw = p.per_sample_weights;
    EMBER_CHECK(p.mode == EmbeddingBagMode::sum,
                "embedding_bag: per_sample_weights is only supported with mode sum, got mode ",
                embedding_bag_mode_name(p.mode), "; drop per_sample_weights or use mode sum");
    EMBER_CHECK(psw.sizes() == input.sizes(), "embedding_bag: per_sample_weights ", psw.shape_str(),
                " must have the input's shape ", input.shape_str());
    EMBER_CHECK(psw.dtype() == weight.dtype() && psw.device() == weight.device(),
                "embedding_bag: per_sample_weights (", dtype_name(psw.dtype()), ", ",
                psw.device().str(), ") must have weight's dtype and device (",
                dtype_name(weight.dtype()), ", ", weight.device().str(), ")");
    a.per_sample_weights = psw.detach().reshape({-1}).contiguous();
  }
  if (p.padding_idx) {
    int64_t pad = *p.padding_idx;
    EMBER_CHECK(pad >= -rows && pad < rows, "embedding_bag: padding_idx ", pad, " must be within [",
                -rows, ", ", rows, ") for weight ", weight.shape_str());
    a.padding_idx = pad < 0 ? pad + rows : pad;
  }
  const TensorOptions i64 = TensorOptions(DType::i64).with_device(weight.device());
  a.output = empty({num_bags, dim}, weight.dtype(), weight.device());
  a.bag_count = empty({num_bags}, i64);
  if (p.mode == EmbeddingBagMode::max) a.max_rows = empty({num_bags, dim}, i64);
  if (a.output.numel() > 0 || num_bags > 0)
    embedding_bag_forward_kernel().get(weight.device().type, weight.dtype())(a);

  Tensor out = a.output;
  const Tensor psw_input = p.per_sample_weights;
  if (autograd::needs_grad({&weight, &psw_input})) {
    EmbeddingBagArgs saved = a;
    saved.output = Tensor();
    const autograd::SavedTensor saved_weight(a.weight, "embedding_bag");
    const autograd::SavedTensor saved_psw =
        a.per_sample_weights.defined()
            ? autograd::SavedTensor(a.per_sample_weights, "embedding_bag")
            : autograd::SavedTensor();
    saved.weight = Tensor();
    saved.per_sample_weights = Tensor();
    const Shape psw_shape = input.sizes();
    autograd::record_backward(
        "EmbeddingBagBackward", {weight, psw_input}, {&out},
        [saved, saved_weight, saved_psw, psw_shape](const std::vector<Tensor>& grads,
                                                    const autograd::Node& node) {
          std::vector<Tensor> result(2);
          if (!grads[0].defined()) return result;
          EmbeddingBagArgs b = saved;
          {
            autograd::NoGradGuard no_grad;
            b.weight = saved_weight.unpack().detach();
            if (saved_psw.defined()) b.per_sample_weights = saved_psw.unpack().detach();
            b.grad_output = grads[0].detach().contiguous();
            const Device dev = b.weight.device();
            b.grad_weight =
                zeros(b.weight.sizes(), TensorOptions(b.weight.dtype()).with_device(dev));
            if (node.needs_input_grad(1))
              b.grad_per_sample_weights =
                  zeros({b.indices.numel()}, TensorOptions(b.weight.dtype()).with_device(dev));
            if (b.num_bags > 0) embedding_bag_backward_kernel().get(dev.type, b.weight.dtype())(b);
          }
          if (node.needs_input_grad(0)) result[0] = b.grad_weight;
          if (node.needs_input_grad(1)) result[1] = b.grad_per_sample_weights.reshape(psw_shape);
          return autograd::no_double_backward("embedding_bag", result, grads, node);
        });
  }
  return out;
}

}  // namespace ember
