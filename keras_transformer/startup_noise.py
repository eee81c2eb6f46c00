"""Drop the frameworks' start-up log lines (and XLA's first-compile notices) from the
command line's stderr.

TensorFlow's C++ runtime writes lines such as `I0000 ... port.cc:153] oneDNN custom
operations are on` and `E0000 ... failed call to cuInit` straight to file descriptor 2,
some before `TF_CPP_MIN_LOG_LEVEL` is read, so no Python logging setting reaches them.
`filter_startup_noise()` routes descriptor 2 through a thread that drops those known
lines and passes everything else on at once (progress bars included).
`KT_FRAMEWORK_LOGS=1` keeps them.

Example:
>>> is_startup_noise("I0000 00:00:1796406353.811844   23734 cudart_stub.cc:31] Could not "
...                  "find cuda drivers on your machine, GPU will not be used.")
True
>>> is_startup_noise("I0000 00:00:1796458551.852316   29191 dump_mlir_util.cc:269] "
...                  "disabling MLIR crash reproducer")
True
>>> is_startup_noise("keras-transformer: error: train.tsv is missing")
False
"""

import atexit
import os
import re
import sys
import threading

# Known start-up messages on machines without a GPU, by source file.
_NOISE = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|[IWE]\d{4} [\d:.]+ +\d+ (port\.cc|cudart_stub\.cc|cuda_platform\.cc|"
    rb"cpu_feature_guard\.cc|cuda_dnn\.cc|cuda_blas\.cc|cuda_fft\.cc|cuda_executor\.cc)"
    rb"|[IWE]\d{4} [\d:.]+ +\d+ util\.cc:\d+\] oneDNN supports"
    # XLA's notices when it first compiles (generation), at info level.
    rb"|I\d{4} [\d:.]+ +\d+ (service\.cc|dump_mlir_util\.cc|device_compiler\.h):"
    rb"|To enable the following instructions: .*rebuild TensorFlow)"
)
# What a partial line may be when it could still become one of those.
_PREFIX = re.compile(rb"^(W|WA|WAR|WARN|WARNI|WARNIN|WARNING|WARNING:.*|[IWE]\d{0,4}( .*)?"
                     rb"|To .*)$")


def is_command_line(sys_module):
    """Whether this process is `keras-transformer ...` or `python -m keras_transformer.cli`.

    Example:
    >>> import types
    >>> is_command_line(types.SimpleNamespace(argv=["/usr/bin/keras-transformer", "train"],
    ...                                       orig_argv=["python3", "keras-transformer"]))
    True
    """
    if os.path.basename(sys_module.argv[0]) == "keras-transformer":
        return True
    orig = list(getattr(sys_module, "orig_argv", []))
    pairs = zip(orig, orig[1:], strict=False)
    return any(a == "-m" and b == "keras_transformer.cli" for a, b in pairs)


def is_startup_noise(line):
    """Whether one stderr line (str or bytes) is a known framework start-up message."""
    if isinstance(line, str):
        line = line.encode("utf-8", errors="replace")
    return bool(_NOISE.match(line))


_active = False


def filter_startup_noise():
    """Route file descriptor 2 through the filter for the rest of the process (once)."""
    global _active
    if _active or os.environ.get("KT_FRAMEWORK_LOGS") == "1":
        return
    _active = True
    try:
        sys.stderr.flush()
        original = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
    except OSError:  # no real descriptor 2 (an embedding host): leave stderr alone
        return
    thread = threading.Thread(target=_pump, args=(read_end, original), daemon=True)
    thread.start()

    def restore():
        sys.stderr.flush()
        os.dup2(original, 2)  # closes the pipe's last write end: the pump drains and ends
        thread.join(timeout=5)

    atexit.register(restore)


def _pump(read_end, original):
    pending = b""
    while True:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        out = b"".join(line + b"\n" for line in lines if not _NOISE.match(line))
        # A partial line that cannot start a noise line goes on now (progress bars).
        if pending and not _PREFIX.match(pending):
            out, pending = out + pending, b""
        if out:
            os.write(original, out)
    if pending and not _NOISE.match(pending):
        os.write(original, pending)
