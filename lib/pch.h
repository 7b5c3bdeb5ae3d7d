// The precompiled header of every layer, app, test and benchmark that includes torch: ATen (tensors
// and operators), autograd and torch::nn's Module, which the model headers derive from. Not all of
// <torch/torch.h>: every translation unit loads this file, and that one made a 724 MB .gch that
// cost each of them about 5 s (ops/cpu_target.cpp: 5.9 s with it, 0.87 s without; this one is
// 594 MB, docs/performance.md). A file that needs more of torch's C++ API (optim, data, serialize)
// includes <torch/torch.h> itself.
#pragma once
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
