#!/usr/bin/env python3
"""Compares two runs of the same experiment made on different devices (scripts/gpu-e2e: the tiny
reproduction on the CPU and on CUDA), evaluation stage by evaluation stage, and says whether they
agree within noise.

  scripts/compare_runs.py BASELINE_RUN OTHER_RUN [--names cpu cuda] [--out compare.md]

Either argument may instead be one eval-math output directory (with samples.jsonl): then the two
evaluations are compared as one untrained stage (e.g. a packed model against its dequantized twin).

Both runs evaluate the same problems, so each stage's difference in pass@1 is paired per problem:
its standard error is sqrt(b + c - (b - c)^2 / n) / n, with b and c the problems that only one run
solves (McNemar). Two kinds of stage:
  - untrained (the teacher, PTQ models, the traces): the same weights up to the devices' float
    rounding (GPTQ's solves, greedy decoding), so each must agree within 3 paired standard errors;
  - trained (qat-sft, qat-kd, grpo models): another device takes another trajectory, as another
    training seed would, so single arms may differ by more than the problems' noise; what must
    hold is that the device does not shift them as a whole: the mean difference over the K arms
    within 3 standard errors of that mean (sd of the arms' differences / sqrt(K)).
Prints a markdown table, the two checks and a last line "RESULT match=1|0 ..."; exits 0 either way
(2 on bad input). Standard library only: runs with any Python that the GPU machine has.
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

TRAINING_TOOLS = {"qat-sft", "qat-kd", "grpo"}
Z_LIMIT = 3.0


def fail(message):
    print(f"compare_runs: error: {message}", file=sys.stderr)
    sys.exit(2)


def eval_stages(run):
    """{stage name: (label, tool of the evaluated model, {problem id: correct})} of a run directory;
    {"evaluation": ...} of an eval-math output directory."""
    if (run / "samples.jsonl").is_file():
        return {"evaluation": (run.name, "", read_correct(run / "samples.jsonl"))}
    plan_file = run / "plan.json"
    if not plan_file.is_file():
        fail(f"{run}: no plan.json (not a run directory of `rqat run`)")
    plan = json.loads(plan_file.read_text())
    stages = {}
    for stage in plan.get("stages", []):
        name, tool = stage.get("id"), stage.get("tool")
        if tool != "eval-math":
            continue
        out = run / Path(stage.get("out_dir", name)).name
        samples = out / "samples.jsonl"
        summary = out / "summary.json"
        if not (samples.is_file() and summary.is_file()):
            continue  # not finished in this run
        # Trained in this run: the evaluated model is a stage directory of the run (paths were
        # written relative to where the run started) made by a training tool. A model from
        # outside (the teacher) is the same on both devices.
        model = Path(json.loads(summary.read_text()).get("model", ""))
        manifest = run / model.name / "manifest.json"
        model_tool = json.loads(manifest.read_text()).get("tool", "") if manifest.is_file() else ""
        stages[name] = (stage.get("label") or name, model_tool, read_correct(samples))
    return stages


def read_correct(samples):
    """{problem id: whether its first sample is correct} of an eval-math samples.jsonl."""
    correct = {}
    for line in samples.read_text().splitlines():
        row = json.loads(line)
        if row.get("sample", 0) == 0:
            correct[row["id"]] = bool(row.get("correct"))
    return correct


def paired(a, b):
    """pass@1 of both, their difference b - a and its paired standard error, over shared ids."""
    ids = sorted(set(a) & set(b))
    n = len(ids)
    only_a = sum(a[i] and not b[i] for i in ids)
    only_b = sum(b[i] and not a[i] for i in ids)
    acc_a = sum(a[i] for i in ids) / n
    acc_b = sum(b[i] for i in ids) / n
    variance = max(only_a + only_b - (only_b - only_a) ** 2 / n, 0.0)
    return acc_a, acc_b, acc_b - acc_a, math.sqrt(variance) / n, n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("baseline", type=Path)
    p.add_argument("other", type=Path)
    p.add_argument("--names", nargs=2, default=["baseline", "other"], metavar=("BASELINE", "OTHER"))
    p.add_argument("--out", type=Path, help="also write the markdown here")
    a = p.parse_args()
    base, other = eval_stages(a.baseline), eval_stages(a.other)
    shared = [name for name in base if name in other]
    if not shared:
        fail(f"{a.baseline} and {a.other} have no finished evaluation stage in common")
    nb, no = a.names
    lines = [f"| evaluation stage | {nb} pass@1 | {no} pass@1 | difference | paired SE | z | kind |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    untrained_z, trained_diffs = [], []
    for name in shared:
        _, tool, correct_b = base[name]
        acc_b, acc_o, diff, se, n = paired(correct_b, other[name][2])
        z = diff / se if se > 0 else (0.0 if diff == 0 else math.inf)
        trained = tool in TRAINING_TOOLS
        (trained_diffs.append(diff) if trained else untrained_z.append((abs(z), name)))
        lines.append(f"| {name} | {100 * acc_b:.1f} | {100 * acc_o:.1f} | {100 * diff:+.1f} | "
                     f"{100 * se:.1f} | {z:+.2f} | {'trained' if trained else 'untrained'} ({n}) |")
    lines.append("")
    ok = True
    if untrained_z:
        worst, worst_name = max(untrained_z)
        within = worst <= Z_LIMIT
        ok &= within
        lines.append(f"- untrained stages ({len(untrained_z)}): largest |z| {worst:.2f} ({worst_name}); "
                     f"limit {Z_LIMIT:g}: {'within noise' if within else 'DIFFERENT'}")
    mean_diff = se_mean = 0.0
    if len(trained_diffs) >= 2:
        mean_diff = statistics.fmean(trained_diffs)
        se_mean = statistics.stdev(trained_diffs) / math.sqrt(len(trained_diffs))
        within = abs(mean_diff) <= Z_LIMIT * se_mean or abs(mean_diff) < 1e-12
        ok &= within
        lines.append(f"- trained stages ({len(trained_diffs)}): mean difference {100 * mean_diff:+.2f} points, "
                     f"SE {100 * se_mean:.2f} over the arms; limit {Z_LIMIT:g} SE: "
                     f"{'within noise' if within else 'SHIFTED'}")
    elif trained_diffs:
        lines.append(f"- trained stages: 1 arm ({100 * trained_diffs[0]:+.1f} points): too few for the shift check")
    lines.append(f"- verdict: {nb} and {no} {'agree within noise' if ok else 'DIFFER'}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    print(f"RESULT match={int(ok)} stages={len(shared)} untrained={len(untrained_z)} "
          f"trained={len(trained_diffs)} mean_trained_diff={mean_diff:.4f} se={se_mean:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
