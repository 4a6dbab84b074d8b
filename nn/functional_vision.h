// nn::functional's pooling, normalization, padding and resampling functionals beyond those of
// nn/functional.h: the ops of ops/pooling.h, ops/pooling_more.h, ops/norm.h, ops/norm_more.h,
// ops/shape_more.h and ops/interpolate.h re-exported under F, and F::interpolate / F::fold /
// F::unfold with libtorch's options objects (nn/upsampling.h).
#pragma once
#include "ember/nn/upsampling.h"
#include "ember/ops/interpolate.h"
#include "ember/ops/norm.h"
#include "ember/ops/norm_more.h"
#include "ember/ops/pooling.h"
#include "ember/ops/pooling_more.h"
#include "ember/ops/shape_more.h"

namespace ember::nn::functional {

using ember::adaptive_avg_pool1d;
using ember::adaptive_avg_pool3d;
using ember::adaptive_max_pool1d;
using ember::adaptive_max_pool1d_with_indices;
using ember::adaptive_max_pool2d;
using ember::adaptive_max_pool2d_with_indices;
using ember::adaptive_max_pool3d;
using ember::adaptive_max_pool3d_with_indices;
using ember::avg_pool1d;
using ember::avg_pool3d;
using ember::fold;
using ember::instance_norm;
using ember::interpolate;
using ember::lp_pool1d;
using ember::lp_pool2d;
using ember::lp_pool3d;
using ember::max_pool1d;
using ember::max_pool1d_with_indices;
using ember::max_pool2d_with_indices;
using ember::max_pool3d;
using ember::max_pool3d_with_indices;
using ember::max_unpool1d;
using ember::max_unpool2d;
using ember::max_unpool3d;
using ember::pad;
using ember::pixel_shuffle;
using ember::pixel_unshuffle;
using ember::rms_norm;
using ember::unfold;

}  // namespace ember::nn::functional
