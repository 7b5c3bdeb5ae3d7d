# The C++ dependencies besides LibTorch, for the project and for fuzz/: Debian's packages, or (on a
# machine without them: a GPU node, a cluster without root) the directory that scripts/gpu-bundle
# packs from them, which defines the same targets and variables.
set(RQAT_DEPS_BUNDLE "" CACHE PATH
    "Unpacked deps/ of scripts/gpu-bundle: take fmt, yaml-cpp, CLI11, HDF5, ... from it, not the system")
if(RQAT_DEPS_BUNDLE)
  if(NOT EXISTS "${RQAT_DEPS_BUNDLE}/rqat-deps.cmake")
    message(FATAL_ERROR "rqat: RQAT_DEPS_BUNDLE=${RQAT_DEPS_BUNDLE} has no rqat-deps.cmake (unpack the bundle's deps.tar.xz and point at deps/)")
  endif()
  include("${RQAT_DEPS_BUNDLE}/rqat-deps.cmake")
else()
  find_package(fmt REQUIRED)
  find_package(nlohmann_json REQUIRED)
  find_package(yaml-cpp REQUIRED)
  find_package(CLI11 REQUIRED)
  find_package(HDF5 REQUIRED COMPONENTS C CXX)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
  pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
  find_package(Boost REQUIRED)  # header-only: multiprecision rationals and floats of the grader
endif()
