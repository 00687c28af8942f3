"""A Slurm cluster through slurmrestd (OpenAPI v0.0.38, Slurm 22.05), with Slurm's commands where
slurmrestd has no operation (requeue, suspend, resume: `scontrol`).

Who: the gateway holds a JWT of SlurmUser (root) and sends each request as the caller
(`X-SLURM-USER-NAME`), which slurmrestd 22.05 lets that token do: the job is the caller's, and
Slurm refuses what the caller may not do (another user's job: Access/permission denied). The
commands run as the caller too (commands.py). Output is read from the job's output file where the
gateway shares the cluster's file system (`shared_fs`), as the caller; slurmrestd serves none.
History is what slurmctld still holds (MinJobAge): slurmdbd's accounting is not read.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import re
import shlex
from collections.abc import Mapping
from typing import Any

import httpx

from gateway.clusters import slurm_words
from gateway.clusters.backend import Caller, ClusterBackend, ForeignJob, Health, Native, Output
from gateway.clusters.commands import Commands, home
from gateway.problems import Problem
from xce import patterns
from xce.v1 import api_pb2 as api

API = "/slurm/v0.0.38"
TAKEN = frozenset(
    {
        "command",
        "name",
        "queue",
        "slots",
        "resource_req",
        "mem_limit_mb",
        "run_limit_s",
        "cwd",
        "project",
        "stdout_path",
        "stderr_path",
        "env",
        "comment",
    }
)
SPANS = {"": 0, "span[hosts=1]": 1}  # the resource requirements a Slurm job can say: -N 1, or any
COMMANDED = {
    "requeue": ("scontrol", "requeue"),
    "stop": ("scontrol", "suspend"),
    "resume": ("scontrol", "resume"),
}
# Slurm's error numbers (slurm_errno.h) that are the caller's doing
NOT_FOUND = frozenset({2017})  # ESLURM_INVALID_JOB_ID
DENIED = frozenset({2002, 1})  # ESLURM_ACCESS_DENIED, EPERM


class SlurmRest(ClusterBackend):
    kind = "slurm"
    taken = TAKEN

    def __init__(
        self,
        name: str,
        url: str,
        token: str,
        bin_dir: str = "",
        env: Mapping[str, str] | None = None,
        shared_fs: bool = False,
        timeout_s: float = 30.0,
        run_as_caller: bool = True,
    ) -> None:
        super().__init__(name)
        self.url = url.rstrip("/")
        self.token = token
        self.token_user = token_user(token)  # the JWT's own (SlurmUser's): health checks ask as it
        self.http = httpx.Client(base_url=self.url, timeout=timeout_s)
        self.commands = Commands(name, bin_dir, env, run_as_caller, timeout_s)
        self.shared_fs = shared_fs
        ops = {
            "submit",
            "list",
            "get",
            "history",
            "hosts",
            "queues",
            "control.kill",
            "control.hold",
            "control.release",
        }
        if bin_dir or env:
            ops |= {f"control.{a}" for a in COMMANDED}
        if shared_fs:
            ops.add("output")
        self.supports = frozenset(ops)

    # ------------------------------------------------------------ slurmrestd

    def call(
        self,
        caller: Caller | None,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        user = self.token_user if caller is None else self.account(caller)
        headers = {"X-SLURM-USER-TOKEN": self.token, "Accept": "application/json", "X-SLURM-USER-NAME": user}
        try:
            answer = self.http.request(method, API + path, json=body, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise Problem(
                503, f"cluster {self.name}: slurmrestd at {self.url} did not answer ({type(exc).__name__})"
            ) from None
        try:
            found = answer.json()
        except ValueError:
            raise Problem(
                502,
                f"cluster {self.name}: slurmrestd answered {answer.status_code} without JSON: "
                f"{answer.text[:200]!r}",
            ) from None
        errors = (found.get("errors") or []) if isinstance(found, dict) else []
        if errors:
            raise self._refusal(errors[0])
        if answer.status_code >= 400:
            raise Problem(502, f"cluster {self.name}: slurmrestd answered {answer.status_code}")
        return found if isinstance(found, dict) else {}

    def account(self, caller: Caller) -> str:
        """The caller's account name, as this host's users directory has it (the site's one
        directory): not root, nor the token's own user, nor any name of their uids (the token may act
        as anyone; the gateway lends nobody the cluster's administrator account), nor a number
        (Slurm would take it for a uid)."""
        refused = Problem(403, f"cluster {self.name}: the gateway does not act as {caller.user!r} there",
                          "PERMISSION_DENIED")
        if caller.user.isdigit():
            raise refused
        try:
            account = pwd.getpwnam(caller.user)
        except KeyError:
            raise Problem(403, f"cluster {self.name}: {caller.user!r} has no account on the gateway's host",
                          "PERMISSION_DENIED") from None
        try:
            admin_uid = pwd.getpwnam(self.token_user).pw_uid
        except KeyError:
            admin_uid = 0
        if account.pw_uid in (0, admin_uid):
            raise refused
        return account.pw_name

    def _refusal(self, error: dict[str, Any]) -> Problem:
        number = error.get("error_number", error.get("error_code", 0))
        words = str(error.get("description") or error.get("error") or "refused")
        kind = str(error.get("error") or "")
        if kind and kind not in words:
            words = f"{words} ({kind})"
        status = 404 if number in NOT_FOUND else 403 if number in DENIED else 400
        return Problem(status, f"cluster {self.name}: {words[:500]}")

    def _found(self, record: dict[str, Any]) -> ForeignJob:
        job = slurm_words.job_of(record, self.name)
        code = int(record.get("exit_code") or 0)
        exit_words = f"{(code >> 8) & 0xFF}:{code & 0x7F}" if job.state in (api.DONE, api.EXIT) else ""
        return ForeignJob(
            job,
            Native(
                slurm_words.native_id(record),
                str(record.get("job_state", "")),
                str(record.get("state_reason", "") or ""),
                exit_words,
            ),
        )

    # ------------------------------------------------------------ jobs

    def jobs(self, caller: Caller) -> list[ForeignJob]:
        return [self._found(r) for r in self.call(caller, "GET", "/jobs").get("jobs", [])]

    def job(self, caller: Caller, job_id: str) -> ForeignJob:
        found = self.call(caller, "GET", f"/job/{check_id(job_id)}").get("jobs", [])
        if not found:
            raise Problem(404, f"cluster {self.name}: no job {job_id}")
        return self._found(found[0])

    def check(self, spec: api.JobSpec) -> None:
        super().check(spec)
        if spec.resource_req not in SPANS:
            raise Problem(
                400,
                f"cluster {self.name} (slurm) takes no resource requirement but span[hosts=1] "
                f"(-N 1), not {spec.resource_req[:80]!r}",
            )

    def submit(self, caller: Caller, spec: api.JobSpec) -> ForeignJob:
        self.check(spec)
        job: dict[str, Any] = {
            "name": spec.name or os.path.basename(spec.command[0])[:128],
            "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **spec.env},
            "current_working_directory": spec.cwd or home(caller.user),
        }
        if spec.slots > 1:
            job["tasks"] = spec.slots
        if SPANS[spec.resource_req]:
            job["nodes"] = 1
        for key, value in (
            ("partition", spec.queue),
            ("account", spec.project),
            ("comment", spec.comment),
            ("standard_output", spec.stdout_path),
            ("standard_error", spec.stderr_path),
        ):
            if value:
                job[key] = value
        if spec.mem_limit_mb:
            job["memory_per_node"] = spec.mem_limit_mb
        if spec.run_limit_s:
            job["time_limit"] = max(1, (spec.run_limit_s + 59) // 60)
        script = "#!/bin/sh\nexec " + shlex.join(spec.command) + "\n"
        done = self.call(caller, "POST", "/job/submit", {"script": script, "job": job})
        return self.job(caller, str(done.get("job_id", "")))

    def control(self, caller: Caller, job_id: str, action: str) -> ForeignJob:
        native = check_id(job_id)
        if action == "kill":
            self.call(caller, "DELETE", f"/job/{native}")
        elif action in ("hold", "release"):
            self.call(caller, "POST", f"/job/{native}", {"hold": action == "hold"})
        elif action in COMMANDED and f"control.{action}" in self.supports:
            done = self.commands.run(caller, [*COMMANDED[action], native])
            if done.returncode != 0:
                raise self.commands.refusal(done, " ".join(COMMANDED[action]))
        else:
            raise self.unsupported(
                f"{action} a job",
                "slurmrestd has no such operation, and no Slurm commands are configured (bin, env)",
            )
        return self.job(caller, job_id)

    def output(self, caller: Caller, job_id: str, stderr: bool, tail: int) -> Output:
        if not self.shared_fs:
            raise self.unsupported(
                "read a job's output",
                "slurmrestd serves none, and the gateway does not "
                "share the cluster's file system (shared_fs = false)",
            )
        found = self.job(caller, job_id)
        job = found.job
        pattern = (job.spec.stderr_path or job.spec.stdout_path) if stderr else job.spec.stdout_path
        if not pattern:
            pattern = "slurm-%A_%a.out" if job.array_id else "slurm-%j.out"
        array = str(job.array_id) if job.array_id else str(job.id)
        path = patterns.fill(
            pattern,
            {
                "j": str(job.id),
                "J": str(job.id),
                "A": array,
                "a": str(job.array_index),
                "x": job.spec.name,
                "u": job.spec.user,
                "N": job.host,
                "%": "%",
            },
        )
        if not os.path.isabs(path):
            path = os.path.join(job.spec.cwd or "/", path)
        return self.commands.tail(caller, path, tail, job.host)

    # ------------------------------------------------------------ hosts, queues

    def hosts(self, caller: Caller) -> list[api.Host]:
        return [slurm_words.host_of(r) for r in self.call(caller, "GET", "/nodes").get("nodes", [])]

    def queues(self, caller: Caller) -> list[api.Queue]:
        found = [
            slurm_words.queue_of(r) for r in self.call(caller, "GET", "/partitions").get("partitions", [])
        ]
        return sorted(found, key=lambda q: q.description != "default")  # the default first

    def health(self) -> Health:
        try:
            pings = self.call(None, "GET", "/ping").get("pings", [])
        except Problem as exc:
            return Health(False, exc.detail)
        up = [p for p in pings if p.get("ping") == "UP"]
        words = ", ".join(f"{p.get('hostname', '?')} {p.get('mode', '')} {p.get('ping', '?')}" for p in pings)
        return Health(bool(up), f"slurmctld: {words or 'none answered'}")


def token_user(token: str) -> str:
    """The user a Slurm JWT names (its `sun` claim; the token is slurmctld's to check, not ours)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return str(claims.get("sun", "")) or "root"
    except (IndexError, ValueError, AttributeError):
        return "root"


def check_id(job_id: str) -> str:
    """A Slurm job id (`17`, an array's element `16_3`): nothing that would make another path."""
    head, sep, tail = job_id.partition("_")
    if not re.fullmatch(r"[0-9]{1,19}(_[0-9]{1,10})?", job_id):
        raise Problem(400, f"a Slurm job id is a number, or an array element 16_3; not {job_id[:40]!r}")
    return job_id


