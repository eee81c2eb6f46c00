"""`keras_transformer.allocator`: when to re-execute on tcmalloc, and what runs."""

import os
import subprocess
import sys

import pytest

from keras_transformer import allocator
from keras_transformer.allocator import (
    PRELOADED_VARIABLE,
    allocator_in_maps,
    allocator_library,
    find_tcmalloc,
    preload_environment,
    running_allocator,
)

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
MODULE = os.path.abspath(allocator.__file__)
# The module alone, loaded from its file: no Keras, so each child starts in a fraction of
# a second. It prints a line before and after the re-execution.
CHILD = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("allocator", {MODULE!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print("start", module.running_allocator(), flush=True)
module.preload_allocator()
print("running", module.running_allocator())
"""


def clean_environment(**extra):
    """This environment without a preload or an allocator choice (`make test` preloads)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("LD_PRELOAD", "KT_ALLOCATOR", PRELOADED_VARIABLE)}
    return {**env, **extra}


def test_preload_appends_to_an_existing_ld_preload_and_marks_the_child():
    env = preload_environment({"LD_PRELOAD": "/opt/a.so /opt/b.so", "HOME": "/root"},
                              TCMALLOC, running="glibc")
    assert env["LD_PRELOAD"] == f"{TCMALLOC}:/opt/a.so:/opt/b.so"
    assert env[PRELOADED_VARIABLE] == TCMALLOC and env["HOME"] == "/root"
    assert int(env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) > 1 << 30  # no report lines
    assert preload_environment({}, TCMALLOC, "glibc")["LD_PRELOAD"] == TCMALLOC


def test_a_threshold_the_user_set_is_kept_and_only_tcmalloc_gets_one():
    env = preload_environment({"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": "5"}, TCMALLOC,
                              "glibc")
    assert env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"] == "5"
    env = preload_environment({}, "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "glibc")
    assert "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD" not in env


@pytest.mark.parametrize("case", ["re-executed", "tcmalloc runs", "jemalloc runs",
                                  "no library", "macOS", "interactive"])
def test_when_nothing_is_re_executed(case):
    environ, library, running, system, interactive = {}, TCMALLOC, "glibc", "linux", False
    if case == "re-executed":  # never a loop, even where the preload did not take
        environ = {PRELOADED_VARIABLE: TCMALLOC}
    elif case == "tcmalloc runs":  # already loaded (LD_PRELOAD given by hand, make test)
        running = "tcmalloc"
    elif case == "jemalloc runs":  # the user's own preload wins
        running = "jemalloc"
    elif case == "no library":  # KT_ALLOCATOR=system, or tcmalloc not installed
        library = None
    elif case == "macOS":
        system = "darwin"
    else:
        interactive = True
    assert preload_environment(environ, library, running, system, interactive) is None


def test_allocator_library_reads_the_opt_out_and_other_libraries(tmp_path, monkeypatch):
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: TCMALLOC)
    assert allocator_library({}) == TCMALLOC
    assert allocator_library({"KT_ALLOCATOR": "tcmalloc"}) == TCMALLOC
    assert allocator_library({"KT_ALLOCATOR": "system"}) is None
    jemalloc = tmp_path / "libjemalloc.so.2"
    jemalloc.write_bytes(b"")
    assert allocator_library({"KT_ALLOCATOR": str(jemalloc)}) == str(jemalloc)
    assert allocator_library({"KT_ALLOCATOR": str(tmp_path / "missing.so")}) is None
    assert allocator_library({"KT_ALLOCATOR": "libjemalloc.so.2"}) == "libjemalloc.so.2"
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)
    assert allocator_library({}) is None


def test_find_tcmalloc_looks_in_lib64_and_falls_back_to_find_library(monkeypatch):
    monkeypatch.setattr(os.path, "isfile", lambda path: path == "/usr/lib64/libtcmalloc.so.4")
    assert find_tcmalloc() == "/usr/lib64/libtcmalloc.so.4"
    monkeypatch.setattr(os.path, "isfile", lambda path: False)
    monkeypatch.setattr(allocator.ctypes.util, "find_library",
                        lambda name: "libtcmalloc_minimal.so.4" if name == "tcmalloc_minimal"
                        else None)
    assert find_tcmalloc() == "libtcmalloc_minimal.so.4"


def test_the_allocator_is_the_library_that_holds_malloc_in_a_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "55d0c0a00000-55d0c0a2e000 r--p 00000000 08:01 1042  /usr/bin/python3.11\n"
        "7f5a10000000-7f5a10021000 rw-p 00000000 00:00 0 \n"
        "7f5a12200000-7f5a12228000 r--p 00000000 08:01 2001  /usr/lib/x86_64-linux-gnu/"
        "libc.so.6\n"
        "7f5a12228000-7f5a123bd000 r-xp 00028000 08:01 2001  /usr/lib/x86_64-linux-gnu/"
        "libc.so.6\n"
        "7f5a12600000-7f5a12640000 r-xp 00000000 08:01 3001  /usr/lib/x86_64-linux-gnu/"
        "libtcmalloc_minimal.so.4.5.10\n"
        "7ffd5c000000-7ffd5c021000 rw-p 00000000 00:00 0  [stack]\n")
    text = maps.read_text()
    assert allocator_in_maps(text, 0x7F5A12610000) == "tcmalloc"
    assert allocator_in_maps(text, 0x7F5A12300000) == "glibc"
    assert allocator_in_maps(text, 0x7F5A10000100) == "system"  # an anonymous mapping
    assert allocator_in_maps(text, 0x1000) == "system"


def test_running_allocator_here():
    expected = "tcmalloc" if "tcmalloc" in os.environ.get("LD_PRELOAD", "") else "glibc"
    assert running_allocator() == (expected if sys.platform.startswith("linux") else "system")


def run_child(env, code=CHILD, command=None):
    done = subprocess.run(command or [sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD: Linux only")
def test_a_process_re_executes_once_on_tcmalloc_and_the_opt_out_stays_on_glibc():
    if find_tcmalloc() is None:
        pytest.skip("tcmalloc is not installed here (apt-get install libtcmalloc-minimal4)")
    # Before: glibc; one re-execution (the start line twice, no more); then tcmalloc.
    assert run_child(clean_environment()) == ["start", "glibc", "start", "tcmalloc",
                                              "running", "tcmalloc"]
    assert run_child(clean_environment(KT_ALLOCATOR="system")) == [
        "start", "glibc", "running", "glibc"]
    # Preloaded by hand already (as `make test` does): nothing to do.
    assert run_child(clean_environment(LD_PRELOAD=find_tcmalloc())) == [
        "start", "tcmalloc", "running", "tcmalloc"]


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD: Linux only")
def test_the_command_runs_on_tcmalloc_unless_told_otherwise():
    command = os.path.join(os.path.dirname(sys.executable), "keras-transformer")
    if not os.path.exists(command):
        pytest.skip(f"{command} is not installed (pip install -e .)")
    if find_tcmalloc() is None:
        pytest.skip("tcmalloc is not installed here (apt-get install libtcmalloc-minimal4)")
    env = clean_environment(TF_CPP_MIN_LOG_LEVEL="2")
    assert run_child(env, command=[command, "--version"])[-1] == "tcmalloc)"
    env["KT_ALLOCATOR"] = "system"
    assert run_child(env, command=[command, "--version"])[-1] == "glibc)"
