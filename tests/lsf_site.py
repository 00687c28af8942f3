"""What the tests of LSF's commands share: a cluster serving with a scheduler and workers, a site
(that cluster, LSF's commands on PATH, a home that nobody may use too), and the local time zone
pinned (LSF prints local times)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import NOBODY, nobody_cli_env, wait_until

from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers
from xce import lsf_bin, slurm_bin
from xce.v1 import api_pb2 as api

SUBMITTED = re.compile(r"^Job <(\d+)> is submitted to (default )?queue <(\w+)>\.$")


@contextmanager
def serving(cluster: LocalCluster, workers: Sequence[tuple[str, int]] = (("w1", 4), ("w2", 4))
            ) -> Iterator[LocalWorkers]:
    """`cluster` started with a scheduler and these workers (name, slots), joined; all stopped after."""
    fleet = LocalWorkers(cluster)
    scheduler = LocalScheduler(cluster)
    try:
        cluster.start()
        cluster.leader()
        for name, slots in workers:
            fleet.start(name, slots)
        scheduler.start()
        with cluster.client() as client:
            wait_until(lambda: {h.spec.name for h in client.list_hosts().hosts if h.status == api.HOST_OK}
                       >= {name for name, _ in workers}, "the workers joined")
        yield fleet
    finally:
        scheduler.kill()
        fleet.stop()
        cluster.stop()


@dataclass
class Site:
    cluster: LocalCluster
    home: Path
    bin: str
    nobody_env: dict[str, str]

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XCE_", "LSB_"))}
        return {**env, "XCE_DATA": str(self.cluster.data), "PATH": f"{self.bin}:{env.get('PATH', '')}",
                "HOME": str(self.home / "shared"), **extra}

    def lsf(self, line: str, stdin: str | None = None, env: dict[str, str] | None = None,
            as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
        """A shell line, as a user types it (quotes, redirections), with LSF's commands on PATH; as
        nobody, its words run by setpriv (the interpreter may live under a home only root may search,
        which a shell as nobody cannot start it from)."""
        if as_nobody:
            return subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
                                   "--clear-groups", *shlex.split(line)], capture_output=True, text=True,
                                  cwd=self.home / "shared", timeout=120, env=self.nobody_env)
        return subprocess.run(["/bin/sh", "-c", line], input=stdin, capture_output=True, text=True,
                              cwd=self.home / "shared", timeout=120, env=env or self.env())

    def submit(self, line: str, stdin: str | None = None, env: dict[str, str] | None = None,
               as_nobody: bool = False) -> int:
        result = self.lsf(line, stdin, env, as_nobody)
        assert result.returncode == 0, result.stderr
        found = SUBMITTED.match(result.stdout.strip())
        assert found, result.stdout
        return int(found[1])

    def finished(self, job: int | str) -> api.Job:
        with self.cluster.client() as client:
            return wait_until(lambda: (j := client.get_job(str(job))).state in (api.DONE, api.EXIT) and j,
                              f"job {job} finished", timeout_s=90)


@contextmanager
def site(extra_config: str, workers: Sequence[tuple[str, int]] = (("w1", 4), ("w2", 4))) -> Iterator[Site]:
    """A cluster in a /tmp home of its own (0711: nobody passes through to its shared directory),
    serving with `workers`; LSF's commands made; nobody's environment with a token of its own. The
    home is removed after the cluster stopped."""
    home = Path(tempfile.mkdtemp(prefix="xce-lsf-", dir="/tmp"))
    home.chmod(0o711)
    (home / "shared").mkdir(mode=0o777)
    (home / "shared").chmod(0o777)
    cluster = LocalCluster(home / "cluster", extra_config=extra_config)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, home, ignore_errors=True)  # after the cluster stopped
        cleanup.enter_context(serving(cluster, workers))
        made = subprocess.run([sys.executable, "-m", "cli", "lsf-path"], capture_output=True, text=True,
                              check=True).stdout.strip()
        assert made == lsf_bin.bin_dir()
        nobody = nobody_cli_env(cluster, home / "shared") | {"XCE_TOKEN": cluster.new_token("nobody", "user")}
        nobody["PATH"] = f"{made}:{nobody['PATH']}"
        yield Site(cluster, home, made, nobody)


@pytest.fixture
def utc() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ")
    else:
        os.environ["TZ"] = before
    time.tzset()


def slurm_environment(monkeypatch: pytest.MonkeyPatch, cluster: LocalCluster, tmp_path: Path) -> None:
    """Slurm's commands on PATH for `cluster`, in `tmp_path`, with no Slurm input variable of the
    caller's (SBATCH_*, SQUEUE_*, ...) reaching them."""
    monkeypatch.setenv("PATH", f"{slurm_bin.ensure()}:{os.environ['PATH']}")
    monkeypatch.setenv("XCE_DATA", str(cluster.data))
    monkeypatch.delenv("XCE_CONTROLLERS", raising=False)
    for name in [name for name in os.environ if name.startswith(("SLURM_", "SBATCH_", "SQUEUE_", "SACCT_"))]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
