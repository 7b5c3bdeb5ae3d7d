"""rqat's TensorBoard event files (lib/io/tensorboard_events.h) read by the tensorboard package itself.

The Catch2 binary test_tensorboard_events writes a fixed file when RQAT_TB_FIXTURE_DIR is set (its "[fixture]"
case: train/loss at steps 0..9, eval/accuracy every third step and at 2^41, a markdown text "samples" at step 5).
Here:
  - tensorboard's record reader (the stub PyRecordReader that RawEventFileLoader uses without TensorFlow) reads
    every record with both CRCs checked, and fails on a copy with one flipped byte (so the check is live);
  - every record parses as tensorboard's Event proto and serializes back to the very same bytes;
  - EventAccumulator (what `tensorboard --logdir` loads, size guidance 0: keep everything) finds file_version 2,
    every scalar's steps, wall times and values (float32: equal to numpy.float32 of the formula) and the text;
  - plugin_event_accumulator (the data path of the current TensorBoard server) files the values under the
    scalars and text plugins.
Needs the test binary: $RQAT_TEST_BIN_DIR (default build/tests); skips with a message when it is absent.
Run: .venv/bin/python -m pytest -q tests/python/test_tensorboard_events.py
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

tensorboard = pytest.importorskip(
    "tensorboard", reason="the tensorboard package (pip, scripts/requirements-test.txt) is the reader checked against")
from tensorboard.backend.event_processing import event_accumulator, event_file_loader  # noqa: E402
from tensorboard.backend.event_processing import plugin_event_accumulator  # noqa: E402
from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.compat.tensorflow_stub import errors as stub_errors  # noqa: E402
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as stub  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("RQAT_TEST_BIN_DIR", ROOT / "build" / "tests")) / "test_tensorboard_events"
TIMEOUT_S = 120

# The fixture's contents, as the C++ "[fixture]" case writes them (doubles, rounded to float32 in the file).
LOSS = {s: (3.0 / (s + 1.0) + 0.25, 1.7e9 + s) for s in range(10)}
ACCURACY = {s: ((s + 1.0) / 12.0, 1.7e9 + s + 0.5) for s in range(0, 10, 3)}
ACCURACY[2**41] = (-0.125, 1.7e9 + 100)
TEXT = "**Q:** 2+2?\n\n**A:** 4 \u2713\nna\u00efve \u65e5\u672c"
TEXT_STEP, TEXT_WALL_TIME = 5, 1.7e9 + 5 + 0.75


@pytest.fixture(scope="module")
def event_file(tmp_path_factory):
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"SKIPPED: {BIN} is not built (cmake --build build --target test_tensorboard_events)")
    out = tmp_path_factory.mktemp("tensorboard")
    r = subprocess.run([str(BIN), "[fixture]"], capture_output=True, text=True, timeout=TIMEOUT_S,
                       env={**os.environ, "RQAT_TB_FIXTURE_DIR": str(out)})
    assert r.returncode == 0, f"{BIN} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    files = list(out.iterdir())
    assert len(files) == 1, files
    return files[0]


def raw_records(path):
    """Every record through tensorboard's own TFRecord reader, both CRCs checked (raises DataLossError)."""
    reader = stub.PyRecordReader_New(str(path))
    records = []
    while True:
        try:
            reader.GetNext()
        except stub_errors.OutOfRangeError:
            return records
        records.append(reader.record())


def test_file_name(event_file):
    # TensorBoard needs only "tfevents" in the name; rqat follows its own writer's pattern.
    assert re.fullmatch(r"events\.out\.tfevents\.\d{10}\..+\.\d+\.\d+", event_file.name)


def test_records_pass_tensorboard_crc_checks(event_file, tmp_path):
    records = raw_records(event_file)
    assert len(records) == 1 + len(LOSS) + len(ACCURACY) + 1
    # RawEventFileLoader stops silently at a damaged record: the same count means none was.
    assert len(list(event_file_loader.RawEventFileLoader(str(event_file)).Load())) == len(records)

    damaged = tmp_path / event_file.name
    shutil.copy(event_file, damaged)
    data = bytearray(damaged.read_bytes())
    data[-6] ^= 0x40  # inside the last record's Event
    damaged.write_bytes(bytes(data))
    with pytest.raises(stub_errors.DataLossError, match="crc32"):
        raw_records(damaged)


def test_records_are_canonical_event_protos(event_file):
    records = raw_records(event_file)
    events = [event_pb2.Event.FromString(r) for r in records]
    for raw, event in zip(records, events):
        assert event.SerializeToString() == raw, event
    assert events[0].file_version == "brain.Event:2"
    assert not events[0].HasField("summary")
    for event in events[1:]:
        assert event.WhichOneof("what") == "summary"
        assert len(event.summary.value) == 1


def test_event_accumulator_reads_scalars_and_text(event_file):
    guidance = {key: 0 for key in event_accumulator.DEFAULT_SIZE_GUIDANCE}
    acc = event_accumulator.EventAccumulator(str(event_file.parent), size_guidance=guidance)
    acc.Reload()
    assert acc.file_version == 2.0
    tags = acc.Tags()
    assert sorted(tags[event_accumulator.SCALARS]) == ["eval/accuracy", "train/loss"]
    assert tags[event_accumulator.TENSORS] == ["samples"]

    for tag, expected in (("train/loss", LOSS), ("eval/accuracy", ACCURACY)):
        scalars = acc.Scalars(tag)
        assert [e.step for e in scalars] == sorted(expected), tag
        for e in scalars:
            value, wall_time = expected[e.step]
            assert e.value == np.float32(value), (tag, e.step)
            assert e.wall_time == wall_time, (tag, e.step)

    [text] = acc.Tensors("samples")
    assert (text.step, text.wall_time) == (TEXT_STEP, TEXT_WALL_TIME)
    array = tensor_util.make_ndarray(text.tensor_proto)
    assert array.shape == ()
    assert array.item().decode("utf-8") == TEXT
    assert acc.SummaryMetadata("samples").plugin_data.plugin_name == "text"
    assert "samples" in acc.PluginTagToContent("text")


def test_tensorboard_server_data_path(event_file):
    acc = plugin_event_accumulator.EventAccumulator(
        str(event_file.parent), size_guidance={plugin_event_accumulator.TENSORS: 0})
    acc.Reload()
    assert set(acc.ActivePlugins()) == {"scalars", "text"}
    assert sorted(acc.PluginTagToContent("scalars")) == ["eval/accuracy", "train/loss"]
    loss = acc.Tensors("train/loss")
    assert [e.step for e in loss] == sorted(LOSS)
    for e in loss:
        assert tensor_util.make_ndarray(e.tensor_proto).item() == np.float32(LOSS[e.step][0])
    [text] = acc.Tensors("samples")
    assert tensor_util.make_ndarray(text.tensor_proto).item().decode("utf-8") == TEXT
