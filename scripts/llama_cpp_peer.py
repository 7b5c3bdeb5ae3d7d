"""llama.cpp through llama-cpp-python, as rqat's tests and benchmarks use it: the peer of the GGUF export.

On CPUs with AMX (Intel Sapphire Rapids and later), llama.cpp puts q4_0/q4_1/q8_0 and K-quant weights into "extra
buffer types" for its AMX kernels; inside a virtual machine that does not give the process the AMX tile state that
crashes the first decode with a segmentation fault (seen on this project's machines on 2026-12-04: every q8_0 model,
while f32/f16/bf16 ran). There the models load without extra buffer types (llama_model_params.use_extra_bufts =
false: llama.cpp's plain CPU kernels), which llama-cpp-python's Llama does not take as an argument.
"""

import pathlib


def cpu_has_amx():
    try:
        return "amx_tile" in pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def import_llama_cpp():
    """The llama_cpp module (None when it is not installed), on an AMX CPU loading models without extra buffers."""
    try:
        import llama_cpp
        import llama_cpp.llama_cpp as low_level
    except ImportError:
        return None
    if cpu_has_amx() and not getattr(low_level, "rqat_without_extra_buffers", False):
        default_params = low_level.llama_model_default_params

        def params_without_extra_buffers():
            params = default_params()
            params.use_extra_bufts = False
            return params

        low_level.llama_model_default_params = params_without_extra_buffers  # Llama reads it at each load
        low_level.rqat_without_extra_buffers = True
    return llama_cpp
