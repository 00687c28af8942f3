"""The Slurm peer (tests/slurm_peer.py) that a gateway backend's tests talk to: a real Slurm 22.05 with
slurmrestd. A user's JWT submits a job through POST /slurm/v0.0.38/job/submit and sees it complete
through GET /job/{id}; the nodes and the partition are listed. A root (SlurmUser) token acts for any
user named in X-SLURM-USER-NAME, the job then being that user's; a user's token acts for that user
alone. However the body ends, no process of the peer outlives it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import NOBODY, wait_until
from slurm_peer import API, SlurmPeer, slurm_peer

pytestmark = pytest.mark.cluster

ENV = {"PATH": "/usr/bin:/bin"}


def _tagged(peer_dir: Path) -> list[int]:
    """Processes whose environment carries the peer's tag: its daemons and their slurmstepd."""
    tag = f"SLURM_PEER_TAG={peer_dir}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if tag in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def _ended(rest: httpx.Client, job_id: int) -> dict[str, Any]:
    """The job, once it ended; else {}."""
    job: dict[str, Any] = rest.get(f"/job/{job_id}").json()["jobs"][0]
    return job if job["job_state"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") else {}


def _submit(rest: httpx.Client, peer: SlurmPeer, name: str, script: str) -> httpx.Response:
    return rest.post("/job/submit", json={"script": script, "job": {
        "name": name, "current_working_directory": str(peer.jobs_dir), "environment": ENV,
        "standard_output": str(peer.jobs_dir / f"{name}-%j.out")}})


def test_a_user_s_job_through_slurmrestd_nodes_and_partitions(tmp_path: Path) -> None:
    with slurm_peer(tmp_path) as peer, httpx.Client(base_url=peer.rest_url + API, timeout=30,
                                                    headers=peer.headers("nobody")) as rest:
        answer = _submit(rest, peer, "smoke",
                         "#!/bin/sh\necho hello from $SLURM_JOB_ID on $SLURMD_NODENAME\n")
        assert answer.status_code == 200, answer.text
        assert answer.json()["errors"] == []
        job_id = answer.json()["job_id"]
        job = wait_until(lambda: _ended(rest, job_id), f"job {job_id} ended", timeout_s=60)
        assert (job["job_state"], job["exit_code"], job["user_name"], job["name"]) == \
            ("COMPLETED", 0, "nobody", "smoke"), peer.logs()
        assert job["nodes"] in peer.nodes and job["partition"] == "normal"
        assert job["submit_time"] <= job["start_time"] <= job["end_time"]
        output = peer.jobs_dir / f"smoke-{job_id}.out"
        assert output.read_text() == f"hello from {job_id} on {job['nodes']}\n"
        assert output.stat().st_uid == NOBODY.pw_uid

        nodes = rest.get("/nodes").json()["nodes"]
        assert sorted((n["name"], n["cpus"], n["state"]) for n in nodes) == \
            [("n1", 2, "idle"), ("n2", 2, "idle")]
        partitions = rest.get("/partitions").json()["partitions"]
        assert [(p["name"], p["nodes"], p["total_cpus"]) for p in partitions] == [("normal", "n[1-2]", 4)]
        squeue = peer.run("squeue", "-h", "-t", "all", "-o", "%i %T %u")
        assert squeue.stdout.split() == [str(job_id), "COMPLETED", "nobody"], squeue.stderr


def test_a_root_token_acts_for_any_user_a_user_s_token_for_itself_alone(tmp_path: Path) -> None:
    """What a gateway holding one admin token relies on: X-SLURM-USER-NAME picks the job's owner."""
    with slurm_peer(tmp_path) as peer, httpx.Client(base_url=peer.rest_url + API, timeout=30) as rest:
        as_nobody = peer.headers("nobody", token=peer.token("root"))
        answer = rest.post("/job/submit", headers=as_nobody, json={"script": "#!/bin/sh\nid -un\n", "job": {
            "name": "impersonated", "current_working_directory": str(peer.jobs_dir), "environment": ENV}})
        assert answer.status_code == 200, answer.text
        job_id = answer.json()["job_id"]
        rest.headers.update(as_nobody)
        job = wait_until(lambda: _ended(rest, job_id), f"job {job_id} ended", timeout_s=60)
        assert (job["job_state"], job["user_name"], job["user_id"]) == ("COMPLETED", "nobody", NOBODY.pw_uid)
        assert (peer.jobs_dir / f"slurm-{job_id}.out").read_text() == "nobody\n"
        # and acting for nobody, root's token has nobody's rights alone: root's job is not nobody's to cancel
        roots = peer.run("sbatch", "--parsable", "--hold", "--wrap", "true")
        assert roots.returncode == 0, roots.stderr
        denied = rest.delete(f"/job/{roots.stdout.strip()}")
        assert denied.status_code == 500
        assert [e["error_number"] for e in denied.json()["errors"]] == [2002], denied.text  # denied

        # nobody's token, naming root: slurmctld refuses the credential (auth/jwt: "attempt to
        # authenticate as alternate user"), slurmrestd answers 500 and nothing is submitted
        rest.headers.update(peer.headers("root", token=peer.token("nobody")))
        refused = rest.post("/job/submit", json={"script": "#!/bin/sh\ntrue\n", "job": {
            "name": "refused", "current_working_directory": str(peer.jobs_dir), "environment": ENV}})
        assert refused.status_code == 500 and refused.json()["errors"], refused.text
        assert rest.get("/jobs").status_code == 500
        listed = peer.run("squeue", "-h", "-t", "all", "-o", "%j")
        assert sorted(listed.stdout.split()) == ["impersonated", "wrap"], listed.stderr
        # no user name at all: slurmrestd's own refusal
        rest.headers.pop("X-SLURM-USER-NAME")
        alone = rest.get("/ping")
        assert (alone.status_code, alone.text) == (401, "Authentication failure")


def test_no_process_outlives_the_peer_even_when_the_body_raises(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the test's own failure"), slurm_peer(tmp_path) as peer:
        running = peer.run("sbatch", "--parsable", "--wrap", "sleep 300")
        assert running.returncode == 0, running.stderr
        wait_until(lambda: [p for p in _in_jobs_dir(peer) if _cmdline(p) == b"sleep\x00300\x00"],
                   "the job's process")
        daemons = _tagged(peer.dir)
        assert len(daemons) >= 5, daemons  # slurmctld, 2 slurmd, slurmrestd, a slurmstepd (and munged)
        raise RuntimeError("the test's own failure")
    assert _tagged(peer.dir) == []
    assert _in_jobs_dir(peer) == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(peer.rest_url + "/openapi/v3", timeout=5)


def _cmdline(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def _in_jobs_dir(peer: SlurmPeer) -> list[int]:
    """Processes working in the peer's jobs directory: the jobs' (they carry the job's environment, not
    the peer's tag)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "cwd") == str(peer.jobs_dir):
                found.append(int(proc.name))
        except OSError:
            continue
    return found
