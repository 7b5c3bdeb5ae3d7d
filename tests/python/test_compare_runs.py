"""scripts/compare_runs.py, which tells whether the tiny reproduction on CUDA matches the CPU's
(scripts/gpu-e2e), on run directories written here: the paired standard error against a direct
computation, identical runs agreeing, an untrained stage moved beyond 3 paired SE failing, trained
arms scattered both ways passing while the same arms all shifted one way fail, and bad input.
Run: .venv/bin/python -m pytest -q tests/python/test_compare_runs.py
"""

import json
import math
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_runs.py"
N = 300


def write_run(run, stages):
    """stages: {name: (tool of the evaluated model or None for a model outside the run, [correct])}."""
    run.mkdir(parents=True)
    plan = {"stages": []}
    for name, (tool, correct) in stages.items():
        out = run / name
        out.mkdir()
        model = f"runs/x/model-of-{name}"
        if tool:
            (run / f"model-of-{name}").mkdir()
            (run / f"model-of-{name}" / "manifest.json").write_text(json.dumps({"tool": tool}))
        else:
            model = "experiments/tiny/teacher"
        (out / "summary.json").write_text(json.dumps({"model": model}))
        (out / "samples.jsonl").write_text("".join(
            json.dumps({"id": str(i), "sample": 0, "correct": c}) + "\n" for i, c in enumerate(correct)))
        plan["stages"].append({"id": name, "tool": "eval-math", "out_dir": f"runs/x/{name}"})
    plan["stages"].append({"id": "ptq", "tool": "ptq", "out_dir": "runs/x/ptq"})
    (run / "plan.json").write_text(json.dumps(plan))


def compare(a, b):
    r = subprocess.run([sys.executable, SCRIPT, a, b, "--names", "cpu", "cuda"], capture_output=True, text=True)
    result = dict(kv.split("=") for kv in r.stdout.strip().splitlines()[-1].split()[1:]) if r.returncode == 0 else {}
    return r, result


def flipped(correct, rng, k):
    """correct with k answers flipped at random positions."""
    out = list(correct)
    for i in rng.sample(range(len(out)), k):
        out[i] = not out[i]
    return out


def test_identical_runs_agree_and_the_table_has_every_stage(tmp_path):
    rng = random.Random(1)
    stages = {f"eval_{i}": ("qat-kd" if i % 2 else None, [rng.random() < 0.7 for _ in range(N)]) for i in range(6)}
    write_run(tmp_path / "a", stages)
    write_run(tmp_path / "b", stages)
    r, result = compare(tmp_path / "a", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert result["match"] == "1" and result["stages"] == "6"
    assert result["untrained"] == "3" and result["trained"] == "3"
    for name in stages:
        assert f"| {name} |" in r.stdout


def test_paired_standard_error_is_mcnemars():
    sys.path.insert(0, str(SCRIPT.parent))
    import compare_runs  # noqa: E402
    rng = random.Random(7)
    a = {str(i): rng.random() < 0.6 for i in range(N)}
    b = {k: (not v) if rng.random() < 0.1 else v for k, v in a.items()}
    acc_a, acc_b, diff, se, n = compare_runs.paired(a, b)
    d = [int(b[k]) - int(a[k]) for k in a]  # per-problem differences: their mean's SE, directly
    mean = sum(d) / N
    direct = math.sqrt(sum((x - mean) ** 2 for x in d) / N) / math.sqrt(N)
    assert n == N and abs(diff - mean) < 1e-12
    assert abs(se - direct) < 1e-12


def test_an_untrained_stage_moved_beyond_three_paired_se_differs(tmp_path):
    rng = random.Random(2)
    base = [rng.random() < 0.5 for _ in range(N)]
    # 40 problems lost and none gained: z = -40 / sqrt(40 - 40^2 / 300) = -6.79.
    worse = list(base)
    lost = [i for i, c in enumerate(base) if c][:40]
    for i in lost:
        worse[i] = False
    write_run(tmp_path / "a", {"eval_ptq": (None, base)})
    write_run(tmp_path / "b", {"eval_ptq": (None, worse)})
    r, result = compare(tmp_path / "a", tmp_path / "b")
    assert result["match"] == "0"
    assert "DIFFERENT" in r.stdout and "-6.79" in r.stdout
    # A few answers flipped both ways is float-rounding noise: it agrees.
    write_run(tmp_path / "c", {"eval_ptq": (None, flipped(base, rng, 6))})
    assert compare(tmp_path / "a", tmp_path / "c")[1]["match"] == "1"


def test_trained_arms_may_scatter_but_not_shift(tmp_path):
    rng = random.Random(3)
    arms = {f"eval_qat_{i}": [rng.random() < 0.8 for _ in range(N)] for i in range(8)}
    write_run(tmp_path / "cpu", {k: ("qat-sft", v) for k, v in arms.items()})
    # Another trajectory per arm: each arm gains or loses up to 20 answers, in both directions.
    scattered = {}
    for i, (k, v) in enumerate(arms.items()):
        out, sign = list(v), 1 if i % 2 else -1
        pool = [j for j, c in enumerate(v) if c == (sign < 0)][: 5 + 2 * i]
        for j in pool:
            out[j] = not out[j]
        scattered[k] = out
    write_run(tmp_path / "scattered", {k: ("qat-sft", v) for k, v in scattered.items()})
    assert compare(tmp_path / "cpu", tmp_path / "scattered")[1]["match"] == "1"
    # Every arm a little worse: a shift of the device, not noise.
    shifted = {}
    for i, (k, v) in enumerate(arms.items()):
        out = list(v)
        for j in [j for j, c in enumerate(v) if c][: 8 + (i % 3)]:
            out[j] = False
        shifted[k] = out
    write_run(tmp_path / "shifted", {k: ("qat-sft", v) for k, v in shifted.items()})
    r, result = compare(tmp_path / "cpu", tmp_path / "shifted")
    assert result["match"] == "0" and "SHIFTED" in r.stdout


def test_two_eval_directories_compare_as_one_stage(tmp_path):
    rng = random.Random(4)
    base = [rng.random() < 0.5 for _ in range(N)]
    write_run(tmp_path / "run", {"packed": (None, base), "dequantized": (None, flipped(base, rng, 3))})
    r, result = compare(tmp_path / "run" / "dequantized", tmp_path / "run" / "packed")
    assert r.returncode == 0 and result["match"] == "1" and result["stages"] == "1"
    assert "| evaluation |" in r.stdout


def test_bad_input_is_a_one_line_error(tmp_path):
    (tmp_path / "empty").mkdir()
    r = subprocess.run([sys.executable, SCRIPT, tmp_path / "empty", tmp_path / "empty"], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no plan.json" in r.stderr
