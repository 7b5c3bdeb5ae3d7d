// Precompiled header for the library, apps and tests: LibTorch's headers are most of the build
// time.
#pragma once
#include <torch/torch.h>
