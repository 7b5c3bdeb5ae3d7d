"""The tiny reproduction (experiments/tiny/reasoning_qat.yaml) end to end through `rqat run`, shrunk with
--set to a few optimizer steps so it runs in about two minutes:
  - the shipped teacher (experiments/tiny/teacher/) still solves the held-out split (>= 85% greedy);
  - every stage of the 2 x 2 x 2 sweep runs, identical stages are shared (4 ptq stages for 8 QAT runs),
    SFT on the correct traces runs once per PTQ model, GRPO runs only after KD, and `rqat report` prints a results row for every evaluated model;
  - SIGTERM to the runner during a QAT stage is forwarded: the stage checkpoints, the runner exits 143,
    and the rerun restarts that stage with --resume and finishes the rest; a third run skips everything;
  - the final artifacts load in transformers (model and tokenizer) and generate the teacher's format.
Needs RQAT_BIN=<path to rqat> with the other tools beside it.
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v -s tests/python/test_tiny_experiment.py
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not (os.path.isfile(RQAT_BIN) and os.access(RQAT_BIN, os.X_OK)):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "experiments" / "tiny" / "reasoning_qat.yaml"
# A few steps each: this checks the plumbing, not the findings (scripts/demo runs the real thing).
# One training seed (the file runs 3): the seeds' sweep itself is checked in the dry run below.
# 1,500 traces cover the 40 x 32 QAT samples (the file's 8,000 cost the teacher a minute of decoding).
SHRINK = ["--set", "seeds=1", "--set", "trace_problems=1500", "--set", "qat_steps=40", "--set", "rl_steps=2", "--set", "threads=1",
          "--set", "stages.qat.args.log-every=2", "--set", "stages.qat.args.eval-every=0",
          "--set", "stages.qat.args.eval-benchmark-limit=8",
          "--set", "stages.sft_correct.args.log-every=2", "--set", "stages.sft_correct.args.eval-every=0",
          "--set", "stages.grpo.args.eval-benchmark-limit=8",
          "--set", "stages.grpo.args.prompts-per-step=4", "--set", "stages.grpo.args.num-generations=4",
          "--set", "stages.grpo_no_kd.args.eval-benchmark-limit=8",
          "--set", "stages.grpo_no_kd.args.prompts-per-step=4",
          "--set", "stages.grpo_no_kd.args.num-generations=4",
          "--set", "stages.ptq.args.calib-samples=32"]


def rqat_run(run_dir, *extra, **kwargs):
    return subprocess.run([RQAT_BIN, "run", str(EXPERIMENT), "--run-dir", str(run_dir), *SHRINK, *extra],
                          capture_output=True, text=True, timeout=900, **kwargs)


def test_tiny_reproduction_runs_resumes_and_reports(tmp_path):
    run_dir = tmp_path / "tiny"
    plan = subprocess.run([RQAT_BIN, "run", str(EXPERIMENT), "--run-dir", str(run_dir), *SHRINK, "--dry-run"],
                          capture_output=True, text=True, check=True).stdout
    ids = [m.group(1) for m in re.finditer(r"^\[\s*\d+/\d+\] (\S+)", plan, re.MULTILINE)]
    assert len([i for i in ids if i.startswith("ptq.")]) == 4  # shared by sft and kd
    assert len([i for i in ids if i.startswith("qat.")]) == 8
    # Both objectives train on all the teacher's traces; SFT on the correct ones only is an extra row.
    assert len([i for i in ids if i.startswith("sft_correct.")]) == 4
    assert "traces_correct" in ids
    assert sorted(i for i in ids if i.startswith("grpo.")) == sorted(
        f"grpo.bits-{b}.init-{m}.objective-kd.seed-0" for b in (2, 3) for m in ("rtn", "gptq"))
    # The control arm (no KD) runs once per PTQ model, shared by both objectives like ptq.
    assert len([i for i in ids if i.startswith("grpo_no_kd.")]) == 4

    # The file's 3 training seeds: every training stage and its evaluation 3 times, the data, the
    # teacher's traces, PTQ and its evaluations once.
    seeded = subprocess.run([RQAT_BIN, "run", str(EXPERIMENT), "--run-dir", str(run_dir), "--dry-run"],
                            capture_output=True, text=True, check=True).stdout
    seeded_ids = [m.group(1) for m in re.finditer(r"^\[\s*\d+/\d+\] (\S+)", seeded, re.MULTILINE)]
    for stage, count in [("ptq.", 4), ("eval_ptq.", 4), ("qat.", 24), ("eval_qat.", 24), ("grpo.", 12),
                         ("grpo_no_kd.", 12), ("sft_correct.", 12), ("task", 1), ("traces", 1)]:
        assert len([i for i in seeded_ids if i.startswith(stage) and i.split(".")[0] == stage.rstrip(".")]) \
            == count, (stage, seeded_ids)

    # Interrupt the runner while the first QAT stage trains.
    proc = subprocess.Popen([RQAT_BIN, "run", str(EXPERIMENT), "--run-dir", str(run_dir), *SHRINK],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first_qat = run_dir / "qat.bits-2.init-rtn.objective-sft.seed-0"
    log = run_dir / "logs" / f"{first_qat.name}.log"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and "step 4/" in log.read_text(errors="replace"):
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0]
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "rerun the same command to continue" in out
    assert (first_qat / "checkpoints" / "latest").exists(), out
    assert not (first_qat / "manifest.json").exists()

    r = rqat_run(run_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{first_qat.name}: running qat-sft --resume" in r.stdout
    assert "0 failed, 0 not run" in r.stdout
    assert json.loads((first_qat / "manifest.json").read_text())["args"][-1] == "--resume"

    again = rqat_run(run_dir)
    assert again.returncode == 0 and f"0 ran, {len(ids)} skipped" in again.stdout, again.stdout

    # The shipped teacher's accuracy on the held-out split: the premise of the whole table.
    summary = json.loads((run_dir / "eval_teacher" / "summary.json").read_text())
    assert summary["metrics"]["pass@1"] >= 0.85, summary["metrics"]

    report = subprocess.run([RQAT_BIN, "report", str(run_dir)], capture_output=True, text=True, check=True).stdout
    for label in ["teacher (full precision)", "rtn W2G32", "gptq W3G32 + kd", "rtn W2G32 + sft",
                  "gptq W2G32 + kd + GRPO", "gptq W2G32 + GRPO (no KD)"]:
        assert f"| {label} |" in report, report
    assert (run_dir / "report.csv").exists() and (run_dir / "stages.csv").exists()


def test_tiny_artifacts_load_in_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    run_dir = tmp_path / "tiny"
    r = rqat_run(run_dir, "--only", "qat", "--set", "sweep.grid.bits=[2]", "--set", "sweep.grid.init=[gptq]",
                 "--set", "sweep.grid.objective=[kd]")
    assert r.returncode == 0, r.stdout + r.stderr
    model_dir = run_dir / "qat.bits-2.init-gptq.objective-kd.seed-0"
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    problem = json.loads((run_dir / "task" / "test.jsonl").read_text().splitlines()[0])["problem"]
    prompt = tok.apply_chat_template([{"role": "user", "content": problem}], tokenize=False,
                                     add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=64, do_sample=False, eos_token_id=tok.eos_token_id)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    # 40 steps from a 2-bit GPTQ start: the answer may be wrong, the teacher's format is not.
    assert "=" in text and "\\boxed{" in text, text
