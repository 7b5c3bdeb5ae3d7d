"""Importance matrices for llama.cpp's grids (quant/gguf/importance.h) against llama.cpp's own quantizer.

On a tiny qwen3 model of hidden size 256 (made here, random weights, with make_model's awkward rows):
  - `rqat convert --to gguf --gguf-type T --imatrix FILE` with an imatrix file written here in llama.cpp's format
    (importances spread over six orders of magnitude, some columns 0, one layer that saw no tokens) gives, in every
    block type, the very bytes of llama.cpp's ggml_quantize_chunk with that importance (what llama-quantize
    --imatrix runs per tensor, with in_sum2 / counts and ones for a layer without tokens, as its loader does);
  - `ptq --grid gguf-T --imatrix --calib ...` writes OUT/imatrix.gguf in llama.cpp's format (one entry per layer,
    counts = calibration tokens), RTN on the grid with it is llama.cpp's quantization with that file, byte for
    byte, its export differs from the reference quantization's, and converting the original model with the file
    gives the same layers (llama-quantize --imatrix OUT/imatrix.gguf would too); GPTQ on the grid takes the
    importance-matrix scales and still exports exactly;
  - misuse is a one-line error before any work.
Needs RQAT_BIN (ptq beside it) and the gguf package; the comparisons with llama.cpp skip without llama-cpp-python.
"""

import ctypes
import json
import os
import pathlib

import numpy as np
import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
gguf = pytest.importorskip("gguf", reason="the gguf package (pip) reads and writes the files")
import safetensors.numpy as st  # noqa: E402

from gguf_models import GGUF_LAYER, hf_name, llama_cpp, qwen3_model_and_task, run  # noqa: E402

