"""An LSF cluster through its commands (`bsub`, `bjobs -json -o`, `bkill`, `bstop`, `bresume`,
`brequeue`, `bhosts -w`, `bqueues -w`, `lsid`), as LSF 10.1 documents their formats.

Each command runs as the caller (commands.py), so LSF decides what that user may see and do, as
at a shell. Output is read from the job's output file where the gateway shares the cluster's file
system (`shared_fs`), as that user.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections.abc import Mapping, Sequence

from gateway.clusters import lsf_words
from gateway.clusters.backend import Caller, ClusterBackend, ForeignJob, Health, Native, Output
from gateway.clusters.commands import Commands, home
from gateway.problems import Problem
from xce import patterns
from xce.v1 import api_pb2 as api

TAKEN = frozenset({"command", "name", "queue", "slots", "resource_req", "mem_limit_mb", "run_limit_s", "cwd",
                   "project", "stdout_path", "stderr_path"})
ACTIONS = {"kill": "bkill", "stop": "bstop", "resume": "bresume", "hold": "bstop", "release": "bresume",
           "requeue": "brequeue"}
_SUBMITTED = re.compile(r"Job <(\d+)> is submitted")


class LsfCommands(ClusterBackend):
    kind = "lsf"
    taken = TAKEN
    supports = frozenset({"submit", "list", "get", "history", "hosts", "queues",
                          *(f"control.{a}" for a in ACTIONS)})

    def __init__(self, name: str, bin_dir: str = "", env: Mapping[str, str] | None = None,
                 run_as_caller: bool = False, shared_fs: bool = False, timeout_s: float = 30.0) -> None:
        super().__init__(name)
        self.commands = Commands(name, bin_dir, env, run_as_caller, timeout_s)
        self.run = self.commands.run
        self._refusal = self.commands.refusal
        self.shared_fs = shared_fs
        if shared_fs:
            self.supports = self.supports | {"output"}

    # ------------------------------------------------------------ jobs

    def _records(self, caller: Caller, more: Sequence[str]) -> list[ForeignJob]:
        done = self.run(caller, ["bjobs", "-a", "-json", "-o", lsf_words.FIELDS, *more])
        if done.returncode != 0 and "job found" in (done.stderr + done.stdout).lower():
            return []
        try:
            records = json.loads(done.stdout)["RECORDS"]
        except (ValueError, KeyError, TypeError):
            raise self._refusal(done, "bjobs") from None
        now = time.time()
        found = []
        for record in records:
            if "ERROR" in record:  # bjobs -json of a job it does not know
                continue
            job, native_id = lsf_words.job_of(record, self.name, now)
            native = Native(native_id, record.get("STAT", ""), record.get("PEND_REASON", ""),
                            record.get("EXIT_REASON", ""))
            found.append(ForeignJob(job, native))
        return found

    def jobs(self, caller: Caller) -> list[ForeignJob]:
        return self._records(caller, ["-u", "all"])

    def job(self, caller: Caller, job_id: str) -> ForeignJob:
        found = self._records(caller, ["-u", "all", check_id(job_id)])
        if not found:
            raise Problem(404, f"cluster {self.name}: no job {job_id}")
        return found[0]

    def check(self, spec: api.JobSpec) -> None:
        super().check(spec)
        if spec.command[0].startswith("-"):  # bsub would read it as its own option (-qprio: -q prio)
            raise Problem(400, f"a command may not start with '-' on cluster {self.name} (bsub would take "
                               f"{spec.command[0][:40]!r} for an option)")

    def submit(self, caller: Caller, spec: api.JobSpec) -> ForeignJob:
        self.check(spec)
        argv = ["bsub", "-cwd", spec.cwd or home(caller.user)]
        stdout = spec.stdout_path or ("lsf-%J.out" if self.shared_fs else "")  # else LSF mails it
        for flag, value in (("-J", spec.name), ("-q", spec.queue), ("-R", spec.resource_req),
                            ("-P", spec.project), ("-o", stdout), ("-e", spec.stderr_path)):
            if value:
                argv += [flag, value]
        if spec.slots > 1:
            argv += ["-n", str(spec.slots)]
        if spec.mem_limit_mb:
            argv += ["-M", f"{spec.mem_limit_mb}M"]
        if spec.run_limit_s:
            argv += ["-W", str(max(1, (spec.run_limit_s + 59) // 60))]
        done = self.run(caller, [*argv, shlex.join(spec.command)])
        found = _SUBMITTED.search(done.stdout)
        if done.returncode != 0 or found is None:
            raise self._refusal(done, "bsub")
        return self.job(caller, found.group(1))

    def control(self, caller: Caller, job_id: str, action: str) -> ForeignJob:
        command = ACTIONS.get(action)
        if command is None:
            raise self.unsupported(action, "LSF's commands have no such action")
        done = self.run(caller, [command, check_id(job_id)])
        if done.returncode != 0:
            raise self._refusal(done, command)
        return self.job(caller, job_id)

    def output(self, caller: Caller, job_id: str, stderr: bool, tail: int) -> Output:
        if not self.shared_fs:
            raise self.unsupported("read a job's output", "the gateway does not share its file system "
                                   "(shared_fs = false)")
        found = self.job(caller, job_id)
        spec = found.job.spec
        path = (spec.stderr_path or spec.stdout_path) if stderr else spec.stdout_path
        if not path:
            raise Problem(404, f"cluster {self.name}: job {job_id} has no output file (LSF mailed it)")
        path = patterns.fill(path, {"J": str(found.job.id), "I": str(found.job.array_index), "%": "%"})
        if not os.path.isabs(path):
            path = os.path.join(spec.cwd or "/", path)
        return self.commands.tail(caller, path, tail, found.job.host)

    # ------------------------------------------------------------ hosts, queues

    def hosts(self, caller: Caller) -> list[api.Host]:
        done = self.run(caller, ["bhosts", "-w"])
        if done.returncode != 0:
            raise self._refusal(done, "bhosts")
        hosts = []
        for line in done.stdout.splitlines()[1:]:
            words = line.split()
            if len(words) < 5:
                continue
            status = words[1]
            slots = int(words[3]) if words[3].isdigit() else 0
            hosts.append(api.Host(spec=api.HostSpec(name=words[0], slots=slots),
                                  status=api.HOST_OK if status.startswith(("ok", "closed"))
                                  else api.HOST_UNAVAIL,
                                  slots_used=int(words[4]) if words[4].isdigit() else 0,
                                  closed=status.startswith("closed") and status != "closed_Full"))
        return hosts

    def queues(self, caller: Caller) -> list[api.Queue]:
        done = self.run(caller, ["bqueues", "-w"])
        if done.returncode != 0:
            raise self._refusal(done, "bqueues")
        queues = []
        for line in done.stdout.splitlines()[1:]:
            words = line.split()
            if len(words) < 3:
                continue
            status = words[2]
            queues.append(api.Queue(name=words[0], priority=int(words[1]) if words[1].isdigit() else 0,
                                    closed=status.startswith("Closed"), inactive=status.endswith("Inact")))
        return queues

    def health(self) -> Health:
        try:
            done = self.run(None, ["lsid"])
        except Problem as exc:
            return Health(False, exc.detail)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0:
            return Health(False, (done.stderr.strip() or f"lsid exited {done.returncode}")[:300])
        return Health(True, lines[0][:200] if lines else "lsid answered")


def check_id(job_id: str) -> str:
    """An LSF job id (`12`, `12[3]`): nothing a command would take for an option or another job."""
    if not re.fullmatch(r"[0-9]{1,19}(\[[0-9]{1,10}\])?", job_id):
        raise Problem(400, f"an LSF job id is a number, or an array element 12[3]; not {job_id[:40]!r}")
    return job_id
