"""Run TensorFlow on tcmalloc: find the library, preload it by re-executing the process.

TensorFlow on CPU allocates and frees large tensor buffers at every step. glibc's malloc
gives large freed blocks back to the kernel, and the next step faults their pages in
again: on a 2-core AVX2 EPYC half of a training step's CPU time went to the kernel (92,000
page faults a second). tcmalloc keeps freed memory for reuse; preloaded, a `tiny`
25,000-token training step ran 2.67x faster (see docs/guides/performance.md).

The allocator is chosen when the process starts: a library loaded later cannot replace the
`malloc` Python and TensorFlow already use. So `preload_allocator()`, called at the top of
a program before TensorFlow, JAX or PyTorch is imported, re-executes the process (same PID,
same arguments) with the library in `LD_PRELOAD`. The `keras-transformer` command does
this itself. Linux only; elsewhere, and where the library is not installed, it does nothing.

`KT_ALLOCATOR` chooses: unset or `tcmalloc` (the default), `system` (no re-execution), or
the path of another allocator's shared library, such as jemalloc's `libjemalloc.so.2`.

This module imports only the standard library (not Keras, not TensorFlow), so it can run
before them.

Example (a script's first lines; `running_allocator()` names what serves `malloc`):
>>> from keras_transformer.allocator import preload_allocator, running_allocator
>>> preload_allocator()  # doctest: +SKIP
>>> running_allocator() in {"tcmalloc", "jemalloc", "mimalloc", "glibc", "musl", "system"}
True
"""

import ctypes
import ctypes.util
import os
import platform
import sys

ENVIRONMENT_VARIABLE = "KT_ALLOCATOR"
# Set in the re-executed process: it never re-executes again.
PRELOADED_VARIABLE = "KT_ALLOCATOR_PRELOADED"
# Debian/Ubuntu: libtcmalloc-minimal4; RHEL/Fedora: gperftools-libs. The minimal library
# has no heap profiler, which is all we want.
TCMALLOC_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
# gperftools prints a line for every allocation over 1 GiB unless this is raised.
_QUIET_TCMALLOC = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)}


def find_tcmalloc():
    """The path (or, found by `ctypes.util.find_library`, the name) of tcmalloc, or `None`.

    Looks in this system's multiarch library folders (`/usr/lib/x86_64-linux-gnu` on
    Debian and Ubuntu), `/usr/lib64` (RHEL, Fedora), `/usr/lib` and `/usr/local/lib`.

    Example:
    >>> find_tcmalloc() is None or "tcmalloc" in find_tcmalloc()
    True
    """
    multiarch = getattr(sys.implementation, "_multiarch", None)
    multiarch = multiarch or f"{platform.machine()}-linux-gnu"
    folders = (f"/usr/lib/{multiarch}", f"/lib/{multiarch}", "/usr/lib64", "/usr/lib",
               "/usr/local/lib")
    for name in TCMALLOC_NAMES:
        for folder in folders:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                return path
    return ctypes.util.find_library("tcmalloc_minimal")


def allocator_library(environ=None):
    """The library `KT_ALLOCATOR` asks for (tcmalloc by default), or `None`.

    `None` for `system`, where tcmalloc is not found and where a path given does not exist.
    Any other value is a library's path or file name, as `LD_PRELOAD` takes it.

    Example:
    >>> allocator_library({"KT_ALLOCATOR": "system"}) is None
    True
    >>> allocator_library({"KT_ALLOCATOR": "libjemalloc.so.2"})
    'libjemalloc.so.2'
    """
    environ = os.environ if environ is None else environ
    choice = environ.get(ENVIRONMENT_VARIABLE, "").strip() or "tcmalloc"
    if choice == "system":
        return None
    if choice == "tcmalloc":
        return find_tcmalloc()
    return choice if "/" not in choice or os.path.isfile(choice) else None


