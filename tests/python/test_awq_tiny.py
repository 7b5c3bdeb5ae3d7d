"""AWQ against RTN on a trained model: the shipped tiny teacher (experiments/tiny/teacher/), quantized by `ptq`
with RTN and with AWQ (the reference search: duo scaling, attention/MLP output loss, auto_clip) at W4/W3/W2 g32,
calibrated on the task's training solutions. The KL divergence of each quantized model to the teacher is measured
independently with transformers on held-out problems: AWQ must be closer to the teacher than RTN at every width.
Also AWQ's reported per-layer errors are measured in the unscaled layers' output space (v_proj/up_proj carry the
folded 1/s): they stay near RTN's, not 1.3-16x above them.
Needs RQAT_BIN (ptq is next to it) and the .venv's torch/transformers.
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
TEACHER = ROOT / "experiments" / "tiny" / "teacher"

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def run(*args):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def held_out_batch(task_dir, tokenizer, n=64):
    texts = []
    with open(task_dir / "test.jsonl") as f:
        for line in list(f)[:n]:
            p = json.loads(line)
            texts.append(tokenizer.apply_chat_template(
                [{"role": "user", "content": p["problem"]}, {"role": "assistant", "content": p["solution"]}],
                tokenize=False))
    return tokenizer(texts, return_tensors="pt", padding=True)


def mean_kl(teacher_logits, student_logits, mask):
    p = torch.log_softmax(teacher_logits.double(), -1)
    q = torch.log_softmax(student_logits.double(), -1)
    kl = (p.exp() * (p - q)).sum(-1)
    return float((kl * mask).sum() / mask.sum())


def layer_errors(directory):
    with h5py.File(directory / "metrics.h5", "r") as f:
        names = [n.decode() for n in f["layers/name"][:]]
        errors = f["layers/relative_error"][:]
    return dict(zip(names, errors))


def test_awq_beats_rtn_on_the_tiny_teacher(tmp_path):
    task = tmp_path / "task"
    # The teacher's own task (experiments/tiny/teacher.yaml).
    run(RQAT_BIN, "tiny-task", "--out", task, "--train", "2000", "--test", "64", "--levels", "6", "--max-start", "40",
        "--max-change", "19", "--max-value", "99")
    tokenizer = AutoTokenizer.from_pretrained(TEACHER)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = held_out_batch(task, tokenizer)
    with torch.no_grad():
        teacher = AutoModelForCausalLM.from_pretrained(TEACHER, dtype=torch.float32)
        reference = teacher(**batch).logits
    mask = batch["attention_mask"].double()
    # 256 documents of about 75 tokens: 19k calibration tokens (llm-awq's default is 128 x 512 = 65k). With
    # 128 documents AWQ's W3 search overfits this 64-wide teacher (KL 0.168 against RTN's 0.160).
    calib = ["--calib", task / "train.jsonl", "--calib-chat", "--calib-prompt-field", "problem",
             "--calib-response-field", "solution", "--calib-samples", "256", "--calib-seq-len", "128"]
    print()
    for bits in (4, 3, 2):
        kl = {}
        errors = {}
        for method in ("rtn", "awq"):
            out = tmp_path / f"{method}-w{bits}"
            run(PTQ, "--model", TEACHER, "--out", out, "--method", method, "--bits", bits, "--group-size", "32",
                *calib, "--device", "cpu", "--threads", "2")
            with torch.no_grad():
                student = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
                kl[method] = mean_kl(reference, student(**batch).logits, mask)
            errors[method] = layer_errors(out)
        print(f"W{bits}G32: KL to the teacher RTN {kl['rtn']:.4f}, AWQ {kl['awq']:.4f}")
        assert kl["awq"] < kl["rtn"], kl
        # Errors reported in the unscaled output space: the layers whose rows carry AWQ's 1/s (v_proj, up_proj)
        # are not reported far above RTN's error for the same layer.
        for name, err in errors["awq"].items():
            if name.endswith(("v_proj", "up_proj")):
                assert err < 1.5 * errors["rtn"][name], (name, err, errors["rtn"][name])
