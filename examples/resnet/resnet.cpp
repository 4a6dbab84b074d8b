// ResNet blocks and the network (see resnet.h).
#include "resnet/resnet.h"

#include <stdexcept>

namespace resnet {

using nn::BatchNorm2d;
using nn::Conv2d;
using nn::Conv2dOptions;

namespace {
Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return Conv2d(Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}
Conv2d conv1x1(int64_t in, int64_t out, int64_t stride) {
  return Conv2d(Conv2dOptions(in, out, 1).stride(stride).bias(false));
}
nn::Sequential make_downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nn::Sequential(nullptr);
  return nn::Sequential(conv1x1(in, out, stride), BatchNorm2d(out));
}
}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride)
    : nn::Module("BasicBlock") {
  conv1 = register_module("conv1", conv3x3(in_planes, planes, stride));
  bn1 = register_module("bn1", BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1));
  bn2 = register_module("bn2", BatchNorm2d(planes));
  downsample = make_downsample(in_planes, planes * kExpansion, stride);
  if (!downsample.is_empty()) register_module("downsample", downsample);
}

Tensor BasicBlockImpl::forward(const Tensor& x) {
  Tensor identity = downsample.is_empty() ? x : downsample->forward(x);
  Tensor out = bn1->forward_relu(conv1->forward(x));
  return bn2->forward_add_relu(conv2->forward(out), identity);
}

BottleneckImpl::BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride)
    : nn::Module("Bottleneck") {
  conv1 = register_module("conv1", conv1x1(in_planes, planes, 1));
  bn1 = register_module("bn1", BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, stride));
  bn2 = register_module("bn2", BatchNorm2d(planes));
  conv3 = register_module("conv3", conv1x1(planes, planes * kExpansion, 1));
  bn3 = register_module("bn3", BatchNorm2d(planes * kExpansion));
  downsample = make_downsample(in_planes, planes * kExpansion, stride);
  if (!downsample.is_empty()) register_module("downsample", downsample);
}

Tensor BottleneckImpl::forward(const Tensor& x) {
  Tensor identity = downsample.is_empty() ? x : downsample->forward(x);
  Tensor out = bn1->forward_relu(conv1->forward(x));
  out = bn2->forward_relu(conv2->forward(out));
  return bn3->forward_add_relu(conv3->forward(out), identity);
}

namespace {
template <typename Block>
nn::Sequential make_layer(int64_t& in_planes, int64_t planes, int64_t blocks, int64_t stride) {
  nn::Sequential layer;
  for (int64_t i = 0; i < blocks; ++i) {
    layer->push_back(Block(in_planes, planes, i == 0 ? stride : 1));
    in_planes = planes * Block::ImplType::kExpansion;
  }
  return layer;
}
}  // namespace

ResNetImpl::ResNetImpl(const ResNetOptions& o) : nn::Module("ResNet"), options(o) {
  const bool imagenet = o.stem == "imagenet";
  if (!imagenet && o.stem != "cifar")
    throw ember::Error(ember::Status::bad_param,
                       "ResNet: stem must be 'cifar' or 'imagenet', got '" + o.stem + "'");
  conv1 = register_module(
      "conv1",
      imagenet ? Conv2d(Conv2dOptions(o.in_channels, o.width, 7).stride(2).padding(3).bias(false))
               : conv3x3(o.in_channels, o.width, 1));
  bn1 = register_module("bn1", BatchNorm2d(o.width));
  if (imagenet)
    maxpool =
        register_module("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  std::vector<int64_t> blocks;
  bool bottleneck = false;
  if (o.width < 1)
    throw ember::Error(ember::Status::bad_param,
                       "ResNet: width must be >= 1, got " + std::to_string(o.width));
  if (o.arch == "resnet10")
    blocks = {1, 1, 1, 1};
  else if (o.arch == "resnet18")
    blocks = {2, 2, 2, 2};
  else if (o.arch == "resnet34")
    blocks = {3, 4, 6, 3};
  else if (o.arch == "resnet50")
    blocks = {3, 4, 6, 3}, bottleneck = true;
  else
    throw ember::Error(ember::Status::bad_param, "ResNet: unknown arch '" + o.arch +
                                                     "' (resnet10, resnet18, resnet34, resnet50)");
  int64_t in_planes = o.width;
  const int64_t planes[4] = {o.width, 2 * o.width, 4 * o.width, 8 * o.width};
  nn::Sequential* layers[4] = {&layer1, &layer2, &layer3, &layer4};
  for (int i = 0; i < 4; ++i) {
    const int64_t stride = i == 0 ? 1 : 2;
    *layers[i] = bottleneck
                     ? make_layer<Bottleneck>(in_planes, planes[i], blocks[size_t(i)], stride)
                     : make_layer<BasicBlock>(in_planes, planes[i], blocks[size_t(i)], stride);
    register_module("layer" + std::to_string(i + 1), *layers[i]);
  }
  avgpool = register_module("avgpool", nn::AdaptiveAvgPool2d(1));
  fc = register_module("fc", nn::Linear(in_planes, o.num_classes));
  // torchvision's init: kaiming_normal_(fan_out, relu) for convs; BN weight 1, bias 0.
  for (auto& [name, m] : named_modules()) {
    if (auto* c = dynamic_cast<nn::Conv2dImpl*>(m.get()))
      nn::init::kaiming_normal_(c->weight, 0.0, nn::init::FanMode::fan_out,
                                nn::init::Nonlinearity::relu);
  }
}

Tensor ResNetImpl::forward(const Tensor& x) {
  Tensor h = bn1->forward_relu(conv1->forward(x));
  if (!maxpool.is_empty()) h = maxpool->forward(h);
  h = layer4->forward(layer3->forward(layer2->forward(layer1->forward(h))));
  h = avgpool->forward(h).flatten(1);
  return fc->forward(h);
}

}  // namespace resnet