def allocator_name(path):
    """A short name for the library at `path`: `tcmalloc`, `jemalloc`, `glibc`, ...

    Example:
    >>> allocator_name("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10")
    'tcmalloc'
    >>> allocator_name("/usr/lib/x86_64-linux-gnu/libc.so.6")
    'glibc'
    """
    base = os.path.basename(path or "")
    for name in ("tcmalloc", "jemalloc", "mimalloc", "musl"):
        if name in base:
            return name
    if base.startswith(("libc.so", "libc-")):
        return "glibc"
    return base or "system"


def allocator_in_maps(maps, address):
    """The allocator whose mapping in `maps` (a `/proc/PID/maps` text) holds `address`.

    Example:
    >>> maps = ("7f0000000000-7f0000100000 r-xp 00000000 08:01 11 /usr/lib/libc.so.6\\n"
    ...         "7f0000200000-7f0000240000 r-xp 00000000 08:01 12 "
    ...         "/usr/lib/libtcmalloc_minimal.so.4.5.10\\n")
    >>> allocator_in_maps(maps, 0x7f0000210000), allocator_in_maps(maps, 0x7f0000000010)
    ('tcmalloc', 'glibc')
    """
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue
        start, end = (int(bound, 16) for bound in fields[0].split("-"))
        if start <= address < end:
            return allocator_name(fields[5].strip())
    return "system"


def running_allocator():
    """The allocator serving this process's `malloc`, read from `/proc/self/maps`.

    `"system"` where there is no `/proc` (not Linux). For logs and `config.json`.

    Example (`LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4` gives
    `tcmalloc`):
    >>> running_allocator() in {"tcmalloc", "glibc", "system"}
    True
    """
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as file:
            maps = file.read()
        # The first `malloc` in the global symbol scope: a preloaded library's, if any.
        address = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return "system"
    return allocator_in_maps(maps, address)


def preload_environment(environ, library, running, system="linux", interactive=False):
    """The environment to re-execute with so that `library` serves `malloc`, or `None`.

    `None` (run as is) outside Linux, in an interactive session, where `library` is `None`
    (`KT_ALLOCATOR=system`, or nothing installed), in a process that was already
    re-executed, and where an allocator other than the C library's already runs (the
    requested one, or one the user preloaded). An existing `LD_PRELOAD` is kept, after
    `library`.

    Example:
    >>> env = preload_environment({"LD_PRELOAD": "/opt/libother.so"},
    ...                           "/usr/lib/libtcmalloc_minimal.so.4", running="glibc")
    >>> env["LD_PRELOAD"]
    '/usr/lib/libtcmalloc_minimal.so.4:/opt/libother.so'
    >>> preload_environment(env, "/usr/lib/libtcmalloc_minimal.so.4", running="glibc") is None
    True
    """
    if (not system.startswith("linux") or interactive or not library
            or PRELOADED_VARIABLE in environ or running not in ("glibc", "musl", "system")):
        return None
    child = dict(environ)
    preloads = [entry for entry in environ.get("LD_PRELOAD", "").replace(" ", ":").split(":")
                if entry and entry != library]
    child["LD_PRELOAD"] = ":".join([library] + preloads)
    child[PRELOADED_VARIABLE] = library
    if allocator_name(library) == "tcmalloc":
        child.update({key: value for key, value in _QUIET_TCMALLOC.items()
                      if key not in environ})
    return child


def preload_allocator():
    """Re-executes this process with tcmalloc (or `KT_ALLOCATOR`'s library) preloaded.

    Call it first thing in a program, before TensorFlow, JAX or PyTorch is imported: the
    process restarts from its first line with the same PID, arguments and environment
    (plus `LD_PRELOAD`), and the call returns at once in the restarted process. It returns
    without doing anything where `preload_environment` says so.

    Example (the first lines of `my_script.py`):
    >>> from keras_transformer.allocator import preload_allocator
    >>> preload_allocator()  # doctest: +SKIP
    >>> import keras  # doctest: +SKIP
    """
    # A session (a prompt, a notebook's kernel) would lose its state.
    interactive = bool(sys.flags.interactive or hasattr(sys, "ps1")
                       or "ipykernel" in sys.modules or not getattr(sys, "orig_argv", None))
    environ = preload_environment(os.environ, allocator_library(),
                                  running_allocator(), sys.platform, interactive)
    if environ is None:
        return
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environ)
