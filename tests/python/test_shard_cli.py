"""Sharded data parallel (--shard, docs/distributed.md) through the command line, with Gloo on the CPU:
  - qat-kd on stories260K (2-bit student, the full-precision model as teacher): for each shard mode
    (optimizer, gradients, parameters) two processes reach the losses and final weights of the unsharded
    two-process run within float reduction-order tolerance;
  - grpo on a toy task with a KL reference policy (sharded too in parameters mode): the same for two steps;
  - a checkpoint written by 2 processes under --shard parameters resumes on 4 processes (gradients mode) and
    on 1 process (unsharded) and continues the uninterrupted run's loss curve;
  - the measured per-process state bytes (manifest) fall as the mode and world size say.
Needs RQAT_BIN=<path to rqat> (qat-kd and grpo beside it) and ../shared/data/tinyllama.
Run: RQAT_BIN=build/apps/rqat .venv/bin/python -m pytest -v -s tests/python/test_shard_cli.py
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

RQAT_BIN = os.environ.get("RQAT_BIN", "")
if not RQAT_BIN or not (os.path.isfile(RQAT_BIN) and os.access(RQAT_BIN, os.X_OK)):
    pytest.skip(f"RQAT_BIN unset or not an executable ({RQAT_BIN!r})", allow_module_level=True)
APPS = Path(RQAT_BIN).parent
QAT_KD, GRPO = APPS / "qat-kd", APPS / "grpo"

DATA = Path(os.environ.get("RQAT_SHARED_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")
TINY = DATA / "tinyllama"

from safetensors.torch import load_file  # noqa: E402
from grpo_toy import write_grpo_toy  # noqa: E402
import ranks  # noqa: E402
from ranks import launch  # noqa: E402

MODES = ["optimizer", "gradients", "parameters"]


def train_rows(out):
    rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r for r in rows if r["series"] == "train"}


def max_weight_difference(a, b):
    x, y = load_file(str(Path(a) / "model.safetensors")), load_file(str(Path(b) / "model.safetensors"))
    assert x.keys() == y.keys()
    return max((x[k].float() - y[k].float()).abs().max().item() for k in x)


def state_bytes(out):
    return json.loads((Path(out) / "manifest.json").read_text())["metrics"]["state_bytes_per_rank"]


# --- qat-kd ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    if not (TINY / "stories260K.bin").is_file():
        pytest.skip(f"SKIPPED: {TINY} is absent")
    out = tmp_path_factory.mktemp("shard") / "stories260K"
    r = subprocess.run([RQAT_BIN, "convert", "--llama2c", str(TINY / "stories260K.bin"), "--tokenizer-bin",
                        str(TINY / "tok512.bin"), "--out", str(out)], capture_output=True, text=True, env=ranks.SINGLE_ENV)
    assert r.returncode == 0, r.stderr
    return out


def kd_args(model, out, steps, *extra):
    return [QAT_KD, "--model", model, "--teacher", model, "--out", out, "--data", TINY / "tinystories_sample.txt",
            "--bits", "2", "--group-size", "32", "--max-length", "48", "--steps", steps, "--batch-size", "8",
            "--micro-batch-size", "2", "--lr", "1e-3", "--warmup-steps", "2", "--weight-decay", "0.01",
            "--seed", "7", "--threads", "1", *extra]


@pytest.fixture(scope="module")
def kd_unsharded(stories, tmp_path_factory):
    out = tmp_path_factory.mktemp("kd") / "none"
    launch(kd_args(stories, out, 10, "--checkpoint-every", "5"), world=2)
    return out


@pytest.mark.parametrize("mode", MODES)
def test_qat_kd_shard_mode_matches_unsharded(stories, kd_unsharded, tmp_path, mode):
    out = tmp_path / mode
    stdout = launch(kd_args(stories, out, 10, "--shard", mode), world=2)
    assert f"--shard {mode}" in stdout
    want, got = train_rows(kd_unsharded), train_rows(out)
    assert sorted(got) == sorted(want) == list(range(1, 11))
    worst = max(abs(got[s]["loss"] - want[s]["loss"]) / abs(want[s]["loss"]) for s in want)
    worst_norm = max(abs(got[s]["grad_norm"] - want[s]["grad_norm"]) / want[s]["grad_norm"] for s in want)
    dw = max_weight_difference(kd_unsharded, out)
    print(f"\nqat-kd --shard {mode}, 2 processes vs unsharded: max relative loss difference {worst:.2e}, "
          f"gradient norm {worst_norm:.2e}, max |weight difference| {dw:.2e} after 10 steps (lr 1e-3)")
    assert worst < 1e-5 and worst_norm < 1e-4
    assert dw < 1e-4


def test_bf16_compute_copies_track_the_fp32_run(stories, kd_unsharded, tmp_path):
    # --dtype bf16 with --shard: bf16 compute copies (student, and the gathered layers), fp32 masters, fp32
    # gradient sums and AdamW; the artifact is written from the fp32 masters.
    out = tmp_path / "bf16"
    stdout = launch(kd_args(stories, out, 10, "--shard", "parameters", "--dtype", "bf16"), world=2)
    want, got = train_rows(kd_unsharded), train_rows(out)
    worst = max(abs(got[s]["loss"] - want[s]["loss"]) / abs(want[s]["loss"]) for s in want)
    print(f"\nqat-kd --shard parameters --dtype bf16 vs the fp32 unsharded run: max relative loss difference {worst:.3f}")
    # bf16 rounds weights and activations to 8 bits of mantissa; 2-bit fake quantization turns some of
    # those roundings into flipped codes, so the curves agree to a few percent, not to float32's 1e-7.
    assert worst < 0.1 and got[10]["loss"] < 0.6 * got[1]["loss"]
    weights = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in weights.values())
    bytes_ = state_bytes(out)
    assert bytes_["master"] * 2 == bytes_["moments"]  # fp32 masters beside fp32 moments
    assert "memory per process" in stdout


def test_sharded_state_bytes_fall_with_the_mode(kd_unsharded, tmp_path, stories):
    none = state_bytes(kd_unsharded)
    got = {}
    for mode in MODES:
        out = tmp_path / mode
        launch(kd_args(stories, out, 1, "--shard", mode), world=2)
        got[mode] = state_bytes(out)
    print("\nper-process state bytes, 2 processes:", {"none": none, **got})
    # AdamW moments are split in two (up to padding), and the fp32 masters with them.
    for mode in MODES:
        assert abs(got[mode]["moments"] - none["moments"] / 2) <= 0.01 * none["moments"]
        assert got[mode]["master"] == got[mode]["moments"] // 2
    # Full gradients only live until the update in optimizer mode; later modes keep fp32 slices.
    assert got["gradients"]["gradients"] < got["optimizer"]["gradients"]
    # Full sharding keeps only the root bucket's compute copies (embeddings, norm, lm_head).
    assert got["parameters"]["weights"] < got["gradients"]["weights"]
    # With fp32 compute copies ZeRO-1 saves only from 3 processes on (4 + 4 + 16/W bytes per parameter
    # against 16; scripts/bench_shard_memory shows larger worlds).
    assert got["parameters"]["total"] < got["gradients"]["total"] < got["optimizer"]["total"] <= none["total"]


def test_sharded_checkpoint_resumes_on_other_world_sizes(stories, kd_unsharded, tmp_path):
    base = tmp_path / "base"
    launch(kd_args(stories, base, 10, "--shard", "parameters", "--checkpoint-every", "5"), world=2)
    want = train_rows(base)
    for world, mode in ((4, "gradients"), (1, "none")):
        out = tmp_path / f"resume-{world}"
        shutil.copytree(base, out)
        shutil.rmtree(out / "checkpoints" / "step-00000010")
        (out / "checkpoints" / "latest").write_text("step-00000005\n")
        stdout = launch(kd_args(stories, out, 10, "--shard", mode, "--checkpoint-every", "5", "--resume"), world)
        assert "resumed from" in stdout and "(step 5)" in stdout
        got = train_rows(out)
        assert sorted(got) == list(range(1, 11))
        worst = max(abs(got[s]["loss"] - want[s]["loss"]) / abs(want[s]["loss"]) for s in range(6, 11))
        dw = max_weight_difference(base, out)
        print(f"\nresumed at step 5 on {world} process(es) (--shard {mode}) from a 2-process --shard parameters "
              f"checkpoint: max relative loss difference over steps 6-10 {worst:.2e}, max |weight difference| {dw:.2e}")
        assert worst < 1e-5 and dw < 1e-4
    # The sharded run itself matches the unsharded one too.
    assert max_weight_difference(base, kd_unsharded) < 1e-4


# --- grpo -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_grpo_toy(tmp_path_factory.mktemp("grpo"))


def grpo_args(toy, out, *extra, steps=2, updates=(2, 2)):
    # `updates`: epochs x minibatches per step. (2, 2) runs old-policy and reference forwards, several
    # updates per step, and ranks with different numbers of training rows (degenerate groups are dropped
    # per rank), so sharded ranks run lockstep passes.
    return [GRPO, "--model", toy / "toy", "--out", out, "--data", toy / "sums.jsonl", "--no-chat-template",
            "--instruction", "", "--prompts-per-step", "8", "--num-generations", "8", "--max-new-tokens", "1",
            "--steps", str(steps), "--lr", "1e-2", "--schedule", "constant", "--seed", "3", "--threads", "1",
            "--device", "cpu", "--kl-beta", "0.05", "--epochs", str(updates[0]), "--minibatches", str(updates[1]),
            "--micro-batch-size", "2", *extra]


@pytest.mark.parametrize("mode", MODES)
def test_grpo_shard_mode_matches_unsharded(toy, tmp_path, mode):
    # One update from identical weights: the same rollouts, the same objective and gradient.
    launch(grpo_args(toy, tmp_path / "none1", steps=1, updates=(1, 1)), world=2)
    launch(grpo_args(toy, tmp_path / f"{mode}1", "--shard", mode, steps=1, updates=(1, 1)), world=2)
    want, got = train_rows(tmp_path / "none1")[1], train_rows(tmp_path / f"{mode}1")[1]
    assert want["grad_norm"] > 0  # groups with mixed rewards gave a gradient
    assert got["reward"] == want["reward"]
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5, abs=1e-7)
    assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5)
    dw1 = max_weight_difference(tmp_path / "none1", tmp_path / f"{mode}1")
    # As in test_grpo_cli: Adam's first step divides each entry by its own magnitude, which turns
    # summation-order bits of near-cancelling gradient entries into lr-bounded weight differences.
    assert dw1 < 0.1 * 1e-2

    # Two steps of 2 epochs x 2 minibatches: later updates start from weights that differ in those
    # bits, and Adam moves near-zero entries by up to lr whatever their sign: the losses agree to 1e-2 and
    # the weights stay within 2 lr after 8 updates (in optimizer mode, whose arithmetic is the unsharded
    # one's, within float rounding: PyTorch's fused AdamW kernel computes the last elements of each tensor, fewer
    # than a vector, in a scalar loop, and a rank's slice ends elsewhere than the whole tensor; 4.5e-7 measured).
    launch(grpo_args(toy, tmp_path / "none"), world=2)
    launch(grpo_args(toy, tmp_path / mode, "--shard", mode), world=2)
    want, got = train_rows(tmp_path / "none"), train_rows(tmp_path / mode)
    assert sorted(got) == sorted(want) == [1, 2]
    assert got[1]["reward"] == want[1]["reward"]
    for s in want:
        assert got[s]["loss"] == pytest.approx(want[s]["loss"], rel=1e-2, abs=1e-4)
    assert max_weight_difference(toy / "toy", tmp_path / mode) > 1e-3  # it learned
    dw = max_weight_difference(tmp_path / "none", tmp_path / mode)
    print(f"\ngrpo --shard {mode}, 2 processes vs unsharded: one update: gradient norm {got[1]['grad_norm']:.6e} vs "
          f"{want[1]['grad_norm']:.6e}, max |weight difference| {dw1:.2e}; 2 steps x 4 updates: rewards of step 1 equal, "
          f"max |weight difference| {dw:.2e} (lr 1e-2)")
    assert dw < 2 * 1e-2
    if mode == "optimizer":
        assert dw < 1e-5


@pytest.mark.parametrize("mode", ["parameters", "none"])
def test_grpo_bf16_runs_and_writes_fp32(toy, tmp_path, mode):
    # --dtype bf16: the reference policy in bf16 in every mode; sharded, the policy's compute copies too.
    out = tmp_path / "bf16"
    launch(grpo_args(toy, out, "--shard", mode, "--dtype", "bf16", steps=3), world=2)
    rows = train_rows(out)
    assert sorted(rows) == [1, 2, 3] and all(r["loss"] == r["loss"] for r in rows.values())
    weights = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in weights.values())
