// Catch2's main for every test executable but the CUDA one.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
