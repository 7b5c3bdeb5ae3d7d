"""eval-math end to end through its command line: a tiny random Qwen2 model with the Qwen2.5 tokenizer on 20
MATH-500 problems. Checks the outputs against each other with independent readers (h5py for results.h5, json
for samples.jsonl/summary.json) and that `eval-math grade` prints the run's pass@1 from the JSONL alone.
Needs RQAT_BIN=<build>/apps/rqat (eval-math is next to it) and ../shared/data; skips otherwise.
"""

import json
import os
import pathlib
import shutil
import subprocess

import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
EVAL_MATH = str(pathlib.Path(RQAT_BIN).with_name("eval-math"))
ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("RQAT_SHARED_DATA", ROOT.parent / "shared" / "data"))
TOKENIZER = SHARED / "tokenizers" / "qwen2.5"
if not (TOKENIZER / "vocab.json").exists() or not (SHARED / "math500" / "test.jsonl").exists():
    pytest.skip("../shared/data (Qwen2.5 tokenizer, MATH-500) is absent", allow_module_level=True)

import h5py  # noqa: E402

CONFIG = {
    "model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 151665, "rope_theta": 1000000.0,
    "tie_word_embeddings": True, "initializer_range": 0.3, "eos_token_id": 151645,
}


def run(*args):
    result = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def test_eval_math_cli(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    model = tmp_path / "model"
    run(RQAT_BIN, "init-model", "--config", str(tmp_path / "config.json"), "--out", str(model), "--seed", "3")
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, model / name)
    out = tmp_path / "eval"
    console = run(EVAL_MATH, "--model", str(model), "--out", str(out), "--benchmark", "math500",
                  "--data-dir", str(SHARED), "--limit", "20", "--protocol", "reasoning", "--n", "2",
                  "--max-new-tokens", "10", "--seed", "1", "--device", "cpu", "--quiet")
    assert "pass@1 (%)" in console and "maj@2" in console

    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(rows) == 40
    assert summary["sampling"] == {"n": 2, "temperature": 0.6, "top_p": 0.95, "top_k": 0, "min_p": 0.0,
                                   "max_new_tokens": 10, "seed": 1}
    assert summary["quant"] is None and summary["model"] == str(model)
    assert summary["prompt"]["instruction"].endswith("within \\boxed{}.")

    with h5py.File(out / "results.h5", "r") as f:
        samples = f["samples"]
        assert f.attrs["benchmark"] == "math500"
        ids = [s.decode() for s in samples["id"][:]]
        correct = samples["correct"][:].tolist()
        tokens = samples["tokens"][:].tolist()
        truncated = samples["truncated"][:].tolist()
    assert ids == [r["id"] for r in rows]
    assert correct == [int(r["correct"]) for r in rows]
    assert tokens == [r["tokens"] for r in rows]
    assert truncated == [int(r["finish_reason"] == "length") for r in rows]

    # pass@1 recomputed here from the JSONL: per-problem mean over samples, then mean over problems.
    by_problem = {}
    for r in rows:
        by_problem.setdefault(r["id"], []).append(r["correct"])
    pass1 = sum(sum(v) / len(v) for v in by_problem.values()) / len(by_problem)
    assert summary["metrics"]["pass@1"] == pytest.approx(pass1, abs=1e-12)
    assert summary["metrics"]["mean_tokens"] == pytest.approx(sum(tokens) / len(tokens), abs=1e-12)

    regraded = run(EVAL_MATH, "grade", str(out / "samples.jsonl"), "--out", str(tmp_path / "regraded.jsonl"))
    expected_row = next(line for line in console.splitlines() if line.startswith("math500 "))
    regraded_row = next(line for line in regraded.splitlines() if line.startswith("regraded "))
    assert expected_row.split()[1:] == regraded_row.split()[1:]
    graded = [json.loads(line) for line in (tmp_path / "regraded.jsonl").read_text().splitlines()]
    assert [g["correct"] for g in graded] == [r["correct"] for r in rows]


def test_eval_math_errors(tmp_path):
    result = subprocess.run([EVAL_MATH, "--model", str(tmp_path), "--out", str(tmp_path / "o"), "--benchmark",
                             "math500", "--data", str(tmp_path / "missing.jsonl")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "missing.jsonl" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = subprocess.run([EVAL_MATH, "--model", str(tmp_path), "--out", str(tmp_path / "o"), "--protocol", "beam",
                             "--data", str(tmp_path / "x.jsonl")], capture_output=True, text=True)
    assert result.returncode != 0 and "--protocol" in result.stderr
