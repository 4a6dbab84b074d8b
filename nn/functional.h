// nn::functional (alias F), as torch.nn.functional: the stateless forms of the layers and losses
// gathered under one name. These are the ops themselves (re-exported, no wrappers), except the
// losses, which are nn's autocast-aware versions of nn/loss.h.
#pragma once
#include "ember/nn/functional_more.h"    // more activations, distances, losses
#include "ember/nn/functional_vision.h"  // pooling, padding, resampling, rms_norm
#include "ember/nn/linear_more.h"
#include "ember/nn/loss.h"
#include "ember/ops/activation.h"
#include "ember/ops/conv.h"
#include "ember/ops/conv_variants.h"
#include "ember/ops/ctc_loss.h"
#include "ember/ops/dropout.h"
#include "ember/ops/embedding_bag.h"
#include "ember/ops/norm.h"
#include "ember/ops/ops.h"
#include "ember/ops/pooling.h"
#include "ember/ops/softmax.h"

namespace ember::nn::functional {

using ember::adaptive_avg_pool2d;
using ember::avg_pool2d;
using ember::batch_norm;
using ember::conv1d;
using ember::conv2d;
using ember::conv3d;
using ember::conv_transpose1d;
using ember::conv_transpose2d;
using ember::conv_transpose3d;
using ember::ctc_loss;
using ember::dropout;
using ember::elu;
using ember::embedding;
using ember::embedding_bag;
using ember::gelu;
using ember::group_norm;
using ember::layer_norm;
using ember::leaky_relu;
using ember::linear;
using ember::log_softmax;
using ember::max_pool2d;
using ember::relu;
using ember::sigmoid;
using ember::silu;
using ember::softmax;
using ember::tanh;

using nn::bilinear;
using nn::binary_cross_entropy_with_logits;
using nn::cross_entropy;
using nn::l1_loss;
using nn::mse_loss;
using nn::nll_loss;

}  // namespace ember::nn::functional

namespace ember::nn {
namespace F = functional;
}
