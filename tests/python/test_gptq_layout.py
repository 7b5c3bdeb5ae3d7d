"""The GPTQ checkpoints rqat exports, read back with an independent numpy implementation of the documented
layout (AutoGPTQ/GPTQModel/vLLM): int32 qweight packed along the input dimension, int32 qzeros packed along the
output dimension (stored minus one in checkpoint_format "gptq", as is in "gptq_v2"), float16 scales, int32 g_idx.
The dequantized weights must equal, bit for bit, the weights rqat computes when it loads the export, and the
plain dequantization of the quantized state the export was made from.

The exports come from the hidden Catch2 test "[gptq_export_fixture]" of test_gptq_packing, found as
$RQAT_GPTQ_TEST_BIN, else next to $RQAT_BIN (<build>/apps/rqat -> <build>/tests/test_gptq_packing), else
$RQAT_BUILD_DIR/tests/test_gptq_packing (default build/).
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v tests/python/test_gptq_layout.py
"""

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def find_test_binary():
    explicit = os.environ.get("RQAT_GPTQ_TEST_BIN")
    if explicit:
        return Path(explicit)
    rqat_bin = os.environ.get("RQAT_BIN")
    if rqat_bin:
        return Path(rqat_bin).resolve().parent.parent / "tests" / "test_gptq_packing"
    build = Path(os.environ.get("RQAT_BUILD_DIR", "build"))
    if not build.is_absolute():
        build = REPO / build
    return build / "tests" / "test_gptq_packing"


