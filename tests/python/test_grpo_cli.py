"""grpo through the command line on a toy task (a + b for a, b in 0..2, one answer token from a 14-token
vocabulary; a tiny random Llama written by transformers):
  - two processes (torchrun-style variables, Gloo), each with half of the prompts of every step, reproduce
    the single-process run: identical rollouts and rewards, losses within 1e-5;
  - the qlora artifact is a plain merged model that transformers loads, with the PEFT adapter beside it;
  - bad flags are one-line errors.
Needs RQAT_BIN=<path to rqat> (grpo beside it).
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v -s tests/python/test_grpo_cli.py
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import ranks

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not (os.path.isfile(RQAT_BIN) and os.access(RQAT_BIN, os.X_OK)):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
GRPO = Path(RQAT_BIN).parent / "grpo"

from grpo_toy import write_grpo_toy  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

TIMEOUT_S = 300
ENV = ranks.SINGLE_ENV


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_grpo_toy(tmp_path_factory.mktemp("grpo"))


def args(toy, out, *extra, steps=6):
    return [GRPO, "--model", toy / "toy", "--out", out, "--data", toy / "sums.jsonl", "--no-chat-template",
            "--instruction", "", "--prompts-per-step", "8", "--num-generations", "8", "--max-new-tokens", "1",
            "--steps", str(steps), "--lr", "1e-2", "--schedule", "constant", "--seed", "3", "--threads", "1", "--device", "cpu",
            *extra]


def run(cmd, env=None, check=True):
    cmd = [str(c) for c in cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env or ENV)
    if check and r.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {r.returncode}\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}")
    return r


def train_rows(out):
    rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["series"] == "train"]


def test_two_gloo_processes_reproduce_one(toy, tmp_path):
    # One step from identical weights, so identical rollouts; after it the weights may differ in
    # the last bits (float summation order), which can flip a later sampled token, so the
    # comparison stops at the weights after the first update.
    run(args(toy, tmp_path / "single", steps=1))
    want = train_rows(tmp_path / "single")
    ranks.launch(args(toy, tmp_path / "pair", steps=1), world=2, timeout_s=TIMEOUT_S)
    got = train_rows(tmp_path / "pair")
    assert len(got) == len(want) == 1
    assert got[0]["reward"] == want[0]["reward"]  # the same rollouts from the same weights
    assert got[0]["entropy"] == pytest.approx(want[0]["entropy"], rel=1e-6)
    assert got[0]["grad_norm"] == pytest.approx(want[0]["grad_norm"], rel=1e-5)  # the all-reduced gradient
    a, b = load_file(str(tmp_path / "single" / "model.safetensors")), load_file(str(tmp_path / "pair" / "model.safetensors"))
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    print(f"\ngrpo, 2 Gloo processes x 4 prompts vs 1 x 8: gradient norm {got[0]['grad_norm']:.9e} vs "
          f"{want[0]['grad_norm']:.9e}, max |weight difference| after the update {worst:.2e} (lr 1e-2)")
    # Group-relative advantages sum to zero, so many gradient entries are tiny sums of cancelling
    # terms whose last bits depend on summation order; Adam's first step divides each entry by its
    # own magnitude, which turns those bits into visible (but lr-bounded) weight differences.
    assert worst < 0.1 * 1e-2


def test_qlora_artifact_is_a_merged_model(toy, tmp_path):
    out = tmp_path / "qlora"
    run(args(toy, out, "--mode", "qlora", "--bits", "4", "--group-size", "-1", "--lora-rank", "4"))
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "LORA" and adapter["r"] == 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tool"] == "grpo" and manifest["config"]["mode"] == "qlora"
    hf = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([[1, 10, 2, 11]])).logits
    assert torch.isfinite(logits).all() and logits.shape == (1, 4, 16)


def test_qlora_over_a_gptq_checkpoint_rolls_out_from_packed_codes(toy, tmp_path):
    # A GPTQ export of the toy model as the QLoRA base: its packed layers stay packed (rollouts decode from the
    # 4-bit codes; the training forward dequantizes for the backward), and the run reproduces the same run
    # with --dequantize (the base dequantized at load): the same rollouts, the same objective.
    ptq_out = tmp_path / "ptq"
    run([Path(RQAT_BIN).parent / "ptq", "--model", toy / "toy", "--out", ptq_out, "--method", "rtn", "--bits", "4",
         "--group-size", "32", "--export", "gptq"])
    gptq = ptq_out / "gptq"
    assert json.loads((gptq / "config.json").read_text())["quantization_config"]["quant_method"] == "gptq"
    (gptq / "tokenizer.json").write_text((toy / "toy" / "tokenizer.json").read_text())
    (gptq / "tokenizer_config.json").write_text((toy / "toy" / "tokenizer_config.json").read_text())
    model_toy = tmp_path / "m"
    model_toy.mkdir()
    (model_toy / "sums.jsonl").write_text((toy / "sums.jsonl").read_text())
    (model_toy / "toy").symlink_to(gptq)
    rows = {}
    # --dequantize: the dense base is quantized again by rqat's plan (RTN of the dequantized weights gives
    # back the checkpoint's codes), as a full-precision model would be.
    for flag in ([], ["--dequantize", "--bits", "4", "--group-size", "32"]):
        out = tmp_path / ("dequantized" if flag else "packed")
        run(args(model_toy, out, "--mode", "qlora", "--lora-rank", "4", *flag, steps=2))
        rows[bool(flag)] = train_rows(out)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["config"]["mode"] == "qlora"
        # Packed, the base is the checkpoint's own quantization (its quantization_config); dequantized,
        # it is re-quantized to the same codes through rqat's own plan.
        assert (manifest["config"]["quant"].get("quant_method") == "gptq") == (not flag)
    packed, dequantized = rows[False], rows[True]
    assert [r["reward"] for r in packed] == [r["reward"] for r in dequantized]
    for a, b in zip(packed, dequantized):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)


def test_bad_flags_are_one_line_errors(toy, tmp_path):
    for extra, needle in [(["--mode", "lora"], "--mode"), (["--loss-aggregation", "sum"], "--loss-aggregation"),
                          (["--reward", "math+nope"], "--reward"), (["--mode", "qat"], "--bits is required")]:
        r = run(args(toy, tmp_path / "bad", *extra), check=False)
        assert r.returncode != 0
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not (tmp_path / "bad" / "model.safetensors").exists()
