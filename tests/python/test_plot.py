"""scripts/plot.py on a run directory: plan.json plus metrics.h5 files in the layout of
lib/train/step_metrics_log.cpp (one group per series, an int64 "step" column and float64 metric columns,
NaN where a step did not log a metric; string attributes at the root).
  - fake runs written with h5py (qat-sft/qat-kd at two inits, a grpo run, a ptq layer table, a missing
    stage): exactly the expected PNG files appear, and the curves plot.py reads equal the data written
    minus its NaN rows;
  - with RQAT_BIN (and ../shared/data/tinyllama): real 4-step qat-sft and qat-kd runs, whose curves must
    equal their metrics.jsonl rows, and `rqat report RUN_DIR --plots` writing the tables and the plots.
plot.py runs with the Python `rqat report --plots` picks (Debian's python3 with python3-matplotlib and
python3-h5py, or the .venv of a no-root setup), not necessarily this .venv.
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v -s tests/python/test_plot.py
"""

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

ROOT = Path(__file__).resolve().parents[2]
PLOT = ROOT / "scripts" / "plot.py"


def _plot_python():
    """The Python `rqat report --plots` picks (lib/experiment/run_plots.cpp): $RQAT_PLOT_PYTHON, else the
    first of Debian's python3 and this tree's .venv that imports matplotlib and h5py."""
    chosen = os.environ.get("RQAT_PLOT_PYTHON")
    candidates = [chosen] if chosen else ["/usr/bin/python3", str(ROOT / ".venv" / "bin" / "python")]
    for python in candidates:
        if os.path.exists(python) and subprocess.run([python, "-c", "import matplotlib, h5py"],
                                                     capture_output=True).returncode == 0:
            return python
    return None


PLOT_PYTHON = _plot_python()
TIMEOUT_S = 300
if PLOT_PYTHON is None:
    pytest.skip("SKIPPED: no Python with matplotlib and h5py (apt-get install python3-matplotlib python3-h5py, "
                "or scripts/setup --bundle, which installs them into .venv)", allow_module_level=True)

# What plot.py reads back, as JSON: {label: {family: [steps, values]}} through its own functions.
READ_BACK = """
import json, sys
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, sys.argv[1])
import plot
from pathlib import Path
run_dir = Path(sys.argv[2])
plan = json.loads((run_dir / "plan.json").read_text())
out = {}
for stage, label, metrics in plot.load_runs(run_dir, plan):
    out[label] = {}
    for stem, _, _, candidates in plot.FAMILIES:
        for series, column in candidates:
            c = plot.seed_curve(metrics, series, column)
            if c is not None:
                out[label][stem] = [c[0].tolist(), c[1].tolist(), c[2].tolist(), c[3].tolist()]
                break
print(json.dumps(out))
"""


def run(cmd, env=None):
    cmd = [str(c) for c in cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    if r.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {r.returncode}\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}")
    return r