TEST_BIN = find_test_binary()
if not (TEST_BIN.is_file() and os.access(TEST_BIN, os.X_OK)):
    pytest.skip(f"test_gptq_packing binary not found at {TEST_BIN}", allow_module_level=True)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("gptq_exports")
    env = dict(os.environ, RQAT_GPTQ_EXPORT_DIR=str(root), OMP_NUM_THREADS="1")
    result = subprocess.run([str(TEST_BIN), "[gptq_export_fixture]"], env=env, capture_output=True, text=True,
                            timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    cases = sorted(p for p in root.iterdir() if (p / "case.json").is_file())
    assert len(cases) >= 5, f"expected the fixture's export cases in {root}: {result.stdout}"
    return cases


# --- The layout, written from its description (not from rqat's code).

def unpack_rows(packed, bits):
    """int32 (words, m) -> int64 (words * 32 / bits, m): values packed along dim 0."""
    words = packed.astype(np.uint32).astype(np.int64)  # reinterpret the bits, then widen
    mask = (1 << bits) - 1
    if bits in (2, 4, 8):
        per_word = 32 // bits
        shifts = np.arange(per_word, dtype=np.int64) * bits  # value k of a word at bits k*bits
        values = (words[:, None, :] >> shifts[None, :, None]) & mask
        return values.reshape(words.shape[0] * per_word, words.shape[1])
    assert bits == 3 and words.shape[0] % 3 == 0
    # Blocks of 3 words hold 32 values: 0-9 in word 0, 10 across words 0/1, 11-20 in word 1, 21 across
    # words 1/2, 22-31 in word 2.
    w0, w1, w2 = words[0::3], words[1::3], words[2::3]
    parts = [(w0 >> (3 * j)) & 7 for j in range(10)]
    parts.append(((w0 >> 30) & 0x3) | ((w1 & 0x1) << 2))
    parts += [(w1 >> (3 * j + 1)) & 7 for j in range(10)]
    parts.append(((w1 >> 31) & 0x1) | ((w2 & 0x3) << 1))
    parts += [(w2 >> (3 * j + 2)) & 7 for j in range(10)]
    values = np.stack(parts, axis=1)  # (blocks, 32, m)
    return values.reshape(-1, words.shape[1])


def unpack_columns(packed, bits):
    return unpack_rows(packed.T, bits).T


def dequantize(tensors, name, bits, checkpoint_format):
    qweight, qzeros = tensors[name + ".qweight"], tensors[name + ".qzeros"]
    scales, g_idx = tensors[name + ".scales"], tensors[name + ".g_idx"]
    assert qweight.dtype == np.int32 and qzeros.dtype == np.int32
    assert scales.dtype == np.float16 and g_idx.dtype == np.int32
    codes = unpack_rows(qweight, bits)  # (in, out)
    zeros = unpack_columns(qzeros, bits)  # (groups, out)
    if checkpoint_format == "gptq":
        zeros = zeros + 1  # v1 stores zero - 1
    g = g_idx.astype(np.int64)
    scale = scales.astype(np.float32)[g]  # (in, out)
    weight = (codes.astype(np.float32) - zeros.astype(np.float32)[g]) * scale
    return weight.T  # (out, in) like a dense nn.Linear weight


def read_case(case_dir):
    case = json.loads((case_dir / "case.json").read_text())
    config = json.loads((case_dir / "config.json").read_text())
    tensors = load_file(str(case_dir / "model.safetensors"))
    return case, config, tensors


def test_exported_tensors_dequantize_to_the_weights_rqat_uses(exports):
    for case_dir in exports:
        case, config, tensors = read_case(case_dir)
        bits, fmt = case["bits"], case["checkpoint_format"]
        rqat = load_file(str(case_dir / "rqat_dequantized.safetensors"))
        reference = load_file(str(case_dir / "reference_dequantized.safetensors"))
        assert sorted(rqat) == sorted(case["quantized"]) and len(rqat) > 0
        for name in case["quantized"]:
            ours = dequantize(tensors, name, bits, fmt)
            assert ours.shape == rqat[name].shape, (case_dir.name, name)
            # Same float32 operations on the same values: equal bit for bit.
            np.testing.assert_array_equal(ours, rqat[name], err_msg=f"{case_dir.name} {name}")
            np.testing.assert_array_equal(ours, reference[name], err_msg=f"{case_dir.name} {name}")
            assert (name + ".weight") not in tensors


def test_packed_shapes_and_group_index(exports):
    for case_dir in exports:
        case, _, tensors = read_case(case_dir)
        bits, group_size = case["bits"], case["group_size"]
        for name in case["quantized"]:
            qweight, scales, g_idx = tensors[name + ".qweight"], tensors[name + ".scales"], tensors[name + ".g_idx"]
            in_features, out_features = qweight.shape[0] * 32 // bits, qweight.shape[1]
            groups = 1 if group_size == -1 else in_features // group_size
            assert scales.shape == (groups, out_features)
            assert tensors[name + ".qzeros"].shape == (groups, out_features * bits // 32)
            assert g_idx.shape == (in_features,)
            sequential = np.arange(in_features) // (in_features if group_size == -1 else group_size)
            if groups > 1:  # with one group act-order leaves nothing to permute
                assert np.array_equal(g_idx, sequential) != case["act_order"], (case_dir.name, name)
            # Every group holds group_size columns, act-order or not.
            assert np.all(np.bincount(g_idx, minlength=groups) == in_features // groups)
            if case["sym"]:
                zeros = unpack_columns(tensors[name + ".qzeros"], bits) + (1 if case["checkpoint_format"] == "gptq" else 0)
                assert np.all(zeros == 2 ** (bits - 1))
        for name in case["left_dense"]:
            assert tensors[name + ".weight"].dtype == np.float32
            assert (name + ".qweight") not in tensors


def test_quantization_config_is_what_the_loaders_read(exports):
    for case_dir in exports:
        case, config, _ = read_case(case_dir)
        qc = config["quantization_config"]
        assert qc["quant_method"] == "gptq"
        assert qc["bits"] == case["bits"] and qc["group_size"] == case["group_size"]
        assert qc["sym"] == case["sym"] and qc["desc_act"] == case["act_order"]
        assert qc["checkpoint_format"] == case["checkpoint_format"] == qc["format"]
        assert qc["lm_head"] is False and qc["pack_dtype"] == "int32"
        if case["left_dense"]:
            assert all(any(re.match(p[2:], n) for p in qc["dynamic"]) for n in case["left_dense"])


def test_transformers_gptq_config_accepts_the_quantization_config(exports):
    pytest.importorskip("transformers")
    from transformers import GPTQConfig

    for case_dir in exports:
        case, config, _ = read_case(case_dir)
        qc = dict(config["quantization_config"])
        if "modules_in_block_to_quantize" in qc:
            continue  # GPTQConfig checks optimum's version for this key
        parsed = GPTQConfig.from_dict(qc)
        assert parsed.bits == case["bits"] and parsed.group_size == case["group_size"]
        assert parsed.desc_act == case["act_order"] and parsed.sym == case["sym"]
        assert parsed.format == case["checkpoint_format"]


def test_transformers_loads_the_export_when_gptqmodel_is_installed(exports):
    """transformers loads GPTQ checkpoints only through optimum + gptqmodel (not installed in rqat's .venv)."""
    pytest.importorskip("optimum")
    pytest.importorskip("gptqmodel")
    import torch
    from transformers import AutoModelForCausalLM

    for case_dir in exports:
        expected = load_file(str(case_dir / "rqat_logits.safetensors"))
        model = AutoModelForCausalLM.from_pretrained(str(case_dir), device_map="cpu", dtype=torch.float16)
        with torch.no_grad():
            logits = model(torch.from_numpy(expected["input_ids"])).logits.float().numpy()
        # float16 activations in the GPTQ kernels: compare loosely.
        np.testing.assert_allclose(logits, expected["logits"], atol=5e-2, rtol=5e-2, err_msg=case_dir.name)
