# LibTorch from the torch wheel without TorchConfig.cmake, for machines without a CUDA toolkit.
# Sets TORCH_LIBRARIES, TORCH_CXX_FLAGS and TORCH_INSTALL_PREFIX like find_package(Torch) does.
if(NOT EXISTS "${RQAT_PYTHON}")
  message(FATAL_ERROR "rqat: ${RQAT_PYTHON} not found: run scripts/setup (it creates .venv with torch)")
endif()
execute_process(
  COMMAND "${RQAT_PYTHON}" -c "import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
  OUTPUT_VARIABLE rqat_torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rqat_torch_rc)
if(NOT rqat_torch_rc EQUAL 0)
  message(FATAL_ERROR "rqat: cannot import torch with ${RQAT_PYTHON}: run scripts/setup")
endif()
string(REPLACE "\n" ";" rqat_torch_info "${rqat_torch_info}")
list(GET rqat_torch_info 0 TORCH_INSTALL_PREFIX)
list(GET rqat_torch_info 1 rqat_torch_abi)
list(GET rqat_torch_info 2 Torch_VERSION)

add_library(rqat_torch INTERFACE)
target_include_directories(rqat_torch SYSTEM INTERFACE "${TORCH_INSTALL_PREFIX}/include"
                           "${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include")
set(rqat_torch_libs "")
foreach(lib torch torch_cpu c10)
  list(APPEND rqat_torch_libs "${TORCH_INSTALL_PREFIX}/lib/lib${lib}.so")
endforeach()
target_link_libraries(rqat_torch INTERFACE ${rqat_torch_libs})
set_target_properties(rqat_torch PROPERTIES INTERFACE_LINK_DIRECTORIES "${TORCH_INSTALL_PREFIX}/lib")
set(TORCH_LIBRARIES rqat_torch)
set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=${rqat_torch_abi}")
message(STATUS "rqat: LibTorch ${Torch_VERSION} (CPU only) from ${TORCH_INSTALL_PREFIX}")
