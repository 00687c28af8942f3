"""Slurm's commands on a live XCE cluster against a real Slurm 22.05.8's output (tests/golden/slurm22/):
what the controller's own answers decide. The same situation as the peer's capture on one host of 2
slots: a job done, one filling the host, one waiting for it (Resources), one held. squeue lists them in
Slurm's order (pending before running, held last) in its columns; scontrol's records have the
golden's keys in its order; scancel is silent for an unknown job (rc 0) and, with -v, says a done job
is "already completing or completed", as Slurm 22.05's. The rest, byte for byte, is
tests/unit/test_unit_slurm_golden.py's."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import lsf_site
import pytest
from conftest import FAST_HOSTS, print_logs_if_failed, wait_until

from ops.local_cluster import LocalCluster
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm22" / "cli"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with lsf_site.site(FAST_HOSTS, workers=(("w1", 2),)) as made:
        yield made.cluster


@pytest.fixture
def site(cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    lsf_site.slurm_environment(monkeypatch, cluster, tmp_path)
    yield cluster
    print_logs_if_failed(request, cluster.data)


def slurm(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(words), capture_output=True, text=True, timeout=60)


def submitted(*words: str) -> int:
    done = slurm("sbatch", "--parsable", *words)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def keys(text: str) -> list[str]:
    return re.findall(r"(?:^|\s)([A-Za-z/:_]+)=", text)


def test_the_peer_s_situation_on_xce(site: LocalCluster) -> None:
    done = submitted("-J", "cli-done", "--wrap", "true")
    with site.client() as client:
        wait_until(lambda: client.get_job(done).state == api.DONE, "cli-done done")
        wide = submitted("-J", "cli-wide", "-N", "1", "-n", "2", "--wrap", "sleep 300")
        wait_until(lambda: client.get_job(wide).state == api.RUN, "cli-wide running")
        pending = submitted("-J", "cli-pending", "-n", "2", "--wrap", "sleep 1")
        held = submitted("-J", "rest-held", "-H", "--wrap", "true")
        wait_until(lambda: client.get_job(pending).pending_code == api.PEND_NO_FREE_SLOTS,
                   "cli-pending waiting for cli-wide's slots")
    rows = slurm("squeue").stdout.splitlines()
    real = GOLDEN.joinpath("squeue.out").read_text().splitlines()
    assert rows[0] == real[0]
    assert [(row.split()[0], row.split()[4], row.split()[-1]) for row in rows[1:]] == [
        (str(pending), "PD", "(Resources)"), (str(held), "PD", "(JobHeldUser)"), (str(wide), "R", "w1")]
    assert [len(row) - len(row.split()[-1]) for row in rows[1:]] == [len(real[1]) - len("(Resources)")] * 3
    for job, name in ((wide, "scontrol_show_job_running.out"), (pending, "scontrol_show_job_pending.out"),
                      (held, "scontrol_show_job_held.out"), (done, "scontrol_show_job_completed.out")):
        shown = slurm("scontrol", "show", "job", str(job))
        assert shown.returncode == 0 and keys(shown.stdout) == keys(GOLDEN.joinpath(name).read_text()), name
    assert (slurm("scancel", "999999").returncode, slurm("scancel", "999999").stderr) == (0, "")
    verbose = slurm("scancel", "-v", str(done))
    assert (verbose.returncode, verbose.stderr) == (
        0, f"scancel: Terminating job {done}\n"
           f"scancel: error: Kill job error on job id {done}: Job/step already completing or completed\n")
    cancelled = slurm("scancel", str(wide), str(pending), str(held))
    assert (cancelled.returncode, cancelled.stdout, cancelled.stderr) == (0, "", "")
