"""Quantization and QAT on llama.cpp's own grids (`--grid gguf-<type>`, quant/gguf/grid.h) through the tools, read
back by llama.cpp's readers.

On a tiny qwen3 model of hidden size 256 (made here, random weights):
  - ptq --grid gguf-T (RTN: llama.cpp's reference quantization; GPTQ: codes chosen on those scales) with --export gguf
    writes a GGUF file whose every quantized matrix, dequantized by the gguf package, equals the artifact's weights
    bit for bit (no rounding at export), and the RTN file is byte-identical to `rqat convert --to gguf` of the
    full-precision model (the same reference quantizer);
  - qat-kd started from the grid artifact trains codes on the grid (they move), and its GGUF export (qat-kd --export
    gguf, `rqat convert --to gguf`) is again exact: the deployed model is the trained one; llama.cpp's logits on it equal rqat's forward
    of the trained artifact within the tolerance of test_gguf_export.py's block types;
  - a GGUF file of one block type imported by rqat (`rqat convert --model x.gguf`) comes with its codes as a quant
    state on the file's grid, so QAT continues on it, and exporting the import again gives the file's very bytes
    (the layers; llama, whose q/k rows are reordered both ways, and qwen3);
  - with --scale-mode lsq, qat-kd learns the scales the block format stores as fp16 (q4_k's super-block scales,
    q4_1's block scales and mins): they move, and the export is still exact;
  - a grid that the model's rows cannot hold, and a method that cannot use a grid, are refused in one line before
    any work.
Needs RQAT_BIN (ptq and qat-kd beside it) and the gguf package; the llama.cpp part skips without llama-cpp-python.
"""

import os
import pathlib

import numpy as np
import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
gguf = pytest.importorskip("gguf", reason="the gguf package (pip) reads the files")
import safetensors.numpy as st  # noqa: E402

from gguf_models import (BASE, FAMILIES, PROMPT, TEACHER, hf_name, llama_cpp, llama_cpp_logits,  # noqa: E402
                         make_model, qwen3_model_and_task, rqat_logits, run)

APPS = pathlib.Path(RQAT_BIN).parent
PTQ, QAT_KD = APPS / "ptq", APPS / "qat-kd"
needs_llama_cpp = pytest.mark.skipif(llama_cpp is None, reason="llama-cpp-python is not installed")
# make_model's matrix of awkward rows. Where a block's fp16 scale d underflows to 0, llama.cpp still writes the
# sub-block scales it computed before rounding d (integers times 0); a grid keeps only the values (all 0 there).
AWKWARD = "blk.0.ffn_up.weight"
RTN_TYPES = ["q4_0", "q8_0", "q4_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"]


def quantized_matrices(gguf_file):
    """{Hugging Face name: float32 weight} of the file's quantized matrices, as the gguf package dequantizes them."""
    out = {}
    for tensor in gguf.GGUFReader(str(gguf_file)).tensors:
        if tensor.tensor_type.name in ("F32", "F16", "BF16"):
            continue
        shape = tuple(int(n) for n in reversed(tensor.shape))
        out[hf_name(tensor.name)] = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(
            np.float32).reshape(shape)
    return out


def assert_exact(gguf_file, artifact, gguf_type):
    weights = st.load_file(artifact / "model.safetensors")
    matrices = quantized_matrices(gguf_file)
    layers = [n for n in matrices if ".layers." in n]
    assert len(layers) == 7 * BASE["num_hidden_layers"], sorted(matrices)
    for name in layers:
        # Value equality (+0 and -0 alike): every weight of the artifact is exactly a value of the file's blocks.
        assert np.array_equal(matrices[name], weights[name]), (gguf_type, name,
                                                               np.abs(matrices[name] - weights[name]).max())
    for tensor in gguf.GGUFReader(str(gguf_file)).tensors:
        if ".layers." in hf_name(tensor.name) and len(tensor.shape) == 2:
            assert tensor.tensor_type.name.lower() == gguf_type


def assert_same_blocks(first_file, second_file, label, layers_only=False):
    """The two files hold the same bytes in every tensor (the decoder layers' only with layers_only), except the
    values-only comparison of AWKWARD."""
    def tensors(file):
        return {t.name: t for t in gguf.GGUFReader(str(file)).tensors if not layers_only or t.name.startswith("blk.")}
    first, second = tensors(first_file), tensors(second_file)
    assert set(first) == set(second), label
    for name, t in first.items():
        if name == AWKWARD:
            assert np.array_equal(gguf.quants.dequantize(t.data, t.tensor_type),
                                  gguf.quants.dequantize(second[name].data, t.tensor_type)), label
        else:
            assert bytes(t.data) == bytes(second[name].data), (label, name)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return qwen3_model_and_task(tmp_path_factory.mktemp("grid"), 21)


