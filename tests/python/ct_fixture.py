"""tests/write_compressed_tensors_fixture (built with the tests, beside RQAT_BIN's tools): a tiny model's
compressed-tensors export in a scheme, for the tests that read exports with compressed-tensors and transformers."""

import os
import pathlib

import pytest


def fixture_program(rqat_bin):
    """The fixture program's path; skips the calling test module when it is not built."""
    program = pathlib.Path(rqat_bin).resolve().parent.parent / "tests" / "write_compressed_tensors_fixture"
    if not os.access(program, os.X_OK):
        pytest.skip(f"{program} is not built (cmake --build build --target rqat_tests)", allow_module_level=True)
    return program
