"""A cluster's own commands, run for a caller: as the caller's account (`run_as_caller`: the gateway
runs as root and becomes the user with setpriv, groups and all, so the cluster decides as it would at
that user's shell), or as the gateway's own account for that account's user alone (the gateway
must not lend its account to anyone else). Also the end of a job's output file, read the same way,
where the gateway shares the cluster's file system."""

from __future__ import annotations

import getpass
import os
import pwd
import subprocess
from collections.abc import Mapping, Sequence

from gateway.clusters.backend import Caller, Output
from gateway.problems import Problem


class Commands:
    def __init__(self, cluster: str, bin_dir: str = "", env: Mapping[str, str] | None = None,
                 run_as_caller: bool = False, timeout_s: float = 30.0) -> None:
        self.cluster = cluster
        self.bin_dir = bin_dir
        self.env = dict(env or {})
        self.run_as_caller = run_as_caller
        self.timeout_s = timeout_s

    def run(self, caller: Caller | None, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """`argv` as the caller (None: as the gateway, for its health checks); a command that does not
        answer within timeout_s is a 504."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **self.env}
        if self.bin_dir:
            env["PATH"] = f"{self.bin_dir}:{env['PATH']}"
        words = list(argv)
        if caller is not None:
            words = self._as(caller, words, env)
        try:
            return subprocess.run(words, env=env, capture_output=True, text=True, timeout=self.timeout_s,
                                  stdin=subprocess.DEVNULL, cwd="/")
        except subprocess.TimeoutExpired:
            raise Problem(504, f"cluster {self.cluster}: {argv[0]} did not answer in "
                               f"{self.timeout_s:.0f} s") from None
        except OSError as exc:
            raise Problem(503, f"cluster {self.cluster}: cannot run {argv[0]}: {exc.strerror}") from None

    def _as(self, caller: Caller, words: list[str], env: dict[str, str]) -> list[str]:
        if not self.run_as_caller:
            if caller.user != getpass.getuser():
                raise Problem(403, f"cluster {self.cluster} runs its commands as {getpass.getuser()}, not "
                                   f"as {caller.user} (run_as_caller is off)", "PERMISSION_DENIED")
            return words
        try:
            account = pwd.getpwnam(caller.user)
        except KeyError:
            raise Problem(403, f"cluster {self.cluster}: {caller.user} has no account on the gateway's "
                               "host", "PERMISSION_DENIED") from None
        if account.pw_uid == 0:  # the gateway's own power: lent to nobody
            raise Problem(403, f"cluster {self.cluster}: the gateway does not run commands as root",
                          "PERMISSION_DENIED")
        env.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name)
        return ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups", "--",
                *words]

    def tail(self, caller: Caller, path: str, tail: int, host: str) -> Output:
        """The last `tail` bytes of `path` and its size, read as the caller."""
        size = self.run(caller, ["stat", "-c", "%s", "--", path])
        read = self.run(caller, ["tail", "-c", str(tail), "--", path])
        if size.returncode != 0 or read.returncode != 0:
            raise Problem(404, f"cluster {self.cluster}: cannot read {path} as {caller.user}")
        return Output(read.stdout.encode(), int(size.stdout.strip() or 0), host)

    def refusal(self, done: subprocess.CompletedProcess[str], what: str) -> Problem:
        """A command's refusal as a problem: not found 404, not allowed 403, else 400."""
        words = (done.stderr or done.stdout).strip().splitlines()
        said = words[-1] if words else f"exit {done.returncode}"
        lowered = said.lower()
        if any(w in lowered for w in ("no matching job", "not found", "illegal job id", "invalid job id")):
            status = 404
        elif any(w in lowered for w in ("permission denied", "not the owner", "access/permission")):
            status = 403
        else:
            status = 400
        return Problem(status, f"cluster {self.cluster}: {what}: {said[:500]}")


def home(user: str) -> str:
    """Where a job of `user`'s runs when the caller names no directory (its home; /tmp without one)."""
    try:
        return pwd.getpwnam(user).pw_dir
    except KeyError:
        return "/tmp"
