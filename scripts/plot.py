#!/usr/bin/env python3
"""Plots of a run of `rqat run` (docs/experiments.md): the step metrics that the training stages
(qat-sft, qat-kd, grpo) write to <stage dir>/metrics.h5, as PNG files under RUN_DIR/plots.

  python3 scripts/plot.py RUN_DIR [--out DIR]

One figure per metric family (train loss, KD loss, eval NLL, eval accuracy, reward, rollout accuracy,
response lengths, entropy, KL) with one line per stage instance, labelled by its label in plan.json
(with training seeds, `seeds:` in the experiment, one line per model: the mean over its seeds at the
steps they share, with the band from the lowest to the highest seed shaded);
plus comparisons when the plan has them: KD vs SFT (qat instances grouped by the `objective` sweep
variable, else by tool) and RTN vs GPTQ init (instances of one training tool grouped by the `init`
or `method` variable).
metrics.h5 holds one HDF5 group per series ("train", "eval") with a "step" column and one float
column per metric, NaN where a step did not log it (lib/train/step_metrics_log.h). Series a run does
not have are skipped. Uses the system python3 with Debian's python3-matplotlib and python3-h5py.
"""

import argparse
import json
import sys
from pathlib import Path

try:
    import h5py
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt
    import numpy as np
except ImportError as e:
    sys.exit(f"plot.py: {e.name} is missing: run it with Debian's /usr/bin/python3 "
             "(apt-get install python3-matplotlib python3-h5py) or install it")

# (file stem, title, y label, candidate (series, column) pairs: the first one an instance has is drawn)
FAMILIES = [
    ("train_loss", "Training loss", "loss", [("train", "loss")]),
    ("train_kd", "Distillation loss (KL to the teacher)", "KL", [("train", "kd")]),
    ("eval_nll", "Eval NLL", "NLL (nats/token)", [("eval", "nll")]),
    ("eval_accuracy", "Eval accuracy", "pass@1", [("eval", "math_accuracy"), ("eval", "accuracy")]),
    ("reward", "Mean reward", "reward", [("train", "reward")]),
    ("rollout_accuracy", "Rollout accuracy", "accuracy", [("train", "accuracy")]),
    ("response_length", "Rollout response length", "tokens", [("train", "response_length")]),
    ("eval_response_length", "Eval response length", "tokens", [("eval", "math_mean_tokens"), ("eval", "mean_tokens")]),
    ("entropy", "Policy entropy", "nats/token", [("train", "entropy")]),
    ("kl", "KL to the reference policy", "KL", [("train", "kl")]),
]
# What a comparison figure draws: the first of these that every compared run has. Eval NLL when the
# runs scored held-out text, else benchmark accuracy; training loss only between runs of one
# objective (a KD loss and a cross-entropy are not on one scale).
EVAL_METRICS = [("eval", "nll", "eval NLL"), ("eval", "math_accuracy", "eval accuracy")]
SAME_OBJECTIVE_METRICS = EVAL_METRICS + [("train", "loss", "training loss")]


def instance_dir(run_dir, stage):
    """run_dir/<id> (still right when the run directory moved), else the recorded out_dir."""
    in_run = run_dir / stage["id"]
    out_dir = Path(stage.get("out_dir", ""))
    return out_dir if not in_run.exists() and stage.get("out_dir") and out_dir.exists() else in_run


def read_series(path):
    """{series: {column: numpy array}} of the groups of metrics.h5 that have a step column."""
    series = {}
    with h5py.File(path, "r") as f:
        for name, group in f.items():
            if isinstance(group, h5py.Group) and "step" in group:
                series[name] = {col: np.asarray(group[col][()])
                                for col in group if isinstance(group[col], h5py.Dataset)}
    return series


def curve(metrics, series, column):
    """(steps, values) without the NaN rows, or None when the instance lacks the column."""
    cols = metrics.get(series, {})
    if column not in cols or cols[column].dtype.kind not in "fiu":
        return None
    steps, values = cols["step"].astype(float), cols[column].astype(float)
    keep = ~np.isnan(values)
    return (steps[keep], values[keep]) if keep.any() else None


def load_runs(run_dir, plan):
    """[(stage, label, [metrics])] for the instances with a readable metrics.h5 with step series. With
    training seeds (plan["seed_variable"]), the instances of one stage that differ only in the seed
    are one entry, their metrics one per seed."""
    seed_variable = plan.get("seed_variable") or ""

    def model_key(stage):  # the stage and its sweep point without the seed
        point = stage.get("point", {})
        return stage["stage"], tuple(sorted((k, str(v)) for k, v in point.items() if k != seed_variable))

    entries = {}  # model key -> [stage, label, [metrics]]
    for stage in plan["stages"]:
        path = instance_dir(run_dir, stage) / "metrics.h5"
        if not path.is_file():
            continue
        try:
            metrics = read_series(path)
        except (OSError, KeyError) as e:  # a file being rewritten, or not HDF5: plot the rest
            print(f"warning: skipping {path}: {e}", file=sys.stderr)
            continue
        if not metrics:
            continue
        key = model_key(stage) if seed_variable else stage["id"]
        if key in entries:
            entries[key][2].append(metrics)
        else:
            entries[key] = [stage, stage.get("label", stage["id"]), [metrics]]
    labels = [label for _, label, _ in entries.values()]
    runs = []
    for stage, label, metrics in entries.values():
        # Two entries with one label (a label without the sweep variable) stay distinguishable.
        name = label if labels.count(label) == 1 else f"{label} [{stage['id']}]"
        runs.append((stage, f"{name} ({len(metrics)} seeds)" if len(metrics) > 1 else name, metrics))
    return runs


