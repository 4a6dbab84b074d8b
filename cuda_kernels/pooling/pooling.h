// The CUDA pooling family's face. Its algorithms register themselves in the algorithm cache's
// CUDA slots "pooling.forward" and "pooling.backward" (kernel_interface/pooling.h) and are chosen
// there (ops/pooling.h's pool_choose says which): "generic", the 5-D kernels for any layout and
// floating dtype (pooling.cu), and the channels_last fast kernels for float32 and bfloat16
// (pooling_nhwc_algorithms.cu lists them: window_nhwc, window_3x3_nhwc, window_tiles_nhwc,
// window_avg_tiles_nhwc, window_disjoint_nhwc, global_nhwc, global_nchw). Nothing here is needed
// to run them; this header tells tests what the fast kernels do with a problem.
#pragma once
#include "ember/kernel_interface/pooling.h"

namespace ember::cuda {

// The elements per access the channels_last kernels run `problem` on: 16 bytes' worth where the
// channels fill vectors and the pointers are 16-byte aligned (always for global pooling), else 1.
int pool_nhwc_vector(const PoolProblem& problem);

}  // namespace ember::cuda
