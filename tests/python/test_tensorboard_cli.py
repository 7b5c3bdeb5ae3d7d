"""The TensorBoard event files of the trainers (OUT/tb, train/step_metrics_log.h) and of eval-math
(tools/eval_run/eval_tensorboard.h), read back with the tensorboard package's own readers:
  - qat-kd (with held-out evaluation) and grpo: every number of metrics.h5, each series' columns, is a scalar
    "<series>/<column>" of the event files at the same steps with the same value (as float32, the type event files
    store scalars in: float equality);
  - eval-math: every number of results.h5 (one row per sample) is "samples/<column>" at step = its row, summary.json's
    overall metrics are "summary/<metric>", the live generation numbers are there once per finished sample;
  - the run's settings are in the text tab, and sampled completions with their rewards (GRPO at the logged steps,
    eval-math at the end);
  - every record passes tensorboard's CRC check;
  - --no-tensorboard writes no event file.
Needs RQAT_BIN (qat-kd, grpo and eval-math beside it), the tensorboard and h5py packages.
"""

import json
import os
import pathlib

import numpy as np
import pytest

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not os.access(RQAT_BIN, os.X_OK):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
pytest.importorskip("tensorboard", reason="the tensorboard package (pip) reads the event files")
h5py = pytest.importorskip("h5py", reason="h5py reads metrics.h5")
from tensorboard.backend.event_processing import event_file_loader  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from gguf_models import TEACHER, run  # noqa: E402
from grpo_toy import write_grpo_toy  # noqa: E402

APPS = pathlib.Path(RQAT_BIN).parent
QAT_KD, GRPO = APPS / "qat-kd", APPS / "grpo"


def event_files(out):
    return sorted((out / "tb").glob("events.out.tfevents.*"))


