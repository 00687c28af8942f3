"""Where LSF's commands live: a bin directory of their own, never on PATH unless a site puts it there.

XCE's `bsub`, `bjobs`, ... are small scripts in `<prefix>/share/xce/lsf/bin`
(the interpreter's prefix: the project's virtual environment), made on first
use by `xce lsf-path` and by each worker (which names it to jobs as
LSF_BINDIR, so `blaunch` resolves inside a job). They are not console
scripts in the environment's bin: a real LSF on the same machine is never
shadowed by accident. Beside it, `conf/lsf.conf` says what LSF's tools read
from one (LSF_UNIT_FOR_LIMITS=MB: a bare `bsub -M 4000` is 4000 MB), and
`conf/profile.lsf` sets PATH, LSF_BINDIR and LSF_ENVDIR as LSF's own does.
"""

from __future__ import annotations

import os
import sys

# The LSF commands there: each runs cli/lsf/<module>.py's `main` (cli/lsf/entry.py).
COMMANDS = ("bsub", "bjobs", "bkill", "bstop", "bresume", "brequeue", "bpeek", "bqueues", "bhosts", "bhist",
            "lsid", "lsclusters", "badmin", "blaunch", "bmod", "bswitch", "brun", "lshosts", "lsload",
            "bmgroup", "bresources", "blimits", "bacct", "btop", "bbot", "bgadd", "bgmod", "bgdel",
            "bjgroup", "bugroup", "brsvadd", "brsvdel", "brsvs")
LSF_CONF = "# XCE's LSF commands (xce/lsf_bin.py): what LSF's tools read from lsf.conf\n" \
           "LSF_UNIT_FOR_LIMITS=MB\nLSF_VERSION=10.1\n"


def lsf_dir(prefix: str | None = None) -> str:
    return os.path.join(prefix or sys.prefix, "share", "xce", "lsf")


def bin_dir(prefix: str | None = None) -> str:
    return os.path.join(lsf_dir(prefix), "bin")


def script(command: str, interpreter: str) -> str:
    return (f"#!{interpreter}\n# XCE's {command} (xce/lsf_bin.py): LSF's command over an XCE cluster\n"
            f"from cli.lsf.entry import main\nmain({command!r})\n")


def profile(base: str) -> str:
    return (f"# . this file to use XCE's LSF commands, as LSF's own profile.lsf\n"
            f"LSF_BINDIR={base}/bin\nLSF_ENVDIR={base}/conf\nexport LSF_BINDIR LSF_ENVDIR\n"
            f'case ":$PATH:" in *":$LSF_BINDIR:"*) ;; *) PATH="$LSF_BINDIR:$PATH"; export PATH;; esac\n')


def ensure(prefix: str | None = None, interpreter: str | None = None) -> str:
    """The bin directory, its scripts written (or rewritten, if they name another interpreter)."""
    base = lsf_dir(prefix)
    wanted = {os.path.join(base, "bin", name): (script(name, interpreter or sys.executable), 0o755)
              for name in COMMANDS}
    wanted[os.path.join(base, "conf", "lsf.conf")] = (LSF_CONF, 0o644)
    wanted[os.path.join(base, "conf", "profile.lsf")] = (profile(base), 0o644)
    install(wanted)
    return os.path.join(base, "bin")


def install(wanted: dict[str, tuple[str, int]]) -> None:
    """Each file (path: text and mode) written unless it holds that text already; as a whole, each
    replaced at once (a command being started meanwhile reads the old file or the new one)."""
    for path, (text, mode) in wanted.items():
        try:
            with open(path, encoding="utf-8") as existing:
                if existing.read() == text:
                    continue
        except OSError:
            pass
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        partial = f"{path}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(partial, mode)
        os.replace(partial, path)
