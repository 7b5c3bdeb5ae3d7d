"""scripts/check-includes on a compile_commands.json of its own: it compiles a file without CMake's
forced precompiled header (a header that must not be read is dropped), keeps any other forced
header (one that fails is kept, and the file is reported), and refuses a build directory without
commands or a file the build does not compile, naming it. The file compiled is
tests/catch_main.cpp, which needs only Catch2."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check-includes"
SOURCE = ROOT / "tests" / "catch_main.cpp"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def write_commands(build, forced_header):
    build.mkdir(exist_ok=True)
    command = (f"g++ -std=c++20 -Winvalid-pch -include {forced_header} "
               f"-o tests/catch_main.cpp.o -c {SOURCE}")
    (build / "compile_commands.json").write_text(
        json.dumps([{"directory": str(build), "command": command, "file": str(SOURCE)}]))


@pytest.fixture
def compiler():
    if shutil.which("g++") is None or not Path("/usr/include/catch2/catch.hpp").is_file():
        pytest.skip("needs g++ and Debian's catch2 headers (/usr/include/catch2)")


def test_the_precompiled_header_is_dropped(tmp_path, compiler):
    pch_dir = tmp_path / "CMakeFiles" / "rqat_pch.dir"
    pch_dir.mkdir(parents=True)
    pch = pch_dir / "cmake_pch.hxx"
    pch.write_text('#error "the forced precompiled header was read"\n')
    write_commands(tmp_path / "build", pch)
    result = run("--build-dir", tmp_path / "build", "--jobs", 1)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 of 1 files compile on their own, 0 do not" in result.stdout


def test_another_forced_header_stays_and_a_failure_is_named(tmp_path, compiler):
    other = tmp_path / "other.h"
    other.write_text('#error "a header the command forces"\n')
    write_commands(tmp_path / "build", other)
    result = run("--build-dir", tmp_path / "build", SOURCE)
    assert result.returncode == 1
    assert "FAILED: tests/catch_main.cpp" in result.stdout
    assert "a header the command forces" in result.stdout
    assert "0 of 1 files compile on their own, 1 do not" in result.stdout


def test_bad_input_is_refused_with_its_name(tmp_path):
    result = run("--build-dir", tmp_path / "nowhere")
    assert result.returncode == 1
    assert "compile_commands.json: missing" in result.stderr
    write_commands(tmp_path / "build", tmp_path / "pch.hxx")
    result = run("--build-dir", tmp_path / "build", ROOT / "lib" / "pch.cpp")
    assert result.returncode == 1
    assert "not compiled by the build" in result.stderr and "pch.cpp" in result.stderr
    result = run("--build-dir", tmp_path / "build", "--jobs", 0)
    assert result.returncode == 1
    assert "--jobs" in result.stderr
