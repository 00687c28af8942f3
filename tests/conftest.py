"""Shared fixtures: real controller processes on loopback, always stopped."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from xdist_groups import keep_groups_together, xdist_group

from client.channel import Client, XceError
from controller.store import StateStore
from ops.local_cluster import LocalCluster, LocalScheduler, LocalWorkers

ROOT = Path(__file__).resolve().parent.parent

# Heartbeats fast enough for tests to see hosts come and go in seconds.
FAST_HOSTS = "\n[hosts]\nheartbeat_s = 0.2\nheartbeat_timeout_s = 1.5\n"


LOG_LINES = 80  # of each daemon's log, printed when a test fails

T = TypeVar("T")


def wait_until(probe: Callable[[], T], what: str, timeout_s: float = 60.0, every_s: float = 0.05) -> T:
    """Poll `probe` until it returns something true, and return that; fail naming `what` after
    `timeout_s` (a deadline only a broken build reaches)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def xce_cli(cluster: LocalCluster, *args: str) -> str:
    """The `xce` command as an operator runs it on the cluster's machine ($XCE_DATA); its output.
    It must succeed."""
    env = {**os.environ, "XCE_DATA": str(cluster.data)}
    env.pop("XCE_CONTROLLERS", None)
    done = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.hookimpl(tryfirst=True)  # before -m deselects by it
