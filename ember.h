// Ember's umbrella header: include this to get tensors, ops, autograd and the device runtime.
#pragma once
#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "ops/ops.h"
#include "tensor/allocator.h"
#include "tensor/cuda_graph.h"
#include "tensor/device.h"
#include "tensor/generator.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"