def accumulator(out):
    files = event_files(out)
    assert len(files) == 1, files
    # Every record through tensorboard's reader that checks both CRCs of each record (it raises on a mismatch).
    records = list(event_file_loader.RawEventFileLoader(str(files[0]), detect_file_replacement=False).Load())
    assert len(records) > 2
    acc = EventAccumulator(str(out / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def assert_scalars_are_metrics_h5(out, acc):
    tags = set(acc.Tags()["scalars"])
    compared = 0
    with h5py.File(out / "metrics.h5", "r") as f:
        for series in f:
            steps = f[series]["step"][()]
            for column in f[series]:
                if column == "step":
                    continue
                values = f[series][column][()]
                logged = ~np.isnan(values)  # NaN: a row without this column
                tag = f"{series}/{column}"
                assert tag in tags, (tag, sorted(tags))
                events = acc.Scalars(tag)
                assert [e.step for e in events] == steps[logged].tolist(), tag
                assert [np.float32(e.value) for e in events] == values[logged].astype(np.float32).tolist(), tag
                compared += len(events)
    return compared


def text(acc, tag):
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The tiny reproduction's teacher (trained; the tiny task's tokenizer) and a small split of that task."""
    root = tmp_path_factory.mktemp("tb")
    run(RQAT_BIN, "tiny-task", "--out", root / "task", "--seed", "0", "--train", "48", "--test", "4", "--levels", "3")
    return root, TEACHER


def test_qat_kd_logs_every_metric_to_tensorboard(work):
    root, model = work
    out = root / "qat"
    run(QAT_KD, "--model", model, "--teacher", model, "--out", out, "--data", root / "task" / "train.jsonl",
        "--eval-data", root / "task" / "test.jsonl", "--chat", "--prompt-field", "problem", "--response-field",
        "solution", "--max-length", "64", "--bits", "4", "--group-size", "32", "--steps", "5", "--batch-size", "4",
        "--lr", "1e-3", "--log-every", "2", "--eval-every", "2", "--device", "cpu", "--threads", "1")
    acc = accumulator(out)
    compared = assert_scalars_are_metrics_h5(out, acc)
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_second"} <= set(acc.Tags()["scalars"])
    assert any(tag.startswith("eval/") for tag in acc.Tags()["scalars"])
    assert compared >= 5 * 6
    settings = text(acc, "settings")
    assert len(settings) == 1 and settings[0][0] == 0 and '"tool": "qat-kd"' in settings[0][1], settings


def test_grpo_logs_metrics_and_sampled_completions(tmp_path):
    toy = write_grpo_toy(tmp_path)
    out = tmp_path / "grpo"
    run(GRPO, "--model", toy / "toy", "--out", out, "--data", toy / "sums.jsonl", "--no-chat-template",
        "--instruction", "", "--prompts-per-step", "4", "--num-generations", "4", "--max-new-tokens", "1",
        "--steps", "4", "--lr", "1e-2", "--schedule", "constant", "--seed", "3", "--threads", "1", "--log-every", "2",
        "--device", "cpu")
    acc = accumulator(out)
    assert_scalars_are_metrics_h5(out, acc)
    assert {"train/reward", "train/kl", "train/entropy", "train/clip_fraction",
            "train/response_length"} <= set(acc.Tags()["scalars"])
    samples = text(acc, "samples")
    assert [step for step, _ in samples] == [2, 4], samples  # the steps with a progress line
    assert all("reward" in markdown and "**prompt" in markdown for _, markdown in samples), samples


def test_no_tensorboard_writes_no_event_file(work):
    root, model = work
    out = root / "quiet"
    run(QAT_KD, "--model", model, "--teacher", model, "--out", out, "--data", root / "task" / "train.jsonl",
        "--chat", "--prompt-field", "problem", "--response-field", "solution", "--max-length", "64", "--bits", "4",
        "--group-size", "32", "--steps", "1", "--batch-size", "2", "--device", "cpu", "--threads", "1",
        "--no-tensorboard")
    assert (out / "metrics.h5").exists() and not (out / "tb").exists()


def test_eval_math_logs_results_and_samples(work, tmp_path):
    root, model = work
    out = tmp_path / "eval"
    run(APPS / "eval-math", "--model", model, "--out", out, "--benchmark", "tiny", "--data",
        root / "task" / "test.jsonl", "--instruction", "", "--n", "3", "--temperature", "0.8", "--max-new-tokens",
        "40", "--reward", "math_boxed+format_last_box", "--threads", "1", "--quiet", "--device", "cpu")
    acc = accumulator(out)
    tags = set(acc.Tags()["scalars"])
    compared = 0
    # Every number of results.h5 (one row per sample) at step = its row, as float32.
    with h5py.File(out / "results.h5", "r") as f:
        for column in f["samples"]:
            values = f["samples"][column][()]
            if values.dtype.kind not in "if":
                continue
            events = acc.Scalars(f"samples/{column}")
            assert [e.step for e in events] == list(range(len(values))), column
            assert [np.float32(e.value) for e in events] == values.astype(np.float32).tolist(), column
            compared += len(events)
    assert compared >= 12 * 7  # 4 problems x 3 samples, 7 numeric columns (reward among them)
    # summary.json's overall metrics at step = the number of samples.
    metrics = json.loads((out / "summary.json").read_text())["metrics"]
    for key in ("pass@1", "mean_tokens", "truncated_share", "mean_reward"):
        events = acc.Scalars(f"summary/{key}")
        assert [(e.step, np.float32(e.value)) for e in events] == [(12, np.float32(metrics[key]))], key
    assert acc.Scalars("summary/pass@k/2")[0].value == np.float32(metrics["pass@k"]["2"])
    # Live numbers as samples finished: one per sample.
    assert [e.step for e in acc.Scalars("generation/mean_tokens")] == list(range(1, 13))
    assert {"generation/tokens_per_second", "generation/truncated_share"} <= tags
    settings = text(acc, "settings")
    assert len(settings) == 1 and '"benchmark": "tiny"' in settings[0][1]
    samples = text(acc, "samples")
    assert len(samples) == 1 and samples[0][0] == 12 and samples[0][1].count("reward") == 4, samples


def test_eval_math_no_tensorboard(work, tmp_path):
    root, model = work
    out = tmp_path / "eval"
    run(APPS / "eval-math", "--model", model, "--out", out, "--benchmark", "tiny", "--data",
        root / "task" / "test.jsonl", "--instruction", "", "--max-new-tokens", "8", "--threads", "1", "--quiet",
        "--no-tensorboard")
    assert (out / "results.h5").exists() and not (out / "tb").exists()
