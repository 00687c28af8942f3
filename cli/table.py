"""The command table: every `xce` subcommand as data, in the order `xce --help` lists them.

A row names the command, its help line and the module of cli/ that holds
its two functions: one declaring its arguments on its parser, one running it.
The module is imported only when the command is on the command line (or
when the full parser is built, for --help or an unknown command), so a
client command loads no daemon, grpc, simulator or pathlib. A command that
connects runs as `run(client, args)` inside cli/session.py's boundary (the
leader cache, the quorum watch, errors mapped to exit statuses); any other
runs as `run(args)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from client.channel import Client

Declare = Callable[["argparse.ArgumentParser"], None]
RunLocal = Callable[["argparse.Namespace"], int]
RunOnCluster = Callable[["Client", "argparse.Namespace"], int]


class Command:
    """A row of the table (a plain class: typing's NamedTuple costs the command line its import)."""

    __slots__ = ("name", "help", "module", "declare", "run", "connects", "fast_exit", "writes")

    def __init__(self, name: str, help: str, module: str, declare: str, run: str, *, connects: bool,
                 fast_exit: bool, writes: bool = False) -> None:
        self.name = name
        self.help = help
        self.module = module  # in cli/: imported only once the command is named
        self.declare = declare  # its function adding the command's arguments to its parser
        self.run = run  # its function running the command, returning the exit status
        self.connects = connects  # run(client, args) inside the session's boundary; else run(args)
        self.fast_exit = fast_exit  # nothing left once it returns: os._exit after the output (cli/main.py)
        self.writes = writes  # it changes the cluster: an unanswered one may still take effect

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        declare: Declare = self._function(self.declare)
        declare(parser)

    def run_local(self, args: argparse.Namespace) -> int:
        run: RunLocal = self._function(self.run)
        return run(args)

    def run_on(self, client: Client, args: argparse.Namespace) -> int:
        run: RunOnCluster = self._function(self.run)
        return run(client, args)

    def _function(self, name: str) -> Any:
        return getattr(importlib.import_module(f"cli.{self.module}"), name)


def _local(name: str, help: str, module: str, declare: str, run: str) -> Command:
    """A daemon, or a command working on files here: it exits through the interpreter (atexit, logging)."""
    return Command(name, help, module, declare, run, connects=False, fast_exit=False)


def _read(name: str, help: str, module: str, declare: str, run: str) -> Command:
    return Command(name, help, module, declare, run, connects=True, fast_exit=True)


def _write(name: str, help: str, module: str, declare: str, run: str) -> Command:
    return Command(name, help, module, declare, run, connects=True, fast_exit=True, writes=True)


JOB_ACTIONS = ("kill", "stop", "resume", "hold", "release", "requeue", "checkpoint")  # cli/jobs.py's ACTIONS

COMMANDS: tuple[Command, ...] = (
    _local("controller", "run one controller replica", "daemons", "declare_controller", "run_controller"),
    _local("worker", "run the worker daemon of this host", "daemons", "declare_worker", "run_worker"),
    _local("scheduler", "run a scheduler (one holds the lease; others stand by)", "daemons",
           "declare_scheduler", "run_scheduler"),
    _local("ca", "the cluster's certificate authority", "deploy", "declare_ca", "run_ca"),
    _local("init", "make a deployment: CA, certificates, password, admin token; a bundle per host", "deploy",
           "declare_init", "run_init"),
    _local("init-replica", "the bundle of a replica to add, from an `xce init` output", "deploy",
           "declare_init_replica", "run_init_replica"),
    _write("token", "bearer tokens (cluster admins)", "auth", "declare_token", "run_token"),
    _read("whoami", "who the cluster takes you for, and what you may do", "auth", "declare_whoami",
          "run_whoami"),
    _local("cluster", "a local cluster", "local", "declare_cluster", "run_cluster"),
    _local("demo", "the whole story in a minute: jobs through a leader kill", "local", "declare_demo",
           "run_demo"),
    _local("slurm-path", "make and print the bin directory of Slurm's commands (sbatch, squeue, ...)",
           "local", "declare_slurm_path", "run_slurm_path"),
    _local("lsf-path", "make and print the bin directory of LSF's commands (bsub, bjobs, ...) to put on PATH",
           "local", "declare_lsf_path", "run_lsf_path"),
    _write("submit", "submit a job or a job array (like bsub)", "jobs", "declare_submit", "run_submit"),
    _read("jobs", "list jobs (like bjobs)", "job_queries", "declare_jobs", "run_jobs"),
    _read("job", "one job in full", "job_queries", "declare_job", "run_job"),
    *(_write(action, f"{action} a job, a job array, or some of its elements", "jobs", "declare_action",
             "run_action") for action in JOB_ACTIONS),
    _read("peek", "the end of a job's output, read on its host (like bpeek)", "jobs", "declare_peek",
          "run_peek"),
    _write("run", "force-run a pending job on a host (like brun)", "jobs", "declare_run", "run_run"),
    _write("modify", "change a job's priority, queue or resource requirement (like bmod)", "jobs",
           "declare_modify", "run_modify"),
    _read("queues", "list queues (like bqueues)", "cluster_queries", "declare_queues", "run_queues"),
    _read("fairshare", "shares, usage and priority of fair-share queues (bqueues -r)", "cluster_queries",
          "declare_fairshare", "run_fairshare"),
    _read("limits", "the limits and what running jobs hold of them (like blimits)", "cluster_queries",
          "declare_limits", "run_limits"),
    _write("queue", "create or update a queue", "admin", "declare_queue", "run_queue"),
    _read("history", "finished jobs, newest first (like bhist / sacct)", "history", "declare_history",
          "run_history"),
    _read("acct", "usage totals per user and queue over history (like bacct)", "history", "declare_acct",
          "run_acct"),
    _read("audit", "the audit trail: every write (who, key, via), dry runs, refusals (newest "
                   "first)", "history", "declare_audit", "run_audit"),
    # `save` connects (cli/snapshot.py opens the session itself); `status` and `restore` read files here.
    _local("snapshot", "backups: save the leader's state to a file, check a file", "snapshot",
           "declare_snapshot", "run_snapshot"),
    _write("member", "the controller replicas: add, remove, list (cluster admins)", "members",
           "declare_member", "run_member"),
    Command("record", "record the cluster's committed history to a file, for xce sim (cluster admins)",
            "recordings", "declare_record", "run_record", connects=True, fast_exit=False),
    _local("sim", "simulate a workload on the real scheduler, or re-run a recording's passes; what-ifs (no "
                  "cluster needed)", "simulate", "declare_sim", "run_sim"),
    Command("launch", "from inside a job: run a task on a host of its allocation (blaunch)", "launch",
            "declare_launch", "run_launch", connects=False, fast_exit=True),
    _read("hosts", "list hosts (like bhosts)", "cluster_queries", "declare_hosts", "run_hosts"),
    _write("host", "close or open a host (like badmin hclose/hopen)", "admin", "declare_host", "run_host"),
    _write("reconfig", "every replica re-reads its cluster file; the leader commits what changed (badmin "
                       "reconfig; cluster admins)", "admin", "declare_reconfig", "run_reconfig"),
    _read("status", "every replica's role, term, indexes and health", "cluster_queries", "declare_status",
          "run_status"),
    _local("gateway", "serve the REST API (/xce/v1/) for people, scripts and agents", "daemons",
           "declare_gateway", "run_gateway"),
    _local("mcp", "the MCP server for agents (stdio with its own key; or HTTP, each caller with theirs)",
           "daemons", "declare_mcp", "run_mcp"),
)

BY_NAME = {command.name: command for command in COMMANDS}
