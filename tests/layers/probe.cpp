// One #include seen from one layer (tests/layers/CMakeLists.txt names both): a header of a layer
// below must compile, a header of a layer above must not be found.
#include RQAT_PROBE_HEADER
