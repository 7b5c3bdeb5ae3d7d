"""ptq end to end through its command line on real trained weights (llama2.c stories260K, converted by
`rqat convert --llama2c`): GPTQ W4 g32 with act-order, calibrated on the TinyStories sample, exported as a packed
GPTQ checkpoint. Checks with independent readers:
- quant_state.safetensors dequantized here with numpy equals the weights in model.safetensors, bit for bit;
- layers outside the spec are untouched; manifest.json and metrics.h5 (h5py) describe the run;
- `rqat nll` gives the same held-out NLL for the fake-quantized directory and the packed export.
Needs RQAT_BIN (ptq is next to it) and ../shared/data/tinyllama; skips otherwise.
"""

import json
import os
import pathlib
import subprocess

import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
PTQ = str(pathlib.Path(RQAT_BIN).with_name("ptq"))
ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("RQAT_SHARED_DATA", ROOT.parent / "shared" / "data"))
TINY = SHARED / "tinyllama"
if not (TINY / "stories260K.bin").exists():
    pytest.skip("../shared/data/tinyllama is absent", allow_module_level=True)

import h5py  # noqa: E402
import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402


def run(*args):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def held_out_nll(tmp_path, directories):
    """`rqat nll` of each model directory on the TinyStories sample."""
    reports = []
    for directory in directories:
        report = tmp_path / f"nll_{len(reports)}.json"
        run(RQAT_BIN, "nll", "--model", directory, "--data", TINY / "tinystories_sample.txt", "--seq-len", "256",
            "--json", report, "--device", "cpu")
        reports.append(json.loads(report.read_text()))
    return reports


