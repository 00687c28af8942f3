"""salloc: an allocation, and a command run in it, as Slurm 22.05's salloc gives them.

`salloc [options] [command [args]]`: sbatch's size and time options (-n -N
--ntasks-per-node -c --mem --mem-per-cpu -t -p -J -A -D -w --exclusive
--gres --gpus-per-node); the command is the user's shell ($SHELL) when none
is given. The allocation is an interactive job (cli/lsf/interactive.py, as
`srun` outside one and `bsub -Is`) whose command is the one given: it runs
on the allocation's first host, with the allocation's variables
(SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_NTASKS, ...: worker/spawn.py), so
`srun` inside it launches its tasks over the allocation's hosts (`xce
launch`), as Slurm's srun inside salloc does. Its stdin and output are here
(a terminal of its own when this one is a terminal; else its stderr comes
with its stdout, as `srun`'s and `bsub -I`'s); salloc says `salloc: Granted
job allocation N` on stderr once the command started and `salloc:
Relinquishing job allocation N` once it ended, and exits with its exit
code; the allocation ends with it.

Where it departs from Slurm: Slurm runs the command here, on the submitting
host; XCE runs it on the allocation's first host (an XCE job runs where it
is placed, and srun inside it needs its worker), its terminal relayed here.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any, cast

from cli.parser import UsageError
from cli.slurm import formats, sbatch
from client.channel import Client
from xce.v1 import api_pb2 as api

# salloc's options XCE does not carry out yet: refused by name, nothing submitted.
NOT_YET_WITH_VALUE = ("--qos", "-q", "--constraint", "-C", "--reservation", "--licenses", "-L", "--signal",
                      "--dependency", "-d", "--begin", "-b", "--kill-command", "-K", "--gpus", "-G")
NOT_YET_FLAGS = ("--no-shell", "--immediate", "-I", "--x11", "--bell", "--no-bell")


def declare(p: argparse.ArgumentParser, name: str) -> None:
    from cli.lsf import not_yet

    sbatch.declare_job_size(p)
    p.add_argument("-w", "--nodelist", dest="nodelist", metavar="hosts")
    p.add_argument("--exclusive", dest="exclusive", action="store_true")
    p.add_argument("--gres", dest="gres", metavar="gpu:N")
    p.add_argument("--gpus-per-node", dest="gpus_per_node", metavar="[type:]N")
    p.add_argument("-V", "--version", dest="version", action="store_true")
    not_yet.declare(p, NOT_YET_WITH_VALUE, NOT_YET_FLAGS, system="Slurm")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="command")


def build(args: argparse.Namespace, submitter: dict[str, str], here: str, cwd: str) -> api.JobSpec:
    """The allocation's job (pure but for what it is given): the command, or the user's shell; the
    submitter's environment (salloc's command runs with it, as Slurm's)."""
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    command = command or [submitter.get("SHELL") or "/bin/sh"]
    workdir = os.path.join(cwd, os.path.expanduser(args.chdir)) if args.chdir else cwd
    spec = api.JobSpec(command=command, name=args.name or "interactive",
                       queue=args.partition or "", project=args.account or "", cwd=workdir,
                       exclusive=bool(args.exclusive))
    sbatch._size(spec, args)
    if args.time and args.time.strip() != "0":
        try:
            spec.run_limit_s = formats.minutes_of(args.time)
        except formats.TimeError as exc:
            raise UsageError(str(exc)) from None
    if args.nodelist:
        spec.hosts.extend(dict.fromkeys(args.nodelist.replace(",", " ").split()))
    spec.env.update(sbatch._environment(None, submitter))
    spec.env.update(SLURM_SUBMIT_DIR=cwd, SLURM_SUBMIT_HOST=here,
                    SLURM_NTASKS=str(args.ntasks or spec.slots // (args.cpus or 1)))
    if args.cpus:
        spec.env["SLURM_CPUS_PER_TASK"] = str(args.cpus)
    return spec


def prepare(args: argparse.Namespace) -> bool:
    if args.version:
        print("slurm 22.05.8 (XCE's salloc over an XCE cluster)")
        return False
    args.spec = build(args, dict(os.environ), socket.gethostname(), os.getcwd())
    return True


class _Announcing:
    """The client the interactive session uses, saying Slurm's words on stderr as the allocation goes:
    `Granted` the first time it is seen started (the session asks once the job connected)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.job_id = 0
        self.granted = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def submit(self, specs: list[api.JobSpec], *more: Any, **named: Any) -> api.SubmitJobsResponse:
        answer = self.client.submit(specs, *more, **named)
        self.job_id = answer.jobs[0].id
        return answer

    def get_job(self, ref: str | int, stale: bool = False) -> api.Job:
        job = self.client.get_job(ref, stale)
        if job.id == self.job_id and job.start_time_ms and not self.granted:
            self.granted = True
            print(f"salloc: Granted job allocation {job.id}", file=sys.stderr, flush=True)
        return job


def run(client: Client, args: argparse.Namespace) -> int:
    from cli.lsf import interactive

    watched = _Announcing(client)
    try:
        return interactive.run(cast(Client, watched), args.spec, sys.stdin is not None and sys.stdin.isatty(),
                               slurm=True)
    finally:
        if watched.granted:
            print(f"salloc: Relinquishing job allocation {watched.job_id}", file=sys.stderr, flush=True)
