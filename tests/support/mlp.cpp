// The primitives-only MLP of mlp.h.
#include "support/mlp.h"

namespace ember::testing {

MlpResult train_mlp(Device device, DType dtype, int steps) {
  Generator gen(Device::cpu(), 7);
  const int64_t n = 256, in = 8, hidden = 32, classes = 3;
  auto opts = TensorOptions(dtype).with_device(device);
  // Data: class c points are centred at e_c * 3 plus noise.
  Tensor labels = randint(0, classes, {n}, TensorOptions(DType::i64), &gen);
  Tensor centres = zeros({classes, in}, TensorOptions(DType::f32));
  for (int64_t c = 0; c < classes; ++c) centres.select(0, c).select(0, c).fill_(3.0);
  Tensor x = (index_select(centres, 0, labels) + randn({n, in}, TensorOptions(DType::f32), &gen))
                 .to(device, dtype);
  Tensor y = labels.to(device);

  auto init = [&](Shape s, double scale) {
    return (randn(s, TensorOptions(DType::f32), &gen) * scale)
        .to(device, dtype)
        .detach()
        .set_requires_grad(true);
  };
  Tensor w1 = init({hidden, in}, 0.3), b1 = zeros({hidden}, opts).set_requires_grad(true);
  Tensor w2 = init({classes, hidden}, 0.3), b2 = zeros({classes}, opts).set_requires_grad(true);
  std::vector<Tensor> params{w1, b1, w2, b2};

  MlpResult r;
  const double lr = 0.2;
  for (int step = 0; step < steps; ++step) {
    Tensor logits = linear(relu(linear(x, w1, b1)), w2, b2);
    Tensor logp = log_softmax_reference(logits, 1);
    Tensor loss = -mean(gather(logp, 1, y.unsqueeze(1)));
    double l = loss.item();
    if (step == 0) r.first_loss = l;
    r.last_loss = l;
    for (Tensor& p : params) p.mutable_grad() = Tensor();
    loss.backward();
    autograd::NoGradGuard ng;
    for (Tensor& p : params) sub_(p, p.grad(), lr);
  }
  autograd::NoGradGuard ng;
  Tensor pred = argmax(linear(relu(linear(x, w1, b1)), w2, b2), 1);
  r.accuracy = mean(eq(pred, y).to(DType::f32)).item();
  return r;
}

}  // namespace ember::testing
