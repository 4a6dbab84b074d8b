// ctc_loss (ops/ctc_loss.h): argument checks, the targets laid out for the kernels, the
// reductions and the backward formula (one kernel call; the reductions are ordinary ops).
#include "ember/ops/ctc_loss.h"

#include <algorithm>

#include "ember/autograd/graph/graph.h"
#include "ember/kernel_interface/ctc_loss.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

Tensor host_i64(const std::vector<int64_t>& values, Device device) {
  Tensor t = empty({int64_t(values.size())}, DType::i64, Device::cpu());
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return device.is_cpu() ? t : t.to(device);
}

std::vector<int64_t> lengths_on_host(const char* name, const Tensor& t, int64_t N, bool unbatched) {
  EMBER_CHECK(t.defined() && (t.dtype() == DType::i64 || t.dtype() == DType::i32),
              "ctc_loss: ", name, " must be an int64 or int32 tensor, got ",
              t.defined() ? dtype_name(t.dtype()) : "an undefined tensor");
  EMBER_CHECK(t.numel() == N && (t.dim() == 1 || (unbatched && t.dim() == 0)), "ctc_loss: ", name,
              " must be [", N, "] (one length per sample", unbatched ? ", or 0-d unbatched" : "",
              "), got ", t.shape_str());
  Tensor h = t.detach().to(Device::cpu()).to(DType::i64).contiguous();
  return std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + N);
}

}  // namespace

