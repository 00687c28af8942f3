"""A real Slurm 22.05 for the tests: one slurmctld, two slurmd of two CPUs (n1, n2, partition `normal`)
and slurmrestd with JWT auth, on free loopback ports, every process in a pid namespace of its own
(tests/peers/slurm/up.sh and down.sh). `slurm_peer()` starts it and always stops it:

    with slurm_peer(tmp_path) as peer:
        token = peer.token("nobody")
        httpx.post(f"{peer.rest_url}/slurm/v0.0.38/job/submit", headers=peer.headers("nobody", token), ...)
        peer.run("squeue")

It skips the test when Slurm (slurmctld) is not installed or the tests do not run as root (slurmd runs
jobs as their users); a missing slurmrestd is installed first (scripts/install_slurmrestd.sh)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from ops.local_cluster import free_ports

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "peers" / "slurm"
SBIN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
API = "/slurm/v0.0.38"  # slurmrestd 22.05's newest OpenAPI plugin (the one up.sh loads)
LOG_LINES = 40  # of each log, in logs()
SOCKET_PATH_MAX = 90  # below sun_path's 108 bytes, for DIR/munge/munge.socket and slurmd's spool sockets


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path=SBIN_PATH)


def _reachable_by_others(path: Path) -> bool:
    """Every directory from / to `path` searchable by others (slurmrestd and the jobs run as nobody)."""
    return path.is_dir() and all(stat.S_IMODE(p.stat().st_mode) & stat.S_IXOTH for p in [path, *path.parents])


def _keep_logs(peer_dir: Path, into: Path) -> None:
    if (peer_dir / "log").is_dir():
        shutil.copytree(peer_dir / "log", into, dirs_exist_ok=True)


@dataclass(frozen=True)
class SlurmPeer:
    dir: Path                      # everything: slurm.conf, the JWT key, state, spools, log/, jobs/
    conf: Path                     # SLURM_CONF
    rest_url: str                  # http://127.0.0.1:PORT (slurmrestd, rest_auth/jwt)
    ctld_port: int
    slurmd_ports: tuple[int, ...]
    rest_port: int
    nodes: tuple[str, ...]         # n1, n2
    started_s: float               # seconds up.sh took until every daemon answered
    partition: str = "normal"      # the default (and only) partition

    @property
    def jobs_dir(self) -> Path:
        """A working directory every job's user may write in (mode 1777)."""
        return self.dir / "jobs"

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for Slurm's commands: SLURM_CONF set, no other SLURM_*/SBATCH_*/SQUEUE_*."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SINFO_", "SACCT_", "SCANCEL_"))}
        return {**env, "SLURM_CONF": str(self.conf), "PATH": f"{env.get('PATH', '')}:{SBIN_PATH}", **extra}

    def run(self, *argv: str, user: str | None = None, stdin: str | None = None, cwd: Path | None = None,
            env: Mapping[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A Slurm command (as root, or as `user` through setpriv), in jobs_dir by default; never raises
        for its exit status."""
        words = list(argv)
        if user is not None:
            entry = pwd.getpwnam(user)
            words = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
                     *words]
        return subprocess.run(words, input=stdin, capture_output=True, text=True, timeout=timeout,
                              cwd=cwd or self.jobs_dir, env=dict(env) if env is not None else self.env())

    def token(self, user: str, lifespan_s: int = 3600) -> str:
        """A JWT for `user` (`scontrol token`, which only root or SlurmUser may ask for another user)."""
        done = self.run("scontrol", "token", f"username={user}", f"lifespan={lifespan_s}")
        if done.returncode != 0 or not done.stdout.startswith("SLURM_JWT="):
            raise RuntimeError(f"scontrol token failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done.stdout.strip().removeprefix("SLURM_JWT=")

    def headers(self, user: str, token: str | None = None) -> dict[str, str]:
        """slurmrestd's JWT headers for `user` (with `token`, else a fresh token of `user`'s own)."""
        return {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token or self.token(user)}

    def logs(self, lines: int = LOG_LINES) -> str:
        """The tail of every daemon's log and output, for a failure's message."""
        parts = []
        for log in sorted((self.dir / "log").glob("*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"----- {log.name} (last {len(text)} lines) -----\n" + "\n".join(text))
        return "\n".join(parts)


def _down(peer_dir: Path) -> None:
    done = subprocess.run(["bash", str(SCRIPTS / "down.sh"), str(peer_dir)], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"down.sh {peer_dir} failed: {done.stderr}{done.stdout}")


@contextmanager
def slurm_peer(tmpdir: Path | None = None, nodes: int = 2, cpus: int = 2) -> Iterator[SlurmPeer]:
    """Start a Slurm peer; stop it (every process: daemons, steps, jobs) however the body ends.

    It lives in a fresh `tmpdir`/slurm-* when nobody can reach `tmpdir` and its sockets' paths fit;
    otherwise (pytest's tmp_path is under a 0700 directory) in a fresh /tmp/xce-slurm-* removed at the
    end, whose logs are copied into `tmpdir`/slurm-logs first. Without `tmpdir`, a fresh
    /tmp/xce-slurm-*, removed."""
    if _which("slurmctld") is None or _which("slurmd") is None:
        pytest.skip("Slurm is not installed (slurmctld, slurmd: Debian's slurm-wlm)")
    if os.geteuid() != 0:
        pytest.skip("a Slurm peer needs root (slurmd runs each job as its user)")
    if _which("slurmrestd") is None:
        subprocess.run(["sh", str(ROOT / "scripts" / "install_slurmrestd.sh")], capture_output=True,
                       timeout=600)
        if _which("slurmrestd") is None:
            pytest.skip("slurmrestd is not installed and scripts/install_slurmrestd.sh could not install it")

    with ExitStack() as stack:
        own = tmpdir is None or not _reachable_by_others(tmpdir) or len(str(tmpdir)) > SOCKET_PATH_MAX - 40
        if own:
            peer_dir = Path(tempfile.mkdtemp(prefix="xce-slurm-", dir="/tmp"))
            stack.callback(shutil.rmtree, peer_dir, ignore_errors=True)
            if tmpdir is not None:  # runs before the rmtree (an ExitStack unwinds in reverse)
                stack.callback(_keep_logs, peer_dir, tmpdir / "slurm-logs")
        else:
            assert tmpdir is not None
            peer_dir = Path(tempfile.mkdtemp(prefix="slurm-", dir=tmpdir))
        stack.callback(_down, peer_dir)  # before the logs are copied and the directory removed
        for attempt in (1, 2):  # a port taken between free_ports() and the daemon's bind: once more
            ctld, rest, *slurmds = free_ports(2 + nodes)
            env = {**os.environ, "PATH": f"{os.environ.get('PATH', '')}:{SBIN_PATH}",
                   "SLURM_PEER_CPUS": str(cpus), "SLURM_PEER_CTLD_PORT": str(ctld),
                   "SLURM_PEER_REST_PORT": str(rest), "SLURM_PEER_SLURMD_PORTS": ",".join(map(str, slurmds))}
            done = subprocess.run(["bash", str(SCRIPTS / "up.sh"), str(peer_dir)], capture_output=True,
                                  text=True, env=env, timeout=180)
            if done.returncode == 0:
                break
            if attempt == 2 or "Address already in use" not in done.stderr:
                raise RuntimeError(f"the Slurm peer did not start (up.sh {peer_dir}):\n"
                                   f"{done.stdout}{done.stderr}")
            shutil.rmtree(peer_dir)  # up.sh stopped what it started; start afresh
            peer_dir.mkdir()
        lines = (peer_dir / "peer.env").read_text().splitlines()
        info = dict(line.split("=", 1) for line in lines if "=" in line)
        peer = SlurmPeer(dir=peer_dir, conf=Path(info["SLURM_CONF"]), rest_url=info["REST_URL"],
                         ctld_port=ctld, slurmd_ports=tuple(slurmds), rest_port=rest,
                         nodes=tuple(f"n{i}" for i in range(1, nodes + 1)),
                         started_s=float(info["STARTED_S"]))
        try:
            yield peer
        except Exception:
            print(peer.logs())  # in the failed test's captured output
            raise
