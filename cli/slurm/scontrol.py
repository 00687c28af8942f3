"""scontrol: a job's, a node's or a partition's record as Slurm 22.05 shows it (`key=value` lines),
and a job held, released, requeued or updated. `show job [ID]`, `show node [NAME]`, `show partition
[NAME]`; `hold ID`, `release ID`, `requeue ID`, `suspend ID`, `resume ID`; `update JobId=ID
Partition=... Priority=...` (what XCE lets change while a job waits: its queue and priority)."""

from __future__ import annotations

import argparse
import sys
import time

from cli.slurm import formats, sinfo
from client.channel import Client, XceError
from xce import hostlist
from xce.printable import shown
from xce.v1 import api_pb2 as api

ACTIONS = {"hold": api.HOLD, "release": api.RELEASE, "requeue": api.REQUEUE, "suspend": api.STOP,
           "resume": api.RESUME}
UPDATABLE = ("Partition", "Priority")


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-o", "--oneliner", dest="oneliner", action="store_true")
    p.add_argument("words", nargs="+", metavar="command [arguments]")


def prepare(args: argparse.Namespace) -> bool:
    verb = args.words[0].lower()
    if verb == "show":
        if len(args.words) < 2 or args.words[1].lower() not in ("job", "jobs", "node", "nodes", "partition",
                                                                "partitions"):
            raise ValueError("show: job, node or partition")
    elif verb in ACTIONS:
        if len(args.words) < 2:
            raise ValueError(f"{verb}: which job?")
    elif verb == "update":
        pairs = dict(word.split("=", 1) for word in args.words[1:] if "=" in word)
        job = pairs.pop("JobId", pairs.pop("jobid", ""))
        unknown = [key for key in pairs if key not in UPDATABLE]
        if not job or unknown:
            raise ValueError(f"update: JobId=ID with {' '.join(UPDATABLE)} (not {', '.join(unknown) or '-'})")
        args.update_job, args.pairs = job, pairs
    else:
        raise ValueError(f"invalid keyword: {args.words[0]}")
    return True


def _ref(text: str) -> str:
    return text.replace("_", "[") + "]" if "_" in text else text


def run(client: Client, args: argparse.Namespace) -> int:
    verb = args.words[0].lower()
    if verb in ACTIONS:
        code = 0
        for ref in args.words[1].split(","):
            try:
                client.control(_ref(ref), ACTIONS[verb])
            except XceError as exc:
                print(f"{verb} {shown(ref)}: {shown(exc.message)}", file=sys.stderr)
                code = 1
        return code
    if verb == "update":
        priority = int(args.pairs["Priority"]) if "Priority" in args.pairs else None
        client.modify(_ref(args.update_job), priority=priority, queue=args.pairs.get("Partition"))
        return 0
    what, name = args.words[1].lower().rstrip("s"), (args.words[2] if len(args.words) > 2 else "")
    records = {"job": _jobs, "node": _nodes, "partition": _partitions}[what](client, name)
    if not records:
        print(f"{what.capitalize()} {shown(name)} not found" if name else f"No {what}s in the system",
              file=sys.stderr)
        return 1
    for record in records:
        lines = [" ".join(f"{k}={v}" for k, v in line) for line in record]
        print(shown(" ".join(lines) if args.oneliner else "\n   ".join(lines)))
        if not args.oneliner:
            print()
    return 0


Record = list[list[tuple[str, str]]]


def _jobs(client: Client, name: str) -> list[Record]:
    jobs = [client.get_job(_ref(name))] if name else [j for j in client.list_jobs()
                                                       if not j.spec.HasField("array")]
    now = int(time.time() * 1000)
    found = []
    for job in jobs:
        spec = job.spec
        nodes = [a.host for a in job.allocation] or ([job.host] if job.host else [])
        found.append([
            [("JobId", str(job.id)), ("JobName", formats.name(job))],
            [("UserId", spec.user), ("GroupId", spec.user)],
            [("Priority", str(spec.priority)), ("Account", spec.project or "(null)")],
            [("JobState", formats.state(job)), ("Reason", formats.reason(job))],
            [("Requeue", "1" if spec.rerunnable else "0"), ("ExitCode", formats.exit_code(job))],
            [("RunTime", formats.elapsed(formats.run_seconds(job, now))),
             ("TimeLimit", formats.squeue_time(spec.run_limit_s) if spec.run_limit_s else "UNLIMITED")],
            [("SubmitTime", formats.timestamp(job.submit_time_ms))],
            [("StartTime", formats.timestamp(job.start_time_ms)),
             ("EndTime", formats.timestamp(job.end_time_ms))],
            [("Partition", spec.queue)],
            [("NodeList", hostlist.compress(nodes) if nodes else "(null)")],
            [("NumNodes", str(max(1, len(nodes)))), ("NumCPUs", str(spec.slots)),
             ("NumTasks", spec.env.get("SLURM_NTASKS", str(spec.slots)))],
            [("MinMemoryNode", f"{spec.mem_limit_mb}M" if spec.mem_limit_mb else "0")],
            [("Command", " ".join(spec.command)[:200])], [("WorkDir", spec.cwd)],
            [("Comment", spec.comment or "(null)")],
            [("StdErr", spec.stderr_path)], [("StdOut", spec.stdout_path)],
        ])
        if job.array_id:
            found[-1][0] += [("ArrayJobId", str(job.array_id)), ("ArrayTaskId", str(job.array_index))]
    return found


def _nodes(client: Client, name: str) -> list[Record]:
    hosts = [h for h in client.list_hosts().hosts if not name or h.spec.name == name]
    partitions = ",".join(q.name for q in client.list_queues().queues)
    return [[
        [("NodeName", h.spec.name)],
        [("CPUAlloc", str(h.slots_used)), ("CPUTot", str(h.spec.slots))],
        [("RealMemory", str(h.spec.memory_mb)), ("AllocMem", str(h.reserved.get("mem", 0)))],
        [("State", sinfo.node_state(h).upper())],
        [("Partitions", partitions)],
        [("Reason", h.closed_reason or "(null)")],
    ] for h in sorted(hosts, key=lambda h: h.spec.name)]


def _partitions(client: Client, name: str) -> list[Record]:
    listed = client.list_queues()
    hosts = client.list_hosts().hosts
    nodes = hostlist.compress(sorted(h.spec.name for h in hosts)) or "(null)"
    cpus = sum(h.spec.slots for h in hosts)
    return [[
        [("PartitionName", q.name)],
        [("Default", "YES" if q.name == listed.default_queue else "NO"), ("Priority", str(q.priority))],
        [("State", "INACTIVE" if q.inactive else "DOWN" if q.closed else "UP")],
        [("Nodes", nodes)],
        [("TotalCPUs", str(cpus)), ("TotalNodes", str(len(hosts)))],
    ] for q in listed.queues if not name or q.name == name]