def pytest_itemcollected(item: pytest.Item) -> None:
    """A test that starts a cluster is marked `cluster` whether or not its module says so: `make test`
    runs the two tiers side by side, and a cluster test in the computing tier would run at nice 10."""
    fixtures = getattr(item, "fixturenames", ())
    if "make_cluster" in fixtures:
        item.add_marker(pytest.mark.cluster)
    if group := xdist_group(item):
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)  # after -k and -m deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked slow (longer model checks and runs) wait for `make test-slow` (XCE_SLOW=1):
    `make test` stays within its budget on two cores."""
    keep_groups_together(config, items)
    selected = {item.name for item in items if item.path.name == "test_tlc.py"}
    if selected and not config.option.collectonly:
        import tlc  # the long model checks run while the other tests mostly wait on daemons

        tlc.start_ahead([key for test, key in tlc.AHEAD.items() if test in selected])
    faults = pytest.mark.skip(reason="a fault kind's soak: `make test-faults` runs it")
    for item in items:
        if "faults" in item.keywords and os.environ.get("XCE_FAULTS") != "1":
            item.add_marker(faults)
    if os.environ.get("XCE_SLOW") == "1":
        return
    later = pytest.mark.skip(reason="slow: `make test-slow` runs it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(later)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if "tlc" in sys.modules:
        sys.modules["tlc"].stop_all()  # a run ahead that no test waited for (a failure, -x, -k)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = yield
    setattr(item, f"report_{report.when}", report)  # the fixtures' teardown looks at it
    return report


def print_logs_if_failed(request: pytest.FixtureRequest, data: Path) -> None:
    """The tail of every daemon's log under `data` (replicas, workers, schedulers), if the test failed:
    the output pytest shows for the failure (captured during teardown)."""
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    for log in sorted(data.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-LOG_LINES:]
        print(f"----- {log.name} (last {len(lines)} lines) -----", *lines, sep="\n")


@pytest.fixture
def make_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[type[LocalCluster]]:
    """Build LocalClusters in the test's own directory; every one is stopped (and its daemons' logs
    printed if the test failed)."""
    started: list[LocalCluster] = []

    def build(replicas: int = 3, extra_config: str = "", name: str = "cluster",
              insecure: bool = False, cluster_id: str = "local", metrics: bool = False) -> LocalCluster:
        cluster = LocalCluster(tmp_path / name, replicas, extra_config=extra_config, insecure=insecure,
                               cluster_id=cluster_id, metrics=metrics)
        started.append(cluster)
        return cluster

    try:
        yield build  # type: ignore[misc]
    finally:
        for cluster in started:
            cluster.stop()
            print_logs_if_failed(request, cluster.data)


@pytest.fixture
def cluster(make_cluster) -> LocalCluster:  # type: ignore[no-untyped-def]
    c = make_cluster()
    c.start()
    c.leader()
    return c


@pytest.fixture
def make_fleet(make_cluster) -> Iterator[Callable[[str], tuple[LocalCluster, LocalWorkers]]]:  # type: ignore[no-untyped-def]
    """Serving clusters with their workers (started by the test); every worker is killed."""
    fleets: list[LocalWorkers] = []

    def build(extra_config: str = FAST_HOSTS) -> tuple[LocalCluster, LocalWorkers]:
        cluster = make_cluster(extra_config=extra_config)
        cluster.start()
        cluster.leader()
        fleets.append(LocalWorkers(cluster))
        return cluster, fleets[-1]

    try:
        yield build
    finally:
        for workers in fleets:
            workers.stop()


@pytest.fixture
def make_scheduled(make_fleet) -> Iterator[Callable[[str], tuple[LocalCluster, LocalWorkers]]]:  # type: ignore[no-untyped-def]
    """Serving clusters with a scheduler and workers (started by the test), of the given config."""
    schedulers: list[LocalScheduler] = []

    def build(extra_config: str) -> tuple[LocalCluster, LocalWorkers]:
        cluster, workers = make_fleet(extra_config)
        schedulers.append(LocalScheduler(cluster))
        schedulers[-1].start()
        return cluster, workers

    try:
        yield build
    finally:
        for scheduler in schedulers:
            scheduler.kill()


@pytest.fixture
def fleet(make_fleet) -> tuple[LocalCluster, LocalWorkers]:  # type: ignore[no-untyped-def]
    """A serving cluster with fast heartbeats, and its workers."""
    return make_fleet()  # type: ignore[no-any-return]


def wait_converged(cluster: LocalCluster, timeout_s: float = 20.0) -> int:
    """Wait until every running replica applied the same index; return it (before comparing stopped
    replicas' dumps: a follower may still be applying what the leader answered)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        applied = set()
        for replica_id in cluster.procs:
            try:
                with Client([cluster.address(replica_id)], cluster.credentials, deadline_s=1) as client:
                    applied.add(client.status(local_only=True).replicas[0].applied_index)
            except XceError:
                applied.add(-1)
        if len(applied) == 1 and -1 not in applied:
            return applied.pop()
        time.sleep(0.1)
    raise TimeoutError(f"replicas did not converge: {applied}")


def replica_dump(cluster: LocalCluster, replica_id: int) -> tuple[bytes, int]:
    """A stopped replica's canonical dump and applied index, read from its LMDB files."""
    store = StateStore(cluster.config.replica_dir(replica_id) / "state", cluster.config.cluster_id)
    try:
        return store.canonical_dump(), store.meta().applied_index
    finally:
        store.close()


def grant_search_to_others() -> list[tuple[Path, int]]:
    """o+x (search, not read) on the repository's parents that lack it; what was changed, to restore."""
    changed: list[tuple[Path, int]] = []
    for parent in [ROOT, *ROOT.parents]:
        mode = stat.S_IMODE(parent.stat().st_mode)
        if not mode & stat.S_IXOTH:
            changed.append((parent, mode))
            parent.chmod(mode | stat.S_IXOTH)
    return changed


def restore_modes(changed: list[tuple[Path, int]]) -> None:
    for parent, mode in changed:
        parent.chmod(mode)


GRANTED = pytest.StashKey[list[tuple[Path, int]]]()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist the controller grants what `reachable_by_nobody` needs for the whole run:
    a worker granting and restoring it itself would pull it from under another worker's tests."""
    if config.getoption("dist", "no") != "no" and not hasattr(config, "workerinput"):
        config.stash[GRANTED] = grant_search_to_others()


def pytest_unconfigure(config: pytest.Config) -> None:
    restore_modes(config.stash.get(GRANTED, []))


@pytest.fixture(scope="session")
def reachable_by_nobody() -> Iterator[None]:
    """The interpreter and the code must be reachable by nobody: grant o+x (search, not read) on the
    repository's parents that lack it (a CI clone lives in a 0700 temporary directory); restored after."""
    changed = grant_search_to_others()
    try:
        yield
    finally:
        restore_modes(changed)


NOBODY = pwd.getpwnam("nobody")


def nobody_cli_env(cluster: LocalCluster, into: Path) -> dict[str, str]:
    """The xce command's environment for another uid: the cluster's admission files (CA, shared
    client certificate) copied into `into`, 0644, and no token (the caller adds its own)."""
    for name in ("ca.crt", "client-xce.crt", "client-xce.key"):
        shutil.copy(cluster.data / "tls" / name, into / name)
        (into / name).chmod(0o644)
    return {"PATH": "/usr/bin:/bin", "HOME": str(into), "XCE_DATA": str(into / "none"),
            "XCE_CONTROLLERS": ",".join(cluster.addresses), "XCE_CA": str(into / "ca.crt"),
            "XCE_CERT": str(into / "client-xce.crt"), "XCE_KEY": str(into / "client-xce.key")}


def xce_as_nobody(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The xce command run as uid 65534 (setpriv), with exactly `env`."""
    return subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
                           "--clear-groups", sys.executable, "-m", "cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


class Submitting:
    """Threads that submit one job at a time until stopped (at most `limit` each), recording every
    acknowledged submit: request id -> (job id, when). A submit that fails after the client's own
    retries is an error (the cluster stopped taking writes for longer than the client's deadline)."""

    def __init__(self, cluster: LocalCluster, threads: int = 2, limit: int = 5000,
                 addresses: list[str] | None = None, prefix: str = "load") -> None:
        self.cluster = cluster
        self.addresses = addresses
        self.acked: dict[str, tuple[int, float]] = {}
        self.revisions: dict[str, int] = {}  # request id -> the revision that committed it
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k, limit, prefix), daemon=True)
                         for k in range(threads)]

    def __enter__(self) -> Submitting:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=90)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def since(self, moment: float) -> int:
        """Submits acknowledged after `moment` (time.monotonic())."""
        with self._lock:
            return sum(1 for _, when in self.acked.values() if when > moment)

    def _run(self, k: int, limit: int, prefix: str) -> None:
        from xce.v1 import api_pb2 as api

        addresses = self.addresses or self.cluster.addresses
        with Client(addresses, self.cluster.credentials, deadline_s=60) as client:
            for i in range(limit):
                if self._stop.is_set():
                    return
                request_id = f"{prefix}-{k}-{i}"
                spec = api.JobSpec(command=["true"], name=request_id, cwd="/tmp")
                try:
                    response = client.submit([spec], request_id=request_id)
                except XceError as exc:
                    self.errors.append(f"{request_id}: {exc}")
                    return
                with self._lock:
                    self.acked[request_id] = (response.jobs[0].id, time.monotonic())
                    self.revisions[request_id] = response.revision


