# nccl.h for lib/train/distributed_nccl.cpp (ProcessGroupNCCL.hpp includes it), from the
# nvidia-nccl wheel that the CUDA torch wheel itself was built and runs with. Only that one
# source gets the directory: a target-wide include would not change the code of any other file,
# but keeping it local shows who needs it. Include after add_subdirectory(lib).
if(RQAT_HAVE_CUDA)
  find_path(RQAT_NCCL_INCLUDE_DIR nccl.h
            HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include" /usr/include /usr/local/cuda/include
            NO_DEFAULT_PATH)
  if(NOT RQAT_NCCL_INCLUDE_DIR)
    message(FATAL_ERROR "rqat: nccl.h not found (expected in ${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include): "
                        "install the torch wheel's nvidia-nccl dependency")
  endif()
  set_source_files_properties(${PROJECT_SOURCE_DIR}/lib/train/distributed_nccl.cpp
                              DIRECTORY ${PROJECT_SOURCE_DIR}/lib
                              PROPERTIES INCLUDE_DIRECTORIES ${RQAT_NCCL_INCLUDE_DIR})
  message(STATUS "rqat: nccl.h from ${RQAT_NCCL_INCLUDE_DIR}")
endif()
