"""srun: run a command's tasks, inside an allocation or as a job of its own, as Slurm 22.05 does.

Inside a job sbatch submitted (SLURM_JOB_ID and the worker's launch socket in
the environment), `srun [-n N] [-c C] command ...` runs N tasks (the job's
SLURM_NTASKS by default) over its hosts, block by block as Slurm's default
distribution (task i on the host of the job's slot i x C), each through `xce
launch` with its ranks (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID,
SLURM_STEP_NUM_TASKS); their output comes back to srun's own stdout and
stderr (cli/slurm/task_relay.py; `-l`: each line with its task's rank), or
goes to `-o`/`-e` files (`%t` the task's rank, `%n` its node's, `%j %A %a
%%`); srun exits with the highest task status. Needs no connection of its
own. Inside salloc's allocation too (cli/slurm/salloc.py).

Outside one, srun submits a job of its own (sbatch's options: -n -N -c
--mem -t -p -J -A -D --export ...) and relays its stdin and output here
(`--pty`: on a terminal of its own, as `bsub -Is`; cli/lsf/interactive.py),
and exits with its exit code; this first step runs the command as one task.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading

from cli.parser import UsageError
from cli.slurm import formats, sbatch, task_relay
from client.channel import Client, XceError
from xce import patterns
from xce.v1 import api_pb2 as api


def declare(p: argparse.ArgumentParser, name: str) -> None:
    sbatch.declare_job_size(p)
    p.add_argument("--export", dest="export", metavar="ALL|NONE|VARS")
    p.add_argument("-o", "--output", dest="output", metavar="pattern")
    p.add_argument("-e", "--error", dest="error", metavar="pattern")
    p.add_argument("--pty", dest="pty", action="store_true")
    p.add_argument("-l", "--label", dest="label", action="store_true", help="each line with its task's rank")
    p.add_argument("-u", "--unbuffered", dest="unbuffered", action="store_true", help="(always)")
    p.add_argument("--mpi", dest="mpi", metavar="type", help="(none: the tasks are plain processes)")
    p.add_argument("--cpu-bind", dest="cpu_bind", metavar="type",
                   help="(accepted: XCE binds no task to CPUs; each has its job's)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="command")


def inside() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID") and os.environ.get("XCE_LAUNCH_SOCKET")
                and os.environ.get("XCE_JOB_CREDENTIAL"))


def prepare(args: argparse.Namespace) -> bool:
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("No command given to execute.")
    args.cmd = command
    if args.mpi not in (None, "none"):
        raise UsageError(f"--mpi={args.mpi}: XCE's srun starts plain processes (--mpi=none)")
    return True


def layout(ntasks: int, cpus: int, per_slot: list[str]) -> list[tuple[str, int, int]]:
    """Each task's (host, local rank, node index): block distribution over the job's slots (task i on
    the host of slot i x cpus), as Slurm's default; UsageError if the job has too few slots."""
    if ntasks * cpus > len(per_slot):
        raise UsageError(f"Unable to create step: {ntasks} tasks of {cpus} CPUs need {ntasks * cpus} CPUs; "
                         f"the job has {len(per_slot)}")
    nodes = list(dict.fromkeys(per_slot))
    seen: dict[str, int] = {}
    tasks = []
    for rank in range(ntasks):
        host = per_slot[rank * cpus]
        tasks.append((host, seen.get(host, 0), nodes.index(host)))
        seen[host] = seen.get(host, 0) + 1
    return tasks


def _task_output(pattern: str, rank: int, node: int) -> str:
    job = os.environ.get("SLURM_JOB_ID", "0")
    values = {"t": str(rank), "n": str(node), "j": job, "J": job,
              "A": os.environ.get("SLURM_ARRAY_JOB_ID", job),
              "a": os.environ.get("SLURM_ARRAY_TASK_ID", "4294967294"), "%": "%"}
    return patterns.fill(pattern, values)


def _steps(args: argparse.Namespace) -> int:
    """srun inside an allocation: its tasks, through `xce launch`; the highest status."""
    from cli.launch import run_task

    per_slot = os.environ.get("XCE_HOSTS", "").split()
    cpus = args.cpus or int(os.environ.get("SLURM_CPUS_PER_TASK", "1") or 1)
    ntasks = args.ntasks or int(os.environ.get("SLURM_NTASKS", "1") or 1)
    tasks = layout(ntasks, cpus, per_slot)
    codes = [0] * len(tasks)
    sys.stdout.flush()
    # Output srun is to print (no -o/-e) comes back to it (cli/slurm/task_relay.py), as Slurm's.
    relay = None if args.output and args.error else task_relay.Relay(
        args.label, sys.stdout.buffer, sys.stderr.buffer)

    def one(rank: int, host: str, local: int, node: int) -> None:
        command = list(args.cmd)
        if args.output or args.error:  # the task's own files: opened by a shell in front of it, as its owner
            out = _task_output(args.output, rank, node) if args.output else "/dev/stdout"
            err = _task_output(args.error, rank, node) if args.error else \
                (out if args.output else "/dev/stderr")
            command = ["/bin/sh", "-c", 'exec >>"$0" 2>>"$1"; shift; exec "$@"', out, err, *command]
        extra = {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node),
                 "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_NTASKS": str(ntasks), "SLURM_STEPID": "0",
                 "SLURM_STEP_ID": "0", "SLURM_CPUS_PER_TASK": str(cpus)}
        if relay is not None:
            command = [sys.executable, "-I", "-S", task_relay.__file__, "--", *command]
            extra.update(relay.env())
        codes[rank] = run_task(host, command, extra)

    threads = [threading.Thread(target=one, args=(rank, *task)) for rank, task in enumerate(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if relay is not None:
        relay.close()
    for rank, ((host, _, _), code) in enumerate(zip(tasks, codes, strict=True)):
        if code:  # (Slurm's words)
            print(f"srun: error: {host}: task {rank}: Exited with exit code {code}", file=sys.stderr)
    return max(codes, default=0)


def _job(client: Client, args: argparse.Namespace) -> int:
    """srun outside an allocation: a job of its own, its stdin and output here."""
    from cli.lsf import interactive

    submitter = dict(os.environ)
    cwd = os.path.join(os.getcwd(), os.path.expanduser(args.chdir)) if args.chdir else os.getcwd()
    spec = api.JobSpec(command=args.cmd, name=args.name or os.path.basename(args.cmd[0]),
                       queue=args.partition or "", project=args.account or "", cwd=cwd)
    args.gres = None
    sbatch._size(spec, args)
    if args.time and args.time.strip() != "0":
        try:
            spec.run_limit_s = formats.minutes_of(args.time)
        except formats.TimeError as exc:
            raise XceError("INVALID_ARGUMENT", str(exc)) from None
    spec.env.update(sbatch._environment(args.export, submitter))
    spec.env.update(SLURM_SUBMIT_DIR=cwd, SLURM_SUBMIT_HOST=socket.gethostname(),
                    SLURM_NTASKS=str(args.ntasks or 1))
    return interactive.run(client, spec, args.pty, slurm=True)


def local(args: argparse.Namespace) -> bool:
    """Inside an allocation srun needs no connection of its own: the worker of this host carries it."""
    return inside()


def run(client: Client | None, args: argparse.Namespace) -> int:
    return _steps(args) if client is None else _job(client, args)
