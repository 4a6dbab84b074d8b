// conv_transpose1d and conv_transpose3d (ops/conv_variants.h), composed of conv_transpose2d and
// view / index_add ops, so autograd, every device and every conv2d algorithm serve them.
#include "ember/ops/conv_variants.h"
#include "ember/ops/ops.h"

namespace ember {

Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose1dParams& p) {
  EMBER_CHECK(input.defined() && weight.defined() && input.dim() == 3 && weight.dim() == 3,
              "conv_transpose1d: expected input [N, Cin, L] and weight [Cin, Cout / groups, K], "
              "got ",
              input.defined() ? input.shape_str() : std::string("undefined"), " and ",
              weight.defined() ? weight.shape_str() : std::string("undefined"),
              " (add a batch dim with unsqueeze(0))");
  ConvTranspose2dParams q;
  q.stride = {1, p.stride};
  q.padding = {0, p.padding};
  q.output_padding = {0, p.output_padding};
  q.dilation = {1, p.dilation};
  q.groups = p.groups;
  return conv_transpose2d(input.unsqueeze(2), weight.unsqueeze(2), bias, q).squeeze(2);
}

Tensor conv_transpose3d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose3dParams& p) {
  EMBER_CHECK(input.defined() && weight.defined() && input.dim() == 5 && weight.dim() == 5,
              "conv_transpose3d: expected input [N, Cin, D, H, W] and weight [Cin, Cout / groups, "
              "T, R, S], got ",
              input.defined() ? input.shape_str() : std::string("undefined"), " and ",
              weight.defined() ? weight.shape_str() : std::string("undefined"),
              " (add a batch dim with unsqueeze(0))");
  const int64_t N = input.size(0), Cin = input.size(1), D = input.size(2), H = input.size(3),
                W = input.size(4);
  const int64_t G = p.groups, Cout_g = weight.size(1), T = weight.size(2);
  EMBER_CHECK(G >= 1 && Cin % G == 0 && weight.size(0) == Cin, "conv_transpose3d: weight ",
              weight.shape_str(), " must be [Cin = ", Cin, ", Cout / groups, T, R, S] with Cin ",
              "divisible by groups = ", G, " (input ", input.shape_str(), ")");
  const int64_t sd = p.stride[0], pd = p.padding[0], od = p.output_padding[0], dd = p.dilation[0];
  EMBER_CHECK(sd >= 1 && dd >= 1 && pd >= 0 && od >= 0 && (od < sd || od < dd),
              "conv_transpose3d: depth stride ", sd, " and dilation ", dd,
              " must be >= 1, padding ", pd, " >= 0 and output_padding ", od,
              " smaller than the stride or the dilation");
  const int64_t full_depth = (D - 1) * sd + dd * (T - 1) + 1 + od;
  const int64_t out_depth = full_depth - 2 * pd;
  EMBER_CHECK(out_depth >= 1, "conv_transpose3d: the output depth would be ", out_depth,
              " for input ", input.shape_str(), ", weight ", weight.shape_str(),
              "; reduce the padding");
  ConvTranspose2dParams q;
  q.stride = {p.stride[1], p.stride[2]};
  q.padding = {p.padding[1], p.padding[2]};
  q.output_padding = {p.output_padding[1], p.output_padding[2]};
  q.dilation = {p.dilation[1], p.dilation[2]};
  q.groups = G;
  // Every depth slice through every depth tap at once: the taps' filters side by side in each
  // group ([Cin, T * Cout / groups, R, S]).
  const Tensor slices = input.permute({0, 2, 1, 3, 4}).reshape({N * D, Cin, H, W});
  const Tensor taps =
      weight.permute({0, 2, 1, 3, 4}).reshape({Cin, T * Cout_g, weight.size(3), weight.size(4)});
  const Tensor y = conv_transpose2d(slices, taps, {}, q);  // [N * D, G * T * Cout_g, Ho, Wo]
  const int64_t Ho = y.size(2), Wo = y.size(3), Cout = G * Cout_g;
  // [N, T * D, Cout, Ho, Wo]: tap t of input depth i lands at output depth i * sd + t * dd.
  const Tensor per_tap = y.reshape({N, D, G, T, Cout_g, Ho, Wo})
                             .permute({0, 3, 1, 2, 4, 5, 6})
                             .reshape({N, T * D, Cout, Ho, Wo});
  std::vector<double> depth(size_t(T * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) depth[size_t(t * D + i)] = double(i * sd + t * dd);
  const Tensor index =
      from_vector(depth, {T * D}, TensorOptions(DType::i64).with_device(input.device()));
  Tensor full = zeros({N, full_depth, Cout, Ho, Wo},
                      TensorOptions(per_tap.dtype()).with_device(input.device()));
  Tensor out = index_add(full, 1, index, per_tap).narrow(1, pd, out_depth).permute({0, 2, 1, 3, 4});
  if (bias.defined()) {
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == Cout, "conv_transpose3d: bias must be [", Cout,
                "], got ", bias.shape_str());
    out = out + bias.view({1, Cout, 1, 1, 1});
  }
  return out.contiguous();
}

}  // namespace ember