Tensor ctc_loss(const Tensor& log_probs0, const Tensor& targets0,
                const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, const CtcLossParams& p) {
  EMBER_CHECK(log_probs0.defined() &&
                  (log_probs0.dtype() == DType::f32 || log_probs0.dtype() == DType::f64),
              "ctc_loss: log_probs must be float32 or float64 (as PyTorch), got ",
              log_probs0.defined() ? dtype_name(log_probs0.dtype()) : "an undefined tensor",
              "; convert with .to(ember::DType::f32)");
  EMBER_CHECK(log_probs0.dim() == 3 || log_probs0.dim() == 2,
              "ctc_loss: log_probs must be [T, N, C] (or [T, C] unbatched), got ",
              log_probs0.shape_str());
  const bool unbatched = log_probs0.dim() == 2;
  const Tensor log_probs = unbatched ? log_probs0.unsqueeze(1) : log_probs0;
  const int64_t T = log_probs.size(0), N = log_probs.size(1), C = log_probs.size(2);
  EMBER_CHECK(
      targets0.defined() && (targets0.dtype() == DType::i64 || targets0.dtype() == DType::i32),
      "ctc_loss: targets must be an int64 or int32 tensor, got ",
      targets0.defined() ? dtype_name(targets0.dtype()) : "an undefined tensor");
  EMBER_CHECK(targets0.device() == log_probs.device(), "ctc_loss: targets are on ",
              targets0.device().str(), " but log_probs is on ", log_probs.device().str(),
              "; move them with .to(device)");
  EMBER_CHECK(int64_t(input_lengths.size()) == N && int64_t(target_lengths.size()) == N,
              "ctc_loss: input_lengths (", input_lengths.size(), ") and target_lengths (",
              target_lengths.size(), ") need one entry per sample of log_probs ",
              log_probs0.shape_str(), " (", N, ")");
  EMBER_CHECK(p.blank >= 0 && p.blank < C, "ctc_loss: blank ", p.blank,
              " must be a class index in [0, ", C, ") of log_probs ", log_probs0.shape_str());
  const Tensor targets = unbatched && targets0.dim() == 1 ? targets0.unsqueeze(0) : targets0;
  EMBER_CHECK(targets.dim() == 1 || (targets.dim() == 2 && targets.size(0) == N),
              "ctc_loss: targets must be padded [N, S] with N = ", N,
              " or the targets concatenated [sum(target_lengths)], got ", targets0.shape_str());
  int64_t max_target_length = 0, total = 0;
  std::vector<int64_t> offsets(static_cast<size_t>(N));
  for (int64_t b = 0; b < N; ++b) {
    const int64_t in_len = input_lengths[size_t(b)], tg_len = target_lengths[size_t(b)];
    EMBER_CHECK(in_len >= 0 && in_len <= T, "ctc_loss: input_lengths[", b, "] = ", in_len,
                " must be in [0, ", T, "] (T of log_probs ", log_probs0.shape_str(), ")");
    EMBER_CHECK(tg_len >= 0, "ctc_loss: target_lengths[", b, "] = ", tg_len, " is negative");
    if (targets.dim() == 2) {
      EMBER_CHECK(tg_len <= targets.size(1), "ctc_loss: target_lengths[", b, "] = ", tg_len,
                  " exceeds the padded targets' length ", targets.size(1), " (targets ",
                  targets.shape_str(), ")");
      offsets[size_t(b)] = b * targets.size(1);
    } else {
      offsets[size_t(b)] = total;
    }
    total += tg_len;
    max_target_length = std::max(max_target_length, tg_len);
  }
  EMBER_CHECK(targets.dim() == 2 || total <= targets.numel(), "ctc_loss: concatenated targets ",
              targets.shape_str(), " hold fewer labels than sum(target_lengths) = ", total);

  const Device dev = log_probs.device();
  CtcLossArgs a;
  a.log_probs = log_probs.detach().contiguous();
  a.targets = targets.to(DType::i64).contiguous().reshape({-1});
  a.input_lengths = host_i64(input_lengths, dev);
  a.target_lengths = host_i64(target_lengths, dev);
  a.target_offsets = host_i64(offsets, dev);
  a.max_target_length = max_target_length;
  a.blank = p.blank;
  a.zero_infinity = p.zero_infinity;
  a.neg_log_likelihood = empty({N}, log_probs.dtype(), dev);
  a.log_alpha = empty({N, T, 2 * max_target_length + 1}, log_probs.dtype(), dev);
  if (N > 0) ctc_loss_forward_kernel().get(dev.type, log_probs.dtype())(a);

  Tensor nll = a.neg_log_likelihood;
  if (autograd::needs_grad({&log_probs})) {
    CtcLossArgs saved = a;
    saved.log_probs = Tensor();
    saved.neg_log_likelihood = Tensor();
    const autograd::SavedTensor saved_lp(a.log_probs, "ctc_loss");
    const autograd::SavedTensor saved_nll(a.neg_log_likelihood, "ctc_loss", true);
    autograd::record_backward(
        "CtcLossBackward", {log_probs}, {&nll},
        [saved, saved_lp, saved_nll](const std::vector<Tensor>& grads, const autograd::Node& node) {
          std::vector<Tensor> result(1);
          if (!grads[0].defined()) return result;
          CtcLossArgs b = saved;
          {
            autograd::NoGradGuard no_grad;
            b.log_probs = saved_lp.unpack().detach();
            b.neg_log_likelihood = saved_nll.unpack().detach();
            b.grad_output = grads[0].detach().contiguous();
            b.grad_log_probs =
                empty(b.log_probs.sizes(), b.log_probs.dtype(), b.log_probs.device());
            if (b.log_probs.size(1) > 0)
              ctc_loss_backward_kernel().get(b.log_probs.device().type, b.log_probs.dtype())(b);
            else
              b.grad_log_probs.zero_();
          }
          result[0] = b.grad_log_probs;
          return autograd::no_double_backward("ctc_loss", result, grads, node);
        });
  }
  Tensor loss = nll;
  if (p.zero_infinity) loss = where(isinf(loss), 0.0, loss);
  switch (p.reduction) {
    case LossReduction::none:
      return unbatched ? loss.squeeze(0) : loss;
    case LossReduction::sum:
      return sum(loss);
    case LossReduction::mean: {
      Tensor divisor = clamp_min(a.target_lengths.to(log_probs.dtype()), 1.0);
      return mean(loss / divisor);
    }
  }
  return loss;
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CtcLossParams& p) {
  EMBER_CHECK(log_probs.defined() && (log_probs.dim() == 3 || log_probs.dim() == 2),
              "ctc_loss: log_probs must be [T, N, C] (or [T, C] unbatched), got ",
              log_probs.defined() ? log_probs.shape_str() : std::string("undefined"));
  const bool unbatched = log_probs.dim() == 2;
  const int64_t N = unbatched ? 1 : log_probs.size(1);
  return ctc_loss(log_probs, targets, lengths_on_host("input_lengths", input_lengths, N, unbatched),
                  lengths_on_host("target_lengths", target_lengths, N, unbatched), p);
}

}  // namespace ember