def test_rtn_on_every_grid_exports_exactly_and_as_llama_cpp_quantizes(work):
    root, model = work
    for gguf_type in RTN_TYPES:
        out = root / f"rtn-{gguf_type}"
        result = run(PTQ, "--model", model, "--out", out, "--method", "rtn", "--grid", f"gguf-{gguf_type}",
                     "--export", "gguf", "--device", "cpu")
        assert "14 matrices written from their codes" in result.stdout, result.stdout
        file = out / f"model-{gguf_type}.gguf"
        assert_exact(file, out, gguf_type)
        # RTN on the grid is llama.cpp's reference quantization: the same bytes as converting the original model.
        plain = root / f"plain-{gguf_type}.gguf"
        run(RQAT_BIN, "convert", "--model", model, "--to", "gguf", "--gguf-type", gguf_type, "--out", plain)
        assert_same_blocks(file, plain, gguf_type)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_an_imported_gguf_continues_on_its_own_grid(work, family):
    root, _ = work
    model = make_model(root / f"import-{family}", FAMILIES[family], 23)
    for gguf_type in ["q4_k", "q3_k", "q4_0"]:
        file = root / f"import-{family}-{gguf_type}.gguf"
        run(RQAT_BIN, "convert", "--model", model, "--to", "gguf", "--gguf-type", gguf_type, "--out", file)
        imported = root / f"import-{family}-{gguf_type}"
        run(RQAT_BIN, "convert", "--model", file, "--out", imported, "--tokenizer", TEACHER)
        assert (imported / "quant_state.safetensors").exists()
        again = root / f"again-{family}-{gguf_type}.gguf"
        result = run(RQAT_BIN, "convert", "--model", imported, "--to", "gguf", "--gguf-type", gguf_type, "--out",
                     again)
        assert "14 matrices written from their codes" in result.stdout, result.stdout
        # The layers' blocks come back as they were (the embeddings and output layer, not in the quant state, are
        # quantized again from their dequantized values).
        assert_same_blocks(file, again, (family, gguf_type), layers_only=True)


@pytest.fixture(scope="module")
def trained(work):
    """GPTQ on the Q3_K grid, then 6 qat-kd steps on it from the full-precision model."""
    root, model = work
    ptq = root / "gptq-q3_k"
    run(PTQ, "--model", model, "--out", ptq, "--method", "gptq", "--grid", "gguf-q3_k", "--calib",
        root / "task" / "train.jsonl", "--calib-field", "problem", "--calib-samples", "16", "--calib-seq-len", "32",
        "--export", "gguf", "--device", "cpu")
    qat = root / "qat-q3_k"
    run(QAT_KD, "--model", ptq, "--teacher", model, "--out", qat, "--data", root / "task" / "train.jsonl",
        "--chat", "--prompt-field", "problem", "--response-field", "solution", "--max-length", "64", "--steps", "6",
        "--batch-size", "4", "--lr", "2e-3", "--log-every", "100", "--export", "gguf", "--gguf-embedding-type",
        "f32", "--device", "cpu")
    return ptq, qat


def test_gptq_on_a_grid_exports_exactly(trained):
    ptq, _ = trained
    assert_exact(ptq / "model-q3_k.gguf", ptq, "q3_k")


def test_qat_on_a_grid_trains_codes_that_export_exactly(work, trained):
    root, _ = work
    ptq, qat = trained
    file = root / "qat-q3_k.gguf"
    result = run(RQAT_BIN, "convert", "--model", qat, "--to", "gguf", "--gguf-type", "q3_k", "--out", file)
    assert "14 matrices written from their codes on the gguf-q3_k grid" in result.stdout, result.stdout
    assert_exact(file, qat, "q3_k")
    assert_exact(qat / "model-q3_k.gguf", qat, "q3_k")  # qat-kd --export gguf: the same layers ...
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(qat / "model-q3_k.gguf")).tensors}
    assert types["token_embd.weight"] == "F32"  # ... and the embeddings as --gguf-embedding-type asked
    before, after = st.load_file(ptq / "model.safetensors"), st.load_file(qat / "model.safetensors")
    moved = sum(int((before[n] != after[n]).sum()) for n in before if ".layers." in n and n.endswith("proj.weight"))
    assert moved > 0, "training changed no code"
    # Another type requantizes (and says so): the grid's exactness belongs to its own type.
    other = run(RQAT_BIN, "convert", "--model", qat, "--to", "gguf", "--gguf-type", "q4_k", "--out",
                root / "qat-q4_k.gguf")
    assert "made on the gguf-q3_k grid" in other.stdout and "written from their codes" not in other.stdout


