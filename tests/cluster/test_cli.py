"""The `xce` command line against a live cluster, as an operator uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from conftest import wait_converged

from client.channel import Client
from client.cluster_file import cached_leader, remember_leader
from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cli") / "xce-data").running() as cluster:
        yield cluster


def xce(cluster: LocalCluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    # No --controllers: the CLI finds the cluster through $XCE_DATA.
    env = {**os.environ, "XCE_DATA": str(cluster.data)}
    env.pop("XCE_CONTROLLERS", None)
    result = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                            env=env, timeout=60)
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def test_submit_and_read_back(live: LocalCluster) -> None:
    out = xce(live, "submit", "-q", "priority", "-n", "2", "-J", "build", "--priority", "7",
              "--", "make", "-j2", "all").stdout
    assert "is submitted to queue <priority>" in out
    job_id = out.split("<", 1)[1].split(">", 1)[0]
    job = json.loads(xce(live, "job", job_id, "--json").stdout)
    assert job["spec"]["command"] == ["make", "-j2", "all"]
    assert job["spec"]["slots"] == 2 and job["spec"]["priority"] == 7 and job["state"] == "PEND"
    readable = job["readable_id"]
    assert readable.startswith("local-") and readable.endswith(f"-{job_id}")
    assert json.loads(xce(live, "job", readable, "--json").stdout)["id"] == job["id"]
    listed = json.loads(xce(live, "jobs", "--queue", "priority", "--json").stdout)["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert "build" in xce(live, "jobs").stdout


def test_control_and_modify(live: LocalCluster) -> None:
    out = xce(live, "submit", "--", "sleep", "9").stdout
    job_id = out.split("<", 1)[1].split(">", 1)[0]
    assert "now PSUSP" in xce(live, "hold", job_id).stdout
    assert "now PEND" in xce(live, "release", job_id).stdout
    xce(live, "modify", job_id, "--priority", "42", "-q", "idle")
    job = json.loads(xce(live, "job", job_id, "--json").stdout)
    assert (job["spec"]["priority"], job["spec"]["queue"]) == (42, "idle")
    assert "now EXIT" in xce(live, "kill", job_id).stdout
    assert json.loads(xce(live, "jobs", "--state", "exit", "--json").stdout)["jobs"][-1]["id"] == job["id"]


def test_errors_exit_nonzero_with_the_reason(live: LocalCluster) -> None:
    result = xce(live, "job", "424242", ok=False)
    assert result.returncode == 1 and "NOT_FOUND" in result.stderr
    result = xce(live, "submit", "-q", "nope", "--", "true", ok=False)
    assert result.returncode == 1 and "unknown queue 'nope'" in result.stderr
    result = xce(live, "submit", "-n", "5000", "--", "true", ok=False)  # over max_slots_per_job
    assert result.returncode == 1 and "INVALID_ARGUMENT" in result.stderr
    result = xce(live, "submit", "-n", "4,2", "--", "true", ok=False)  # refused before any call
    assert result.returncode == 2 and "1 <= MIN <= MAX" in result.stderr
    result = xce(live, "submit", "-R", "select[mem >]", "--", "true", ok=False)
    assert result.returncode == 1 and "INVALID_ARGUMENT" in result.stderr and "column 13" in result.stderr
    result = xce(live, "submit", "--", ok=False)  # a usage error, refused before any call
    assert result.returncode == 2 and "no command" in result.stderr


def test_queues_and_status(live: LocalCluster) -> None:
    xce(live, "queue", "create", "night", "--priority", "5")
    queues = json.loads(xce(live, "queues", "--json").stdout)
    assert {q["name"] for q in queues["queues"]} >= {"normal", "priority", "idle", "night"}
    assert queues["default_queue"] == "normal"
    xce(live, "queue", "update", "night", "--priority", "6", "--closed")
    assert "Closed" in xce(live, "queues").stdout
    status = json.loads(xce(live, "status", "--json").stdout)
    assert sorted(r["role"] for r in status["replicas"]) == ["follower", "follower", "leader"]
    assert all(int(r["applied_index"]) > 0 for r in status["replicas"])  # followers may trail a little
    wait_converged(live)


def test_concurrent_submits_share_log_entries(live: LocalCluster) -> None:
    """Group commit: many concurrent requests, fewer log entries than requests."""
    leader = live.address(live.leader())
    with Client([leader], live.credentials) as client:
        before = client.status(local_only=True).replicas[0].revision
    threads, each = 16, 20

    def submitter() -> None:
        with Client(live.addresses, live.credentials) as client:
            for _ in range(each):
                client.submit([api.JobSpec(command=["true"], name="grouped")])

    workers = [threading.Thread(target=submitter) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    with Client([leader], live.credentials) as client:
        after = client.status(local_only=True).replicas[0].revision
        assert len(client.list_jobs(["name:eq:grouped"])) == threads * each
    assert after - before < threads * each


def test_client_commands_import_no_grpc_asyncio_or_controller_and_cache_the_leader(
        live: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The lean CLI: what `xce submit` and `xce jobs` load, run as they are run."""
    cache = tmp_path_factory.mktemp("cache")
    env = {**os.environ, "XCE_DATA": str(live.data), "XDG_CACHE_HOME": str(cache)}
    env.pop("XCE_CONTROLLERS", None)
    probe = ("import os, runpy, sys\n"
             "def ended(code):\n    raise SystemExit(code)\n"
             "os._exit = ended  # the command's fast exit (cli.entry), here to look at it afterwards\n"
             "sys.argv = ['xce'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('cli', run_name='__main__')\n"
             "except SystemExit as exc:\n    code = exc.code\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('grpc', 'asyncio', 'controller', 'pysyncobj', 'lmdb'))\n"
             "slow = [m for m in ('tomllib', 'dataclasses', 'pathlib', 'shutil', 'typing', 'random', "
             "'calendar', 'google.protobuf.internal.python_message') if m in sys.modules]\n"
             "wkt = type(sys.modules.get('google.protobuf.internal.well_known_types')).__name__\n"
             "print('HEAVY', heavy, code, 'SLOW', slow, 'WKT', wkt, file=sys.stderr)\n")
    leader = live.address(live.leader())
    follower = next(a for a in live.addresses if a != leader)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        remember_leader(live.addresses, follower)  # a wrong guess: it costs one redirect, then is right
        assert cached_leader(live.addresses) == follower
        commands = [["submit", "--", "true"], ["jobs"], ["job", "ID"], ["kill", "ID"]]
        job_id = ""  # its own job's: the module's other tests (wherever they ran) have jobs of theirs
        for n, command in enumerate(commands):
            args = [job_id if word == "ID" else word for word in command]
            done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                                  env=env, timeout=60)
            assert "HEAVY [] 0" in done.stderr, (args, done.stderr[-2000:])
            job_id = job_id or done.stdout.split("<", 1)[1].split(">", 1)[0]
            # Past the first command the cluster file's parsed copy is cached: no TOML parser (nor
            # dataclasses, pathlib, shutil, typing, random, nor protobuf's pure-Python layers or its
            # well-known types, whose module upb would import for its first class) in any of them.
            assert n == 0 or "SLOW []" in done.stderr, (args, done.stderr[-2000:])
            assert "WKT _NoWellKnownTypes" in done.stderr, (args, done.stderr[-2000:])
        assert cached_leader(live.addresses) == leader



def test_a_reader_that_stops_early_gets_no_traceback(live: LocalCluster) -> None:
    xce(live, "submit", "-J", "one", "--", "true")
    env = {**os.environ, "XCE_DATA": str(live.data)}
    env.pop("XCE_CONTROLLERS", None)
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head` that has already read what it wanted: every write fails
    try:
        done = subprocess.run([sys.executable, "-m", "cli", "jobs"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and "Traceback" not in done.stderr, done.stderr