def role_of(cluster: LocalCluster, replica_id: int) -> str:
    """What the replica says of its own role ('' if it does not answer)."""
    try:
        with Client([cluster.address(replica_id)], cluster.credentials, deadline_s=0.5,
                    call_timeout_s=0.5, follow_leader=False) as client:
            return client.status(local_only=True).replicas[0].role
    except XceError:
        return ""


def leaders_per_term(data: Path) -> dict[int, set[str]]:
    """Which replicas said they lead in each Raft term, from their logs (one leader per term)."""
    terms: dict[int, set[str]] = {}
    for log in data.glob("replica-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if "leading in term " in line:
                term = int(line.split("leading in term ", 1)[1].split()[0])
                terms.setdefault(term, set()).add(log.stem)
    return terms


@contextmanager
def run_munged() -> Iterator[Path]:
    """munged on a socket of our own, with a fresh key; killed at the end (its socket's path). Its
    directory is 0755 so that nobody can reach the socket."""
    home = Path(tempfile.mkdtemp(prefix="xce-munge-", dir="/tmp"))
    home.chmod(0o755)
    key = home / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    socket = home / "munge.socket"
    proc = subprocess.Popen(["munged", "--foreground", "--force", f"--socket={socket}", f"--key-file={key}",
                             f"--pid-file={home / 'munged.pid'}", f"--log-file={home / 'munged.log'}",
                             f"--seed-file={home / 'munged.seed'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not socket.exists():
            log = home / "munged.log"
            assert proc.poll() is None, log.read_text() if log.exists() else "munged exited"
            assert time.monotonic() < deadline, "munged did not start"
            time.sleep(0.05)
        yield socket
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(home, ignore_errors=True)