PTQ = pathlib.Path(RQAT_BIN).parent / "ptq"
needs_llama_cpp = pytest.mark.skipif(llama_cpp is None, reason="llama-cpp-python is not installed")
BLOCK_TYPES = ["q4_0", "q4_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]
# make_model's matrix of awkward rows, whose fp16 scales underflow: a grid export keeps the values, not the
# sub-block integers llama.cpp computed before rounding d to 0 (test_gguf_grid_cli.py).
AWKWARD = "blk.0.ffn_up.weight"


def gguf_layer_name(hf):
    """model.layers.0.mlp.up_proj.weight -> blk.0.ffn_up.weight"""
    to_gguf = {v: k for k, v in GGUF_LAYER.items()}
    _, _, layer, *module, suffix = hf.split(".")
    return f"blk.{layer}.{to_gguf['.'.join(module)]}.{suffix}"


def ggml_quantize(gguf_type, x, importance):
    """llama.cpp's ggml_quantize_chunk (ggml-base of llama-cpp-python) of float32 rows x with an importance."""
    lib = ctypes.CDLL(str(pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    qtype = gguf.GGMLQuantizationType[gguf_type.upper()].value
    x = np.ascontiguousarray(x, dtype=np.float32)
    qw = np.ascontiguousarray(importance, dtype=np.float32)
    dst = np.zeros(lib.ggml_row_size(qtype, x.shape[1]) * x.shape[0], dtype=np.uint8)
    written = lib.ggml_quantize_chunk(qtype, x.ctypes.data, dst.ctypes.data, 0, x.shape[0], x.shape[1],
                                      qw.ctypes.data)
    assert written == dst.size
    return dst.tobytes()


def write_imatrix(path, entries):
    """llama.cpp's imatrix GGUF: {gguf tensor name: (in_sum2, count)}."""
    writer = gguf.GGUFWriter(str(path), arch="imatrix")
    writer.add_string("general.type", "imatrix")
    writer.add_array("imatrix.datasets", ["test"])
    writer.add_uint32("imatrix.chunk_count", 1)
    writer.add_uint32("imatrix.chunk_size", 1)
    for name, (sums, count) in entries.items():
        writer.add_tensor(f"{name}.in_sum2", np.asarray(sums, dtype=np.float32).reshape(1, -1))
        writer.add_tensor(f"{name}.counts", np.array([[count]], dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def read_imatrix(path):
    """{gguf tensor name: (in_sum2 float32, count)} as llama-quantize reads them."""
    tensors = {t.name: np.asarray(t.data, dtype=np.float32).reshape(-1) for t in gguf.GGUFReader(str(path)).tensors}
    return {name[:-len(".in_sum2")]: (sums, float(tensors[name[:-len(".in_sum2")] + ".counts"][0]))
            for name, sums in tensors.items() if name.endswith(".in_sum2")}


def llama_quantize_weights(sums, count):
    """What llama-quantize's imatrix loader hands the quantizer: in_sum2 / counts, or ones without tokens."""
    return sums / np.float32(count) if count > 0 else np.ones_like(sums)


def layer_tensors(gguf_file):
    return {t.name: t for t in gguf.GGUFReader(str(gguf_file)).tensors if t.name.startswith("blk.")
            and len(t.shape) == 2}


def assert_llama_cpp_bytes(gguf_file, weights, imatrix, gguf_type, label):
    """Every layer matrix of the file is llama.cpp's quantization of the original weight with the imatrix."""
    tensors = layer_tensors(gguf_file)
    assert set(tensors) == set(imatrix), label
    for name, tensor in tensors.items():
        theirs = ggml_quantize(gguf_type, weights[hf_name(name)], llama_quantize_weights(*imatrix[name]))
        ours = bytes(tensor.data)
        if name == AWKWARD and ours != theirs:  # values only there (see AWKWARD)
            qtype = tensor.tensor_type
            assert np.array_equal(gguf.quants.dequantize(np.frombuffer(theirs, dtype=np.uint8), qtype).reshape(-1),
                                  gguf.quants.dequantize(tensor.data, qtype).reshape(-1)), (label, name)
        else:
            assert ours == theirs, (label, name)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return qwen3_model_and_task(tmp_path_factory.mktemp("imatrix"), 31)


@needs_llama_cpp
def test_convert_with_an_imatrix_quantizes_as_llama_cpp_does(work):
    root, model = work
    weights = st.load_file(model / "model.safetensors")
    rng = np.random.default_rng(5)
    entries = {}
    for name, w in weights.items():
        if ".layers." in name and w.ndim == 2:
            sums = (rng.lognormal(0.0, 2.5, w.shape[1]) * 50).astype(np.float32)
            sums[rng.random(w.shape[1]) < 0.05] = 0  # columns never activated
            entries[gguf_layer_name(name)] = (sums, 37.0)
    entries["blk.1.ffn_down.weight"] = (entries["blk.1.ffn_down.weight"][0], 0.0)  # a layer that saw no tokens
    write_imatrix(root / "random.imatrix.gguf", entries)
    imatrix = read_imatrix(root / "random.imatrix.gguf")
    for gguf_type in BLOCK_TYPES:
        out = root / f"convert-{gguf_type}.gguf"
        result = run(RQAT_BIN, "convert", "--model", model, "--to", "gguf", "--gguf-type", gguf_type, "--out", out,
                     "--imatrix", root / "random.imatrix.gguf")
        if gguf_type != "q8_0":  # llama.cpp quantizes Q8_0 without the importance: so does rqat, and says so
            assert f"14 quantized to {gguf_type} with the importance matrix" in result.stdout, result.stdout
        for name, tensor in layer_tensors(out).items():
            assert bytes(tensor.data) == ggml_quantize(gguf_type, weights[hf_name(name)],
                                                       llama_quantize_weights(*imatrix[name])), (gguf_type, name)


@pytest.fixture(scope="module")
def imatrix_ptq(work):
    """ptq RTN on the Q3_K grid with --imatrix from the tiny task's problems, exported to GGUF."""
    root, model = work
    out = root / "rtn-imatrix-q3_k"
    result = run(PTQ, "--model", model, "--out", out, "--method", "rtn", "--grid", "gguf-q3_k", "--imatrix",
                 "--calib", root / "task" / "train.jsonl", "--calib-field", "problem", "--calib-samples", "16",
                 "--calib-seq-len", "32", "--export", "gguf", "--device", "cpu")
    return out, result


def test_ptq_writes_the_imatrix_in_llama_cpps_format(imatrix_ptq):
    out, result = imatrix_ptq
    assert "imatrix of 14 layers" in result.stdout, result.stdout
    reader = gguf.GGUFReader(str(out / "imatrix.gguf"))
    fields = {f.name: f for f in reader.fields.values()}
    assert bytes(fields["general.type"].parts[-1]).decode() == "imatrix"
    assert int(fields["imatrix.chunk_count"].parts[-1][0]) == 16
    assert int(fields["imatrix.chunk_size"].parts[-1][0]) == 32
    imatrix = read_imatrix(out / "imatrix.gguf")
    assert len(imatrix) == 14
    for name, (sums, count) in imatrix.items():
        assert count == 16 * 32, name  # every calibration token reached every layer
        assert sums.shape == (512 if "ffn_down" in name else 256,), name
        # All positive but where make_model's up_proj rows 0 and 4 (zero, x1e-9) silence down_proj's inputs.
        assert np.all(sums >= 0) and np.all(np.isfinite(sums)), name
        assert np.count_nonzero(sums) >= sums.size - 2, name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["importance"] == {"imatrix": True}


@needs_llama_cpp
def test_rtn_with_the_imatrix_is_llama_cpps_imatrix_quantization(work, imatrix_ptq):
    root, model = work
    out, _ = imatrix_ptq
    weights = st.load_file(model / "model.safetensors")
    imatrix = read_imatrix(out / "imatrix.gguf")
    exported = out / "model-q3_k.gguf"
    assert_llama_cpp_bytes(exported, weights, imatrix, "q3_k", "ptq --imatrix")
    # Not the reference quantization: the importance changed the blocks.
    plain = root / "plain-q3_k.gguf"
    run(RQAT_BIN, "convert", "--model", model, "--to", "gguf", "--gguf-type", "q3_k", "--out", plain)
    plain_layers, ours = layer_tensors(plain), layer_tensors(exported)
    changed = [n for n in ours if bytes(ours[n].data) != bytes(plain_layers[n].data)]
    assert len(changed) == 14, changed
    # The file serves a conversion of the original model as llama-quantize --imatrix would use it.
    again = root / "again-q3_k.gguf"
    run(RQAT_BIN, "convert", "--model", model, "--to", "gguf", "--gguf-type", "q3_k", "--out", again, "--imatrix",
        out / "imatrix.gguf")
    assert_llama_cpp_bytes(again, weights, imatrix, "q3_k", "convert --imatrix")


def test_gptq_on_a_grid_takes_the_importance_matrix_scales(work):
    root, model = work
    runs = {}
    for label, extra in [("plain", []), ("imatrix", ["--imatrix"])]:
        out = root / f"gptq-{label}-q4_k"
        result = run(PTQ, "--model", model, "--out", out, "--method", "gptq", "--grid", "gguf-q4_k", *extra,
                     "--calib", root / "task" / "train.jsonl", "--calib-field", "problem", "--calib-samples", "16",
                     "--calib-seq-len", "32", "--export", "gguf", "--device", "cpu")
        # rqat checks each layer's blocks against the artifact's weights while writing them.
        assert "14 matrices written from their codes" in result.stdout, result.stdout
        runs[label] = st.load_file(out / "quant_state.safetensors")
    scales = [n for n in runs["plain"] if n.endswith(".scales")]
    assert scales
    assert sum(not np.array_equal(runs["plain"][n], runs["imatrix"][n]) for n in scales) == len(scales)


def test_imatrix_misuse_is_refused_before_work(work, tmp_path):
    root, model = work
    calib = ["--calib", root / "task" / "train.jsonl", "--calib-field", "problem"]
    result = run(PTQ, "--model", model, "--out", tmp_path / "a", "--method", "rtn", "--bits", "4", "--imatrix",
                 *calib, "--device", "cpu", expect=1)
    assert "--imatrix" in result.stderr and "--grid" in result.stderr, result.stderr
    result = run(PTQ, "--model", model, "--out", tmp_path / "b", "--method", "rtn", "--grid", "gguf-q4_k",
                 "--imatrix", "--device", "cpu", expect=1)
    assert "--imatrix needs calibration data" in result.stderr, result.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    not_imatrix = tmp_path / "model.gguf"
    run(RQAT_BIN, "convert", "--model", model, "--to", "gguf", "--gguf-type", "f16", "--out", not_imatrix)
    result = run(RQAT_BIN, "convert", "--model", model, "--to", "gguf", "--gguf-type", "q4_k", "--out",
                 tmp_path / "c.gguf", "--imatrix", not_imatrix, expect=1)
    assert "not an imatrix" in result.stderr and str(not_imatrix) in result.stderr, result.stderr
    result = run(RQAT_BIN, "convert", "--model", model, "--out", tmp_path / "d", "--imatrix", not_imatrix, expect=1)
    assert "--imatrix goes with --to gguf" in result.stderr, result.stderr
    assert not (tmp_path / "c.gguf").exists() and not (tmp_path / "d").exists()
