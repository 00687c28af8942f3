"""Clock faults on real processes: one process's wall clock jumps or drifts, its monotonic clock does not.

Theory of operation. A process started with `environment(control)` runs under libfaketime (Debian's
`libfaketime`, scripts/install_faketime.sh), which fakes only the wall clock: `time.time`,
`datetime.now`, gettimeofday, time() and clock_gettime(CLOCK_REALTIME) in C (gRPC core's too);
CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW (pysyncobj's timers) and CLOCK_BOOTTIME stay true
(FAKETIME_DONT_FAKE_MONOTONIC=1). The offset is read from the file `control` and read again at most
a second later (FAKETIME_CACHE_DURATION=1), so `set_offset(control, +600)` makes every process
started with that file see its wall clock jump ten minutes ahead within a second, while it runs.
Child processes (a worker's jobs) inherit the environment, so they share their parent's clock, as
the jobs of a host with a wrong clock do.

Two waits on the monotonic clock are broken in libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC
(wolfcw/libfaketime#426): Python 3.11's `time.sleep` fails with EINVAL, and a timed wait on a
monotonic condition variable (the GIL's, gRPC core's) returns at once. soak/clockfault_fix.c passes
those two to glibc untouched; it is built here with the C compiler on first use and preloaded before
libfaketime. What is not faked (measured on Debian bookworm, Python 3.11): the time the kernel stamps
on files (a file written by a faked process has the true mtime; on a host whose clock really jumped
it would have the jumped one), and sem_clockwait (Python's Lock and Condition timeouts: monotonic, as
they should be). A drift (`drift` != 1, libfaketime's `x`) is counted from the start of the process
started with this environment, not from the call (its children inherit that start): a process that
has run T s sees offset_s + T * (drift - 1) at once, so processes started separately disagree by
their difference in age times (drift - 1); libfaketime also shortens relative sleeps (poll, select,
epoll_wait, nanosleep) by the rate. gRPC's Python layer turns a timeout into a wall-clock deadline
(time.time() + timeout) that its core turns back into a monotonic one at once, by the same faked
clock: calls keep their deadlines across jumps (measured: 1 s timeouts end after 1 s at +600, -600
and a jump during the call). FAKETIME_XRESET is not used: with it, 0.9.10 ignores a changed offset.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from soak.faultio.build import FaultioBuildError, own_dir

LIBRARY = "libfaketimeMT.so.1"  # the threaded build: it serialises its own time() bookkeeping
FIX_SOURCE = Path(__file__).with_name("clockfault_fix.c")
FIX_VERSIONS = "GLIBC_2.3.2 { global: pthread_cond_timedwait; };\n"  # the condvar call's default version
CACHE_S = 1  # libfaketime reads the control file again at most this often (whole seconds)
MAX_OFFSET_S = 10 * 365 * 86400.0


class ClockFaultError(Exception):
    pass


def available() -> str | None:
    """None if clock faults can be made here, else why not."""
    if not sys.platform.startswith("linux"):
        return "libfaketime is driven here only on Linux"
    if _library() is None:
        return f"libfaketime ({LIBRARY}) is not installed: sh scripts/install_faketime.sh"
    try:
        _fix()
    except ClockFaultError as exc:
        return str(exc)
    return None


def environment(control: Path) -> dict[str, str]:
    """The environment to add to a process's so that its wall clock follows `control`, starting at no
    offset if the file does not exist yet. Pass no FAKETIME variable of your own: it would win."""
    library = _library()
    if library is None:
        raise ClockFaultError(f"libfaketime ({LIBRARY}) is not installed")
    if not control.exists():
        set_offset(control, 0.0)
    ours = f"{_fix()}:{library}"  # the fix first: it must come before libfaketime
    given = os.environ.get("LD_PRELOAD", "")
    return {
        "LD_PRELOAD": f"{given}:{ours}" if given else ours,
        "FAKETIME_TIMESTAMP_FILE": str(control.resolve()),
        "FAKETIME_CACHE_DURATION": str(CACHE_S),
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def set_offset(control: Path, offset_s: float, drift: float = 1.0) -> None:
    """From within about a second on, the processes following `control` see the wall clock
    `offset_s` ahead (behind if negative) of the true one, running `drift` times as fast
    (1.01: 1 % fast; counted from each process's start, see the module's docstring)."""
    if not abs(offset_s) <= MAX_OFFSET_S:
        raise ValueError(f"an offset of at most {MAX_OFFSET_S:.0f} s either way")
    if not 0.5 <= drift <= 2.0:
        raise ValueError("a drift between 0.5 and 2")
    spec = f"{offset_s:+.6f}" + ("" if drift == 1.0 else f" x{drift:.9f}")
    control.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=control.parent, prefix=f".{control.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(spec + "\n")
        os.chmod(scratch, 0o644)  # jobs run as their owners read it too
        os.replace(scratch, control)  # a reader sees the old spec or the new, never half of one
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


@functools.cache
def _library() -> str | None:
    given = os.environ.get("XCE_LIBFAKETIME")
    if given:
        return given if os.path.isfile(given) else None
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for folder in (f"/usr/lib/{multiarch}/faketime", "/usr/lib/faketime", "/usr/lib64/faketime",
                   "/usr/local/lib/faketime"):
        path = os.path.join(folder, LIBRARY)
        if os.path.isfile(path):
            return path
    return None


@functools.cache
def _fix() -> str:
    """The fix library, built once per source (beside faultio's, in the environment's lib folder)."""
    source = FIX_SOURCE.read_bytes()
    digest = hashlib.sha256(source + FIX_VERSIONS.encode()).hexdigest()[:16]
    try:
        folder = own_dir(Path(sys.prefix) / "lib" / "clockfault")
    except FaultioBuildError as exc:
        raise ClockFaultError(str(exc)) from None
    built = folder / f"clockfault-fix-{digest}.so"
    if built.exists():
        return str(built)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ClockFaultError("no C compiler (cc) to build soak/clockfault_fix.c")
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        versions, out = Path(scratch) / "fix.map", Path(scratch) / "fix.so"
        versions.write_text(FIX_VERSIONS)
        done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(out), str(FIX_SOURCE),
                               "-ldl", f"-Wl,--version-script={versions}"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ClockFaultError(f"building soak/clockfault_fix.c failed: {done.stderr.strip()[-400:]}")
        out.chmod(0o755)
        os.replace(out, built)
    return str(built)
