"""eval-math keeps its finished samples on disk (OUT/samples.partial.jsonl, tools/eval_run/partial_samples.h) and continues
where it stopped:
  - a run sent SLURM's warning signal (SIGUSR1) at about half its samples stops after the samples in flight and
    exits 138 (the status the sbatch script requeues on) with those samples on disk; run again, it generates only
    the rest and ends with exactly the samples.jsonl of one uninterrupted run, and removes the partial file;
  - a partial file made with other settings is not reused;
  - progress.json says where the run is: "stopped" at the kept count after the signal, "done" at the end.
Needs RQAT_BIN (eval-math beside it).
"""

import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)

from gguf_models import TEACHER, run  # noqa: E402

EVAL_MATH = pathlib.Path(RQAT_BIN).with_name("eval-math")
PROBLEMS, SAMPLES = 200, 8
TOTAL = PROBLEMS * SAMPLES


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    run(RQAT_BIN, "tiny-task", "--out", root / "task", "--seed", "0", "--train", "8", "--test", str(PROBLEMS),
        "--levels", "3")
    return root / "task" / "test.jsonl"


def eval_args(data, out, temperature="0.8"):
    # One sequence at a time: slow enough to be stopped in the middle.
    return [str(a) for a in [EVAL_MATH, "--model", TEACHER, "--out", out, "--benchmark", "tiny", "--data", data,
                             "--instruction", "", "--n", SAMPLES, "--temperature", temperature, "--max-new-tokens",
                             "40", "--max-batch", "1", "--threads", "1", "--quiet", "--device", "cpu"]]


def kept_lines(out):
    partial = out / "samples.partial.jsonl"
    return partial.read_text().count("\n") - 1 if partial.exists() else 0


def stop_at_half(args, out):
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and kept_lines(out) < TOTAL // 2:
        time.sleep(0.005)
    if proc.poll() is not None or time.time() >= deadline:
        proc.kill()
        pytest.fail("the evaluation finished (or stalled) before it could be stopped")
    proc.send_signal(signal.SIGUSR1)
    proc.communicate(timeout=60)
    return proc.returncode


def test_stopped_evaluation_resumes_to_the_samples_of_one_run(task, tmp_path):
    whole = tmp_path / "whole"
    run(*eval_args(task, whole))
    assert not (whole / "samples.partial.jsonl").exists()
    progress = json.loads((whole / "progress.json").read_text())
    assert (progress["state"], progress["done"], progress["total"]) == ("done", TOTAL, TOTAL)

    cut = tmp_path / "cut"
    assert stop_at_half(eval_args(task, cut), cut) == 128 + signal.SIGUSR1
    kept = kept_lines(cut)
    assert TOTAL // 2 <= kept < TOTAL
    assert not (cut / "samples.jsonl").exists()
    progress = json.loads((cut / "progress.json").read_text())
    assert (progress["state"], progress["done"]) == ("stopped", kept)

    resumed = run(*eval_args(task, cut))
    assert f"resuming: {kept} finished samples kept" in resumed.stdout, resumed.stdout
    assert (cut / "samples.jsonl").read_bytes() == (whole / "samples.jsonl").read_bytes()
    assert not (cut / "samples.partial.jsonl").exists()
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["timing"]["generated_tokens"] < json.loads((whole / "summary.json").read_text())["timing"][
        "generated_tokens"], "the resumed run generated the kept samples again"
    print(f"\nstopped at {kept} of {TOTAL} samples; resumed to the same samples.jsonl")


def test_samples_of_other_settings_are_not_reused(task, tmp_path):
    out = tmp_path / "changed"
    assert stop_at_half(eval_args(task, out), out) == 128 + signal.SIGUSR1
    again = run(*eval_args(task, out, temperature="0.7"))
    assert "made with other settings" in again.stdout and "resuming" not in again.stdout
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == TOTAL
    fresh = tmp_path / "fresh"
    run(*eval_args(task, fresh, temperature="0.7"))
    assert (out / "samples.jsonl").read_bytes() == (fresh / "samples.jsonl").read_bytes()


def test_corrupted_kept_samples_are_checked_and_generated_again(task, tmp_path):
    """A kept sample is checked against the model before it is trusted (issue 42): one whose token ids fall outside
    the vocabulary, or whose text is not the decoding of its ids, is dropped and generated again, with one warning
    line naming the file and the count; the run still ends with the samples.jsonl of one uninterrupted run."""
    whole = tmp_path / "whole"
    run(*eval_args(task, whole))
    out = tmp_path / "corrupt"
    assert stop_at_half(eval_args(task, out), out) == 128 + signal.SIGUSR1
    partial = out / "samples.partial.jsonl"
    header, *rows = partial.read_text().splitlines()
    rows = [json.loads(r) for r in rows]
    assert len(rows) >= 3
    rows[0]["token_ids"][0] = 10 ** 6  # outside any tiny vocabulary
    rows[1]["token_ids"][0] = -3
    text_key = "text" if "text" in rows[2] else "text_hex"
    rows[2][text_key] = rows[2][text_key] + ("7" if text_key == "text" else "37")  # not what its ids decode to
    partial.write_text("\n".join([header] + [json.dumps(r) for r in rows]) + "\n")

    resumed = run(*eval_args(task, out))
    warning = f"warning: {partial}: 3 kept samples do not match this model"
    assert resumed.stdout.count(warning) == 1, resumed.stdout
    assert f"resuming: {len(rows) - 3} finished samples kept" in resumed.stdout, resumed.stdout
    assert (out / "samples.jsonl").read_bytes() == (whole / "samples.jsonl").read_bytes()

    # An intact file raises no warning.
    clean = tmp_path / "clean"
    assert stop_at_half(eval_args(task, clean), clean) == 128 + signal.SIGUSR1
    assert "do not match this model" not in run(*eval_args(task, clean)).stdout