def seed_curve(metrics_list, series, column):
    """(steps, mean, lowest, highest) over the seeds at the steps every seed logged, or None when a
    seed lacks the column. One seed: its curve, with itself as the band."""
    curves = [curve(m, series, column) for m in metrics_list]
    if any(c is None for c in curves):
        return None
    steps = curves[0][0]
    for x, _ in curves[1:]:
        steps = np.intersect1d(steps, x)
    if steps.size == 0:
        return None
    values = np.stack([y[np.searchsorted(x, steps)] for x, y in curves])
    return steps, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def draw(ax, c, **style):
    """A line (the seeds' mean) and, over several seeds, the band between the lowest and highest."""
    x, y, lo, hi = c
    (line,) = ax.plot(x, y, marker="o" if len(x) < 20 else None, markersize=3, **style)
    if not np.array_equal(lo, hi):
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)


def save(fig, ax, out_dir, stem, written):
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = out_dir / f"{stem}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)


def plot_families(runs, out_dir, written):
    for stem, title, ylabel, candidates in FAMILIES:
        lines = []
        for _, label, metrics in runs:
            for series, column in candidates:
                c = seed_curve(metrics, series, column)
                if c is not None:
                    lines.append((label, c))
                    break
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, c in lines:
            draw(ax, c, label=label)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        save(fig, ax, out_dir, stem, written)


def plot_comparison(runs, groups, metrics_to_try, stem, what_differs, out_dir, written):
    """One colour per group (e.g. kd / sft); draws the first of metrics_to_try that every grouped
    instance has. Needs two groups at least, else there is nothing to compare."""
    grouped = [(groups[stage["id"]], label, metrics) for stage, label, metrics in runs if stage["id"] in groups]
    names = sorted({g for g, _, _ in grouped})
    if len(names) < 2:
        return
    for series, column, what in metrics_to_try:
        curves = [(g, label, seed_curve(metrics, series, column)) for g, label, metrics in grouped]
        if all(c is not None for _, _, c in curves):
            break
    else:
        return
    # Colour tells the groups apart, line style the instances within a group.
    colours = {name: f"C{i}" for i, name in enumerate(names)}
    styles = ["-", "--", ":", "-."]
    seen = {name: 0 for name in names}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for group, label, c in sorted(curves, key=lambda t: t[0]):
        style = styles[seen[group] % len(styles)]
        seen[group] += 1
        draw(ax, c, color=colours[group], linestyle=style, label=f"{group}: {label}")
    ax.set_title(f"{what_differs}{' vs '.join(names)}: {what}")
    ax.set_ylabel(what)
    save(fig, ax, out_dir, stem, written)


def point_value(stage, names):
    point = stage.get("point", {})
    for name in names:
        if name in point:
            return str(point[name])
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="run directory of `rqat run` (with plan.json)")
    parser.add_argument("--out", type=Path, help="where the PNG files go (default: RUN_DIR/plots)")
    args = parser.parse_args()
    plan_file = args.run_dir / "plan.json"
    try:
        plan = json.loads(plan_file.read_text())
        if not isinstance(plan, dict) or not isinstance(plan.get("stages"), list):
            raise ValueError("no list of stages")
    except (OSError, ValueError) as e:
        sys.exit(f"plot.py: {plan_file}: cannot read the plan ({e})")
    out_dir = args.out or args.run_dir / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)

    runs = load_runs(args.run_dir, plan)
    written = []
    plot_families(runs, out_dir, written)
    qat = {s["id"]: point_value(s, ["objective"]) or s["tool"].removeprefix("qat-")
           for s, _, _ in runs if s["tool"] in ("qat-kd", "qat-sft")}
    plot_comparison(runs, qat, EVAL_METRICS, "compare_kd_vs_sft", "", out_dir, written)
    # One init comparison per training tool: a grpo run after QAT also depends on `init`, but its
    # curves do not belong in a figure with the QAT losses.
    for tool in dict.fromkeys(s["tool"] for s, _, _ in runs):
        inits = {s["id"]: point_value(s, ["init", "method"]) for s, _, _ in runs
                 if s["tool"] == tool and point_value(s, ["init", "method"])}
        plot_comparison(runs, inits, SAME_OBJECTIVE_METRICS, f"compare_init_{tool.replace(' ', '_')}",
                        f"{tool} init ", out_dir, written)

    if not written:
        print(f"no step metrics (metrics.h5 with train/eval series) under {args.run_dir}")
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
