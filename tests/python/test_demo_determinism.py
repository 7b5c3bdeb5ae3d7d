"""The same seed gives the same table on the same machine: a small experiment in the shape of the tiny reproduction
(the task, the teacher and an RTN W2 model evaluated with sampling, and a finding) run twice into two run
directories; `rqat report` prints the same results and findings tables, verdict included, and the samples are
byte-identical. Needs RQAT_BIN (the tools beside it).
"""

import os
import re
import subprocess

import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)

from gguf_models import TEACHER  # noqa: E402

EXPERIMENT = f"""
name: determinism
defaults:
  eval-math: {{benchmark: tiny, data: "${{stage:task}}/test.jsonl", instruction: "", max-new-tokens: 72,
              n: 2, temperature: 0.8, seed: 5, threads: 2}}
stages:
  task:
    tool: rqat tiny-task
    args: {{seed: 0, train: 64, test: 120, levels: 6, max-start: 40, max-change: 19, max-value: 99}}
  eval_teacher: {{tool: eval-math, label: teacher, args: {{model: {TEACHER}}}}}
  ptq:
    tool: ptq
    args: {{model: {TEACHER}, method: rtn, bits: 3, group-size: 32}}
  eval_ptq: {{tool: eval-math, inputs: {{model: ptq}}}}
findings:
  ptq_damages:
    claim: PTQ costs accuracy
    higher: {{stage: eval_teacher}}
    lower: {{stage: eval_ptq}}
"""


def section(report, title):
    match = re.search(rf"^## {title}[^\n]*\n(.*?)(?=^## |\Z)", report, re.MULTILINE | re.DOTALL)
    assert match, (title, report)
    return match.group(1)


def test_same_seed_same_tables(tmp_path):
    (tmp_path / "exp.yaml").write_text(EXPERIMENT)
    reports = []
    for name in ("a", "b"):
        run_dir = tmp_path / name
        subprocess.run([RQAT_BIN, "run", str(tmp_path / "exp.yaml"), "--run-dir", str(run_dir)], check=True,
                       capture_output=True, text=True, timeout=600)
        report = subprocess.run([RQAT_BIN, "report", str(run_dir)], check=True, capture_output=True, text=True,
                                timeout=120).stdout
        reports.append(report)
    a, b = reports
    for title in ("Results", "Findings"):
        assert section(a, title) == section(b, title), title
    findings = section(a, "Findings")
    assert re.search(r"\| ptq_damages \| PTQ costs accuracy \| accuracy \| 1 \| 120 \| 1 \| \+\d+\.\d \|", findings), findings
    assert "| shown |" in findings or "| undecided |" in findings
    for stage in ("eval_teacher", "eval_ptq"):
        assert (tmp_path / "a" / stage / "samples.jsonl").read_bytes() == \
            (tmp_path / "b" / stage / "samples.jsonl").read_bytes()
    print("\n" + findings)
