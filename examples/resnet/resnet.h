// ResNet-18/34/50 as torchvision builds them (same module and parameter names, so state dicts
// load into torchvision.models.resnet18(...) and back), with two stems: "imagenet" (7x7 stride-2
// conv + 3x3 max pool, for 224x224 images) and "cifar" (3x3 stride-1 conv, no pool, for 28x28 and
// 32x32 images). Block tails use the fused batch-norm + residual + ReLU op. Two knobs for small
// machines (the example's CPU run): "resnet10" (one basic block per stage) and `width`, the first
// stage's channels (64 in torchvision; the stages have width, 2, 4 and 8 times width).
#pragma once
#include <string>

#include "ember/nn/nn.h"

namespace resnet {

using ember::Tensor;
namespace nn = ember::nn;

class BasicBlockImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x);

  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential downsample{nullptr};
};
EMBER_MODULE(BasicBlock);

class BottleneckImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x);

  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::Sequential downsample{nullptr};
};
EMBER_MODULE(Bottleneck);

struct ResNetOptions {
  std::string arch = "resnet18";  // resnet10, resnet18, resnet34, resnet50
  int64_t width = 64;             // the first stage's channels (torchvision: 64)
  std::string stem = "cifar";     // cifar or imagenet
  int64_t in_channels = 3;
  int64_t num_classes = 10;
};

class ResNetImpl : public nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  Tensor forward(const Tensor& x);

  ResNetOptions options;
  nn::Conv2d conv1{nullptr};
  nn::BatchNorm2d bn1{nullptr};
  nn::MaxPool2d maxpool{nullptr};
  nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  nn::AdaptiveAvgPool2d avgpool{nullptr};
  nn::Linear fc{nullptr};
};
EMBER_MODULE(ResNet);

}  // namespace resnet
