// The convolution sweep's case type, shared by the CPU (tests/cpu/test_conv_cpu.cpp) and CUDA
// (tests/cuda/test_conv_cuda.cpp) conv suites.
#pragma once
#include <cstdint>

#include "ember/ops/conv.h"

namespace ember::testing {

struct ConvCase {
  const char* name;
  int64_t N, C, H, W, K, R, S;
  Conv2dParams p;
};

inline Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                           int64_t groups) {
  Conv2dParams p;
  p.stride = {sh, sw};
  p.padding = {ph, pw};
  p.dilation = {dh, dw};
  p.groups = groups;
  return p;
}

}  // namespace ember::testing
