"""`rqat status RUN_DIR` (experiment/run_status.h) on a small experiment while `rqat run` executes it in the
background: polled until the QAT stage shows "running" with a step count, an ETA and its loss, then again until
everything is settled: the trained and evaluated stages "finished" with their numbers, a stage that fails at
run time "failed" with its error line and log, and the stage that needed it "blocked". --watch redraws until
the run settles. Also the one-line error for a directory without plan.json.
Needs RQAT_BIN (the tools beside it).
"""

import os
import pathlib
import re
import subprocess
import time

import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)

from gguf_models import TEACHER  # noqa: E402

EXPERIMENT = f"""
name: status-check
stages:
  task:
    tool: rqat tiny-task
    args: {{seed: 0, train: 64, test: 8, levels: 3}}
  qat:
    tool: qat-kd
    args:
      model: {TEACHER}
      teacher: {TEACHER}
      data: ${{stage:task}}/train.jsonl
      chat: true
      prompt-field: problem
      response-field: solution
      max-length: 64
      bits: 4
      group-size: 32
      steps: 600
      batch-size: 4
      lr: 1e-3
      log-every: 50
      threads: 1
  eval:
    tool: eval-math
    inputs: {{model: qat}}
    args: {{benchmark: tiny, data: "${{stage:task}}/test.jsonl", instruction: "", max-new-tokens: 40, threads: 1}}
  broken:
    tool: eval-math
    args: {{model: {TEACHER}, benchmark: tiny, data: "${{stage:task}}/test.jsonl", instruction: "", k: 4,
           threads: 1}}
  after_broken:
    tool: rqat traces
    args: {{out: "${{run_dir}}/traces.jsonl"}}
    positional: ["${{stage:broken}}/samples.jsonl"]
"""


def status(run_dir, *extra):
    result = subprocess.run([RQAT_BIN, "status", str(run_dir), *extra], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def rows(table):
    """stage id -> the rest of its line, split on runs of 2+ spaces."""
    out = {}
    for line in table.splitlines()[2:]:
        cells = re.split(r"\s{2,}", line.strip())
        out[cells[0]] = cells[1:]
    return out


def test_status_follows_a_running_experiment(tmp_path):
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    run_dir = tmp_path / "run"
    runner = subprocess.Popen([RQAT_BIN, "run", str(tmp_path / "exp.yaml"), "--run-dir", str(run_dir)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen_running = None
    deadline = time.time() + 300
    while time.time() < deadline and runner.poll() is None:
        if (run_dir / "plan.json").exists():
            table = status(run_dir)
            qat = rows(table).get("qat", [])
            if len(qat) >= 5 and qat[1] == "running" and re.match(r"step [1-9]\d*/600 ", qat[2]):
                seen_running = table
                break
        time.sleep(0.2)
    assert seen_running, "never saw the QAT stage running with a step count"
    qat = rows(seen_running)["qat"]
    assert qat[0] == "qat-kd"
    assert re.fullmatch(r"\d+(s|m\d\ds)", qat[3]), qat  # the ETA
    assert qat[4].startswith("loss "), qat
    assert rows(seen_running)["eval"][-1] == "on qat"  # waiting on its input
    print("\n" + seen_running)

    watched = subprocess.run([RQAT_BIN, "status", str(run_dir), "--watch", "0.5"], capture_output=True, text=True,
                             timeout=300)
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.count("status-check (") >= 2  # redrawn while it ran
    runner.communicate(timeout=300)
    assert runner.returncode == 1  # one stage failed

    final = status(run_dir)
    print(final)
    table = rows(final)
    assert table["task"][1] == "finished"
    assert table["qat"][1] == "finished" and "eval" not in table["qat"][-1]
    assert table["eval"][1] == "finished" and re.search(r"acc \d+\.\d%", final.split("\neval ")[1].splitlines()[0])
    assert table["broken"][1] == "failed"
    assert "--k 4 must be within 1..--n (1)" in table["broken"][-1]
    assert str(run_dir / "logs" / "broken.log") in table["broken"][-1]
    assert table["after_broken"][1] == "blocked"
    assert final.splitlines()[0].endswith("5 stage instances: 3 finished, 1 failed, 1 blocked")


def test_status_of_a_directory_without_a_plan(tmp_path):
    result = subprocess.run([RQAT_BIN, "status", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip() == f"rqat status: error: {tmp_path / 'plan.json'}: no plan.json (a run directory of " \
                                    "`rqat run` or `rqat sbatch`)"