def test_ptq_gptq_export_and_state(tmp_path):
    model = tmp_path / "stories"
    run(RQAT_BIN, "convert", "--llama2c", TINY / "stories260K.bin", "--tokenizer-bin", TINY / "tok512.bin",
        "--out", model)
    out = tmp_path / "gptq"
    # The MLP (172 wide) cannot be packed at 4 bits with group 32: kept in full precision here.
    console = run(PTQ, "--model", model, "--out", out, "--method", "gptq", "--bits", "4", "--group-size", "32",
                  "--act-order", "--exclude", r".*\.mlp\..*", "--calib", TINY / "tinystories_sample.txt",
                  "--calib-samples", "8", "--calib-seq-len", "64", "--export", "gptq_v2", "--device", "cpu")
    assert "rel. error" in console and "exported 20 packed layers" in console

    weights = load_file(str(out / "model.safetensors"))
    original = load_file(str(model / "model.safetensors"))
    state = load_file(str(out / "quant_state.safetensors"))
    quantized = sorted({k.rsplit(".", 1)[0] for k in state})
    assert len(quantized) == 20 and all(".self_attn." in name for name in quantized)
    for name in quantized:
        codes = state[name + ".codes"].astype(np.float32)
        g_idx = state[name + ".g_idx"].astype(np.int64)
        scales, zeros = state[name + ".scales"], state[name + ".zeros"]
        assert np.all(scales == scales.astype(np.float16).astype(np.float32))  # float16 scales
        dequantized = (codes - zeros[:, g_idx]) * scales[:, g_idx]
        assert np.array_equal(dequantized, weights[name + ".weight"]), name
        assert not np.array_equal(dequantized, original[name + ".weight"])
    for name, tensor in original.items():
        if ".mlp." in name or "norm" in name or "embed" in name:
            assert np.array_equal(weights[name], tensor), name

    # progress.json, for `rqat status`: every decoder block done, the mean error, "done" after the outputs.
    progress = json.loads((out / "progress.json").read_text())
    assert (progress["tool"], progress["state"], progress["unit"]) == ("ptq", "done", "blocks")
    assert progress["done"] == progress["total"] == 5  # stories260K's 5 layers
    assert 0 < progress["metrics"]["mean_relative_error"] < 1

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tool"] == "ptq" and manifest["config"]["method"] == "gptq"
    assert manifest["config"]["quant"]["bits"] == 4 and manifest["config"]["quant"]["group_size"] == 32
    assert manifest["config"]["gptq"]["act_order"] is True
    assert len(manifest["config"]["calibration"]["samples"]) == 8
    with h5py.File(out / "metrics.h5", "r") as f:
        names = [n.decode() for n in f["layers/name"][:]]
        errors = f["layers/relative_error"][:]
    assert names == [n for n in names if ".self_attn." in n] and len(names) == 20
    assert np.all(np.isfinite(errors)) and np.all(errors > 0) and np.all(errors < 1)

    nll = held_out_nll(tmp_path, (out, out / "gptq"))
    assert nll[0]["tokens"] == nll[1]["tokens"]
    assert abs(nll[0]["mean_nll"] - nll[1]["mean_nll"]) < 1e-5
    config = json.loads((out / "gptq" / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "gptq"


def test_ptq_v1_export_keeps_zero_points_storable(tmp_path):
    """W2 g32 asymmetric (where zero points of 0 are common) exported as v1: ptq decides before quantizing
    that zero points stay >= 1, so the export succeeds and reads back as the same model. Also the
    reference's lazy group parameters (--group-params lazy) in the manifest."""
    model = tmp_path / "stories"
    run(RQAT_BIN, "convert", "--llama2c", TINY / "stories260K.bin", "--tokenizer-bin", TINY / "tok512.bin",
        "--out", model)
    plain, v1 = tmp_path / "plain", tmp_path / "v1"
    common = ["--method", "gptq", "--bits", "2", "--group-size", "32", "--exclude", r".*\.mlp\..*",
              "--calib", TINY / "tinystories_sample.txt", "--calib-samples", "8", "--calib-seq-len", "64",
              "--group-params", "lazy", "--device", "cpu"]
    run(PTQ, "--model", model, "--out", plain, *common)
    console = run(PTQ, "--model", model, "--out", v1, *common, "--export", "gptq")
    assert "zero points kept >= 1" in console
    zero_at_zero = 0
    for directory, expect_v1 in ((plain, False), (v1, True)):
        state = load_file(str(directory / "quant_state.safetensors"))
        zeros = np.concatenate([v.ravel() for k, v in state.items() if k.endswith(".zeros")])
        if expect_v1:
            assert zeros.min() >= 1
        else:
            zero_at_zero = int((zeros == 0).sum())
        manifest = json.loads((directory / "manifest.json").read_text())
        assert manifest["config"]["quant"].get("v1_zeros", False) is expect_v1
        assert manifest["config"]["gptq"]["group_params"] == "lazy"
    assert zero_at_zero > 0  # without the rule, v1 could not have stored this model
    nll = held_out_nll(tmp_path, (v1, v1 / "gptq"))
    assert abs(nll[0]["mean_nll"] - nll[1]["mean_nll"]) < 1e-5


def test_ptq_refuses_before_work(tmp_path):
    model = tmp_path / "stories"
    run(RQAT_BIN, "convert", "--llama2c", TINY / "stories260K.bin", "--tokenizer-bin", TINY / "tok512.bin",
        "--out", model)
    (tmp_path / "bad.jsonl").write_text('{"text": "Once upon a time"}\n{"text": \n')
    cases = [
        (["--method", "gptq", "--calib", tmp_path / "bad.jsonl"], "bad.jsonl:2"),
        (["--method", "rtn", "--bits", "6"], "--bits"),
        (["--method", "rtn", "--group-size", "0"], "--group-size"),
        (["--method", "rtn", "--group-size", "32", "--export", "gptq"], "mlp"),
        (["--method", "rtn", "--bits", "8", "--per-tensor"], "--per-tensor"),
        (["--method", "gptq", "--group-params", "fast"], "--group-params"),
    ]
    for extra, needle in cases:
        out = tmp_path / "out"
        result = subprocess.run([PTQ, "--model", str(model), "--out", str(out), *map(str, extra)],
                                capture_output=True, text=True)
        assert result.returncode != 0, extra
        assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not out.exists(), extra
