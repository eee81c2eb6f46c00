"""A command on glibc's malloc against tcmalloc: wall time, CPU seconds, page faults.

COMMAND runs in child processes taking turns (`common.interleaved`), on glibc
(`KT_ALLOCATOR=system`) and on tcmalloc (`LD_PRELOAD`); each child's user and system CPU
seconds, page faults and peak RSS come from `os.wait4`. `{tmp}` in COMMAND is a fresh
folder every run. Prints the medians as a table; every run goes to `--output`.

    python benchmarks/allocator.py --repeats 3 -- keras-transformer train \\
        --data runs/demo/data --output {tmp} --preset tiny --max-steps 20 \\
        --tokens-per-batch 25000 --bleu-every 0 --checkpoint-every 1000
"""

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import interleaved, log, machine, positive_int, table  # noqa: E402

ALLOCATORS = ("glibc", "tcmalloc")
FIGURES = ("wall_s", "user_s", "system_s", "minor_faults", "major_faults", "max_rss_mib")


def allocator_module():
    """`keras_transformer/allocator.py` on its own: the package would load Keras here."""
    path = os.path.join(os.path.dirname(HERE), "keras_transformer", "allocator.py")
    spec = importlib.util.spec_from_file_location("allocator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def environment(allocator, library):
    """This environment for a child on `allocator` (`glibc` or `tcmalloc` at `library`)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("LD_PRELOAD", "KT_ALLOCATOR", "KT_ALLOCATOR_PRELOADED")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if allocator == "glibc":  # KT_ALLOCATOR=system: the command does not restart itself
        return {**env, "KT_ALLOCATOR": "system"}
    return {**env, "LD_PRELOAD": library,
            "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)}


def run_once(command, env, log_file):
    """One child run: its figures (a dict of `FIGURES`), or a `RuntimeError`."""
    folder = tempfile.mkdtemp(prefix="allocator-bench-")
    try:
        argv = [part.replace("{tmp}", os.path.join(folder, "out")) for part in command]
        start = time.perf_counter()
        with open(log_file, "a") as output:
            child = subprocess.Popen(argv, env=env, stdout=output, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if child.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited with {child.returncode}; see {log_file}")
    return {"wall_s": wall, "user_s": usage.ru_utime, "system_s": usage.ru_stime,
            "minor_faults": usage.ru_minflt, "major_faults": usage.ru_majflt,
            "max_rss_mib": usage.ru_maxrss / 1024}


def report(runs, info, command):
    """Markdown lines: the machine, the command, the medians and the glibc/tcmalloc ratio."""
    medians = {name: {figure: statistics.median(run[figure] for run in rows)
                      for figure in FIGURES} for name, rows in runs.items()}
    rows = [[name, len(runs[name]), f"{m['wall_s']:.2f}", f"{m['user_s']:.2f}",
             f"{m['system_s']:.2f}", f"{m['minor_faults']:,.0f}", f"{m['major_faults']:,.0f}",
             f"{m['max_rss_mib']:,.0f}"] for name, m in medians.items()]
    lines = [f"CPU: {info['cpu']} ({info['cores']} CPUs, avx512_bf16: {info['avx512_bf16']}, "
             f"amx_bf16: {info['amx_bf16']}), {info['date']}", f"Command: `{shlex.join(command)}`",
             ""]
    lines += table(["allocator", "runs", "wall s", "user CPU s", "system CPU s",
                    "minor faults", "major faults", "peak RSS MiB"], rows)
    speedup = medians["glibc"]["wall_s"] / medians["tcmalloc"]["wall_s"]
    lines += ["", f"Speed-up with tcmalloc (median wall time, glibc / tcmalloc): {speedup:.2f}x"]
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="runs per allocator, taking turns (default: 3)")
    parser.add_argument("--output", default="runs/bench/allocator.json",
                        help="every run's figures and the machine, as JSON")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command after `--`; {tmp} is a fresh folder each run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after `--`")
    if shutil.which(command[0]) is None:  # the venv's console script, when not on PATH
        beside = os.path.join(os.path.dirname(sys.executable), command[0])
        command[0] = beside if os.path.exists(beside) else command[0]
    library = allocator_module().find_tcmalloc()
    if library is None:
        parser.error("tcmalloc is not installed: apt-get install libtcmalloc-minimal4")

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    log_file = os.path.splitext(args.output)[0] + ".log"
    open(log_file, "w").close()

    def run(name):
        figures = run_once(command, environment(name, library), log_file)
        log(f"{name}: {figures['wall_s']:.2f} s wall, {figures['system_s']:.2f} s system, "
            f"{figures['minor_faults']:,} minor faults")
        return figures

    runs = interleaved(ALLOCATORS, run, args.repeats)
    info = machine()
    print("\n".join(report(runs, info, command)))
    with open(args.output, "w") as file:
        json.dump({"machine": info, "command": command, "library": library, "runs": runs},
                  file, indent=2)


if __name__ == "__main__":
    main()