def write_metrics_h5(path, series, attributes):
    """series: {name: [row dicts with "step"]}; columns are the union of the rows' keys, NaN-filled."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for key, value in attributes.items():
            f.attrs[key] = value
        for name, rows in series.items():
            group = f.create_group(name)
            group["step"] = np.array([r["step"] for r in rows], dtype=np.int64)
            for key in sorted({k for r in rows for k in r} - {"step"}):
                group[key] = np.array([r.get(key, np.nan) for r in rows], dtype=np.float64)


def stage(run_dir, id, tool, label=None, point=None, inputs=()):
    return {"id": id, "stage": id.split(".")[0], "tool": tool, "program": tool, "argv": [],
            "out_dir": str(run_dir / id), "inputs": list(inputs), "point": point or {}, "label": label or id}


def write_plan(run_dir, stages, sweep=()):
    plan = {"name": "plot-test", "description": "", "experiment_file": "x.yaml", "run_dir": str(run_dir),
            "sweep_variables": list(sweep), "slurm_setup": [], "stages": stages}
    (run_dir / "plan.json").write_text(json.dumps(plan, indent=2))


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def read_back(run_dir):
    return json.loads(run([PLOT_PYTHON, "-c", READ_BACK, PLOT.parent, run_dir]).stdout)


def without_nan(steps, values):
    keep = [i for i, v in enumerate(values) if not np.isnan(v)]
    return [float(steps[i]) for i in keep], [values[i] for i in keep]


def test_fake_runs_give_one_png_per_family_and_the_comparisons(tmp_path):
    rng = np.random.default_rng(8)
    run_dir = tmp_path / "run"
    stages, written = [], {}
    for init in ("rtn", "gptq"):
        ptq = stage(run_dir, f"ptq.init-{init}", "ptq", point={"init": init})
        stages.append(ptq)
        # ptq's metrics.h5 is a per-layer table without a step column: never plotted.
        with h5py.File(write_dir(run_dir / ptq["id"]) / "metrics.h5", "w") as f:
            f["layers/relative_error"] = rng.random(3)
        for objective in ("sft", "kd"):
            id = f"qat.init-{init}.objective-{objective}"
            train = [{"step": s, "loss": float(rng.random()), "lr": 1e-3} for s in range(1, 7)]
            if objective == "kd":
                for r in train:
                    r["kd"] = float(rng.random())
            # eval at steps 0, 3, 6; math accuracy only at the end (NaN before, as rqat writes it)
            evals = [{"step": s, "nll": float(rng.random() + 2)} for s in (0, 3, 6)]
            evals[-1]["math_accuracy"] = 0.25
            write_metrics_h5(run_dir / id / "metrics.h5", {"train": train, "eval": evals}, {"tool": f"qat-{objective}"})
            stages.append(stage(run_dir, id, f"qat-{objective}", label=f"{init.upper()} + {objective.upper()}",
                                point={"init": init, "objective": objective}, inputs=[ptq["id"]]))
            written[stages[-1]["label"]] = {"train": train, "eval": evals}
    grpo_train = [{"step": s, "reward": float(rng.random()), "accuracy": float(rng.random()),
                   "response_length": float(rng.integers(10, 90)), "entropy": float(rng.random()),
                   "kl": float(rng.random()) * 1e-3, "loss": float(rng.random())} for s in range(1, 5)]
    grpo_eval = [{"step": s, "accuracy": float(rng.random()), "mean_tokens": 40.0 + s} for s in (0, 4)]
    write_metrics_h5(run_dir / "grpo" / "metrics.h5", {"train": grpo_train, "eval": grpo_eval}, {"tool": "grpo"})
    stages.append(stage(run_dir, "grpo", "grpo", label="GRPO"))
    written["GRPO"] = {"train": grpo_train, "eval": grpo_eval}
    stages.append(stage(run_dir, "never_ran", "qat-kd"))  # no directory: skipped
    write_plan(run_dir, stages, sweep=("init", "objective"))

    r = run([PLOT_PYTHON, PLOT, run_dir])
    plots = run_dir / "plots"
    expected = {"train_loss", "train_kd", "eval_nll", "eval_accuracy", "reward", "rollout_accuracy",
                "response_length", "eval_response_length", "entropy", "kl", "compare_kd_vs_sft",
                "compare_init_qat-sft", "compare_init_qat-kd"}
    assert {p.stem for p in plots.glob("*.png")} == expected
    assert sorted(Path(line).stem for line in r.stdout.split()) == sorted(expected)
    for p in plots.glob("*.png"):
        assert png_size(p) == (840, 540), p  # 7 x 4.5 inches at 120 dpi

    # The curves are the written columns without their NaN rows, per instance label.
    got = read_back(run_dir)
    assert set(got) == set(written)
    for label, data in written.items():
        columns = {"train_loss": ("train", "loss"), "train_kd": ("train", "kd"), "eval_nll": ("eval", "nll"),
                   "reward": ("train", "reward"), "rollout_accuracy": ("train", "accuracy"),
                   "response_length": ("train", "response_length"), "entropy": ("train", "entropy"),
                   "kl": ("train", "kl")}
        columns["eval_accuracy"] = ("eval", "accuracy" if label == "GRPO" else "math_accuracy")
        columns["eval_response_length"] = ("eval", "mean_tokens")
        want = {}
        for stem, (series, column) in columns.items():
            rows = data[series]
            steps, values = without_nan([row["step"] for row in rows], [row.get(column, np.nan) for row in rows])
            if steps:
                want[stem] = [steps, values, values, values]  # one seed: the band is the line
        assert got[label] == want, label
    assert got["RTN + SFT"]["eval_accuracy"] == [[6.0], [0.25], [0.25], [0.25]]  # NaN steps dropped

    # --out elsewhere, and a run without training stages gives no figure (and says so).
    bare = tmp_path / "bare"
    write_dir(bare)
    write_plan(bare, [stage(bare, "ptq", "ptq")])
    r = run([PLOT_PYTHON, PLOT, bare, "--out", tmp_path / "elsewhere"])
    assert "no step metrics" in r.stdout and not list((tmp_path / "elsewhere").glob("*.png"))


def write_dir(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_training_seeds_are_one_line_with_a_band(tmp_path):
    """With `seeds:` (plan.json's seed_variable) the instances of one model that differ only in the seed are one
    line: the mean over the seeds at the steps they all logged, and the lowest and highest seed as its band."""
    run_dir = tmp_path / "run"
    rng = np.random.default_rng(41)
    stages, losses = [], {}
    for objective in ("sft", "kd"):
        for seed in range(3):
            id = f"qat.objective-{objective}.seed-{seed}"
            steps = range(1, 7) if seed < 2 else range(1, 5)  # seed 2 stopped early: steps 1-4 shared
            train = [{"step": s, "loss": float(rng.random())} for s in steps]
            losses[(objective, seed)] = [r["loss"] for r in train]
            write_metrics_h5(run_dir / id / "metrics.h5", {"train": train}, {"tool": f"qat-{objective}"})
            stages.append(stage(run_dir, id, f"qat-{objective}", label=f"GPTQ + {objective.upper()}",
                                point={"objective": objective, "seed": str(seed)}))
    write_plan(run_dir, stages, sweep=("objective", "seed"))
    plan = json.loads((run_dir / "plan.json").read_text())
    plan["seed_variable"] = "seed"
    (run_dir / "plan.json").write_text(json.dumps(plan))

    got = read_back(run_dir)
    assert set(got) == {"GPTQ + SFT (3 seeds)", "GPTQ + KD (3 seeds)"}
    for objective in ("sft", "kd"):
        per_seed = np.array([losses[(objective, s)][:4] for s in range(3)])
        steps, mean, lo, hi = got[f"GPTQ + {objective.upper()} (3 seeds)"]["train_loss"]
        assert steps == [1.0, 2.0, 3.0, 4.0]
        np.testing.assert_allclose(mean, per_seed.mean(axis=0), rtol=1e-6)
        np.testing.assert_allclose(lo, per_seed.min(axis=0), rtol=1e-6)
        np.testing.assert_allclose(hi, per_seed.max(axis=0), rtol=1e-6)
    written = run([PLOT_PYTHON, PLOT, run_dir]).stdout.split()
    assert [Path(p).stem for p in written] == ["train_loss"]  # one figure: no eval series here


def test_missing_plan_is_a_one_line_error(tmp_path):
    r = subprocess.run([PLOT_PYTHON, str(PLOT), str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode != 0
    assert "plan.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1


RQAT_BIN = os.environ.get("RQAT_BIN", "")
DATA = Path(os.environ.get("RQAT_SHARED_DATA") or ROOT.parent / "shared" / "data")
TINY = DATA / "tinyllama"


@pytest.mark.skipif(not (RQAT_BIN and os.access(RQAT_BIN, os.X_OK)), reason="SKIPPED: RQAT_BIN unset")
def test_real_qat_runs_and_rqat_report_plots(tmp_path):
    if not (TINY / "stories260K.bin").is_file():
        pytest.skip(f"SKIPPED: {TINY} is absent")
    apps = Path(RQAT_BIN).parent
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:" + os.environ.get("PATH", "")}
    model = tmp_path / "stories260K"
    run([RQAT_BIN, "convert", "--llama2c", TINY / "stories260K.bin", "--tokenizer-bin", TINY / "tok512.bin",
         "--out", model], env=env)
    run_dir = tmp_path / "run"
    text = TINY / "tinystories_sample.txt"
    common = ["--model", model, "--data", text, "--eval-data", text, "--eval-tokens", "256", "--eval-every", "2",
              "--bits", "2", "--group-size", "32", "--max-length", "48", "--steps", "4", "--batch-size", "4",
              "--lr", "1e-3", "--seed", "7", "--threads", "1"]
    run([apps / "qat-sft", *common, "--out", run_dir / "qat.objective-sft"], env=env)
    run([apps / "qat-kd", *common, "--teacher", model, "--out", run_dir / "qat.objective-kd"], env=env)
    write_plan(run_dir, [stage(run_dir, f"qat.objective-{o}", f"qat-{o}", label=f"W2 {o}", point={"objective": o})
                         for o in ("sft", "kd")], sweep=("objective",))

    r = run([RQAT_BIN, "report", run_dir, "--plots"], env=env)
    assert (run_dir / "report.md").read_text() in r.stdout
    assert "| qat.objective-kd | qat-kd | done |" in r.stdout
    for stem in ("train_loss", "train_kd", "eval_nll", "compare_kd_vs_sft"):
        assert (run_dir / "plots" / f"{stem}.png").is_file(), stem

    # What plot.py draws is what the runs logged (metrics.jsonl holds the same rows as metrics.h5).
    got = read_back(run_dir)
    for o in ("sft", "kd"):
        jsonl = run_dir / f"qat.objective-{o}" / "metrics.jsonl"
        rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
        train = [r for r in rows if r["series"] == "train"]
        evals = [r for r in rows if r["series"] == "eval"]
        assert got[f"W2 {o}"]["train_loss"][:2] == [[float(r["step"]) for r in train], [r["loss"] for r in train]]
        assert got[f"W2 {o}"]["eval_nll"][:2] == [[float(r["step"]) for r in evals], [r["nll"] for r in evals]]
        assert [r["step"] for r in evals] == [0, 2, 4]