def block_scales(gguf_file, gguf_type):
    """{tensor name: the fp16 scale d of every block} of the decoder layers (the first two bytes of a q4_0/q4_1
    block, of a q4_k/q5_k super-block)."""
    block_bytes = {"q4_0": 18, "q4_1": 20, "q4_k": 144, "q5_k": 176}[gguf_type]
    return {t.name: np.frombuffer(bytes(t.data), dtype=np.uint8).reshape(-1, block_bytes)[:, :2].copy().view(
        np.float16).ravel() for t in gguf.GGUFReader(str(gguf_file)).tensors
        if t.name.startswith("blk.") and t.tensor_type.name.lower() == gguf_type}


@pytest.mark.parametrize("gguf_type", ["q4_k", "q4_1"])
def test_lsq_on_a_grid_learns_the_blocks_scales_and_exports_exactly(work, gguf_type):
    """qat-kd --scale-mode lsq on a grid trains what the block format stores as fp16 (q4_k: the super-block scales;
    q4_1: each block's scale and min): the exported file's scales moved from llama.cpp's, and the file is still the
    trained artifact exactly."""
    root, model = work
    ptq = root / f"lsq-rtn-{gguf_type}"
    run(PTQ, "--model", model, "--out", ptq, "--method", "rtn", "--grid", f"gguf-{gguf_type}", "--export", "gguf",
        "--device", "cpu")
    qat = root / f"lsq-qat-{gguf_type}"
    run(QAT_KD, "--model", ptq, "--teacher", model, "--out", qat, "--data", root / "task" / "train.jsonl",
        "--chat", "--prompt-field", "problem", "--response-field", "solution", "--max-length", "64", "--steps", "6",
        "--batch-size", "4", "--lr", "2e-3", "--log-every", "100", "--scale-mode", "lsq", "--export", "gguf",
        "--device", "cpu")
    file = qat / f"model-{gguf_type}.gguf"
    assert_exact(file, qat, gguf_type)
    before, after = block_scales(ptq / f"model-{gguf_type}.gguf", gguf_type), block_scales(file, gguf_type)
    moved = sum(int((before[n] != after[n]).sum()) for n in before)
    total = sum(v.size for v in before.values())
    assert moved > total // 2, f"{moved} of {total} block scales moved"


@needs_llama_cpp
def test_llama_cpp_runs_the_trained_grid_model_as_rqat_does(work, trained):
    """With the embeddings (tied output layer) kept in f32, the GGUF file is the trained artifact exactly: llama.cpp's
    logits equal rqat's forward of the artifact itself within llama.cpp's own rounding."""
    root, _ = work
    _, qat = trained
    file = qat / "model-q3_k.gguf"  # qat-kd --export gguf --gguf-embedding-type f32
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(file)).tensors}
    assert types["token_embd.weight"] == "F32" and types["blk.0.ffn_up.weight"] == "Q3_K"
    theirs = llama_cpp_logits(file, PROMPT)
    mine = rqat_logits(qat, PROMPT, root)
    error = np.abs(theirs - mine).max() / np.abs(mine).max()
    print(f"q3_k-trained: max |llama.cpp - rqat| = {error:.2e} of the largest logit")
    assert error < 8e-2  # llama.cpp's 8-bit activations, as test_gguf_export.py's block types


def test_grids_refuse_what_they_cannot_hold_before_work(work, tmp_path):
    root, model = work
    result = run(QAT_KD, "--model", model, "--teacher", model, "--out", tmp_path / "qat", "--data",
                 root / "task" / "train.jsonl", "--steps", "1", "--gguf-embedding-type", "f32", "--device", "cpu",
                 expect=1)
    assert "--gguf-embedding-type goes with --export gguf" in result.stderr, result.stderr
    out = tmp_path / "teacher-q4_k"
    result = run(PTQ, "--model", TEACHER, "--out", out, "--method", "rtn", "--grid", "gguf-q4_k", "--device", "cpu",
                 expect=1)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--grid gguf-q4_k" in lines[0] and "256-value blocks" in lines[0], result.stderr
    assert not (out / "model.safetensors").exists()
    result = run(PTQ, "--model", model, "--out", tmp_path / "awq", "--method", "awq", "--grid", "gguf-q4_0",
                 "--calib", root / "task" / "train.jsonl", "--calib-field", "problem", "--device", "cpu", expect=1)
    assert "--method awq does not choose codes on a GGUF grid" in result.stderr, result.stderr
    result = run(PTQ, "--model", model, "--out", tmp_path / "g", "--method", "rtn", "--grid", "gguf-q7_k",
                 "--device", "cpu", expect=1)
    assert "--grid = 'gguf-q7_k'" in result.stderr, result.stderr
    result = run(PTQ, "--model", model, "--out", tmp_path / "x", "--method", "rtn", "--grid", "gguf-q4_k",
                 "--export", "gptq", "--device", "cpu", expect=1)
    assert "no GPTQ layout" in result.stderr, result.stderr
