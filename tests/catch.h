// Catch2, as rqat's tests include it. LibTorch's c10/util/Logging.h (without glog) defines a
// one-argument CHECK macro of its own, which replaces Catch's CHECK in a file that includes a torch
// header after Catch. It comes first here, so that Catch's definition is the one that stays. The
// build's precompiled header puts torch first in every file and so hides the clash; this keeps
// each test correct on its own (scripts/check-includes). tests/catch_main.cpp, built without
// LibTorch, includes Catch itself.
#pragma once

#include <c10/util/Logging.h>

#include <catch2/catch.hpp>
