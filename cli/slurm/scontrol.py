"""scontrol: a job's, a node's or a partition's record as Slurm 22.05 shows it (`key=value` lines,
each key where Slurm's is: slurm_sprint_job_info, slurm_sprint_node_table,
slurm_sprint_partition_info; tests/unit/test_unit_slurm_golden.py holds them to a real Slurm's), and a
job held, released, requeued or updated. `show job [ID]`, `show node [NAME]`, `show partition
[NAME]`; `hold ID`, `release ID`, `requeue ID`, `suspend ID`, `resume ID`; `update JobId=ID
Partition=... Priority=...` (what XCE lets change while a job waits: its queue and priority)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable

from cli.slurm import array_rest, formats, json_out, sinfo
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
    try:
        records = {"job": _jobs, "node": _nodes, "partition": _partitions}[what](client, name)
    except XceError as exc:
        if what != "job" or exc.code_name not in ("NOT_FOUND", "INVALID_ARGUMENT"):
            raise
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)  # (Slurm's words)
        return 1
    if not records:
        print(f"{what.capitalize()} {shown(name)} not found" if name else f"No {what}s in the system",
              file=sys.stderr)
        return 1
    for lines in records:
        sys.stdout.write(text(lines, args.oneliner, trailing=what == "job"))
    return 0


def text(lines: list[str], oneliner: bool, trailing: bool = False) -> str:
    """A record as Slurm prints it: its lines joined by "\n   " (-o: a space), a job's with one more
    after its last (Slurm's job record ends so), then a blank line (-o: the line's end)."""
    end = " " if oneliner else "\n   "
    body = end.join(shown(line) for line in lines) + (end if trailing else "")
    return body + ("\n" if oneliner else "\n\n")


Owner = Callable[[str], tuple[int | None, int | None, str]]


def _jobs(client: Client, name: str) -> list[list[str]]:
    jobs = [client.get_job(_ref(name))] if name else [j for j in client.list_jobs()
                                                       if not j.spec.HasField("array")]
    now = formats.now_ms()
    return [job_lines(job, now) for job in jobs]


def _nodes(client: Client, name: str) -> list[list[str]]:
    hosts = [h for h in client.list_hosts().hosts if not name or h.spec.name == name]
    partitions = [q.name for q in client.list_queues().queues]
    return [node_lines(h, partitions) for h in sorted(hosts, key=lambda h: h.spec.name)]


def _partitions(client: Client, name: str) -> list[list[str]]:
    listed = client.list_queues()
    hosts = list(client.list_hosts().hosts)
    return [partition_lines(q, listed.default_queue, hosts) for q in listed.queues
            if not name or q.name == name]


def _id(number: int | None) -> str:
    return str(number) if number is not None else "N/A"


def _path(pattern: str, job: api.Job) -> str:
    """StdOut=/StdErr= as Slurm's scontrol fills a pattern in (%A %a %j %u %x %%, with a width: %4j), in
    the working directory unless absolute (job_info.c: _fname_format); XCE's %J is the job's id."""
    def one(found: re.Match[str]) -> str:
        width, letter = found[1], found[2]
        if letter == "%":
            return "%"
        values = {"A": job.array_id or job.id, "a": job.array_index if job.array_id else 0xFFFFFFFE,
                  "j": job.id, "J": job.id, "u": job.spec.user, "x": formats.name(job)}
        value = values[letter]
        return f"{value:0{min(int(width), 10)}d}" if width and isinstance(value, int) else str(value)

    filled = re.sub(r"%(\d*)([AajJux%])", one, pattern)
    return filled if filled.startswith("/") else f"{job.spec.cwd}/{filled}"


def job_lines(job: api.Job, now_ms: int, owner: Owner | None = None) -> list[str]:
    """`scontrol show job`'s record of a job, Slurm 22.05's lines in its order (pure, but for the owner's
    uid and group, which this host's passwd says: `owner`). What XCE has no notion of is Slurm's value
    for a job without it (MCS_label=N/A, QOS=(null), Reboot=0...); the departures are in docs/SLURM.md."""
    spec = job.spec
    nodes = [a.host for a in job.allocation] or ([job.host] if job.host else [])
    uid, gid, group = (owner or json_out._owner)(spec.user)
    first = f"JobId={job.id} "
    if job.array_id and not array_rest.is_rest(job):
        first += f"ArrayJobId={job.array_id} ArrayTaskId={job.array_index} "
        if job.array_limit:
            first += f"ArrayTaskThrottle={job.array_limit} "
    limit = formats.limit_seconds(job)
    eligible = "Unknown" if formats.held(job) else formats.timestamp(spec.begin_time_ms or job.submit_time_ms)
    accrue = eligible if not spec.begin_time_ms or spec.begin_time_ms <= now_ms else "Unknown"
    end = formats.expected_end_ms(job)
    suspended = job.stopped_at_ms if job.state in (api.USUSP, api.SSUSP) else 0
    cpus_per_task = spec.env.get("SLURM_CPUS_PER_TASK", "1")
    lines = [
        first + f"JobName={formats.name(job)}",
        f"UserId={spec.user}({_id(uid)}) GroupId={group or '(null)'}({_id(gid)}) MCS_label=N/A",
        f"Priority={formats.priority(job)} Nice=0 Account={spec.project or '(null)'} QOS=(null)",
        f"JobState={formats.state(job)} Reason={formats.state_reason(job)} "
        f"Dependency={formats.dependency(job) or '(null)'}",
        f"Requeue={int(spec.rerunnable)} Restarts={job.attempt} BatchFlag=1 Reboot=0 "
        f"ExitCode={formats.exit_code(job)}",
        f"RunTime={formats.elapsed(formats.run_seconds(job, now_ms))} "
        f"TimeLimit={formats.elapsed(limit) if limit is not None else 'UNLIMITED'} TimeMin=N/A",
        f"SubmitTime={formats.timestamp(job.submit_time_ms)} EligibleTime={eligible}",
        f"AccrueTime={accrue}",
        f"StartTime={formats.timestamp(job.start_time_ms)} EndTime={formats.timestamp(end)} "
        f"Deadline={formats.timestamp(spec.term_time_ms) if spec.term_time_ms else 'N/A'}",
        f"SuspendTime={formats.timestamp(suspended) if suspended else 'None'} SecsPreSuspend=0 "
        f"LastSchedEval={formats.timestamp(job.start_time_ms or job.submit_time_ms)} Scheduler=Main",
        f"Partition={spec.queue} AllocNode:Sid={spec.env.get('SLURM_SUBMIT_HOST') or '(null)'}:0",
        f"ReqNodeList={hostlist.compress(list(spec.hosts)) if spec.hosts else '(null)'} ExcNodeList=(null)",
        f"NodeList={hostlist.compress(nodes) if nodes else ''}",
        *([f"BatchHost={nodes[0]}"] if nodes else []),
        f"NumNodes={len(nodes) or 1} NumCPUs={spec.slots} "
        f"NumTasks={spec.env.get('SLURM_NTASKS', str(spec.slots))} CPUs/Task={cpus_per_task} "
        "ReqB:S:C:T=0:0:*:*",
        f"TRES={json_out._tres(job, len(nodes) or 1)}",
        "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*",
        f"MinCPUsNode={cpus_per_task} MinMemoryNode={formats.memory(spec.mem_limit_mb)} MinTmpDiskNode=0",
        "Features=(null) DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if spec.exclusive else 'OK'} Contiguous=0 Licenses=(null) Network=(null)",
        f"Command={formats.script_name(job) or '(null)'}",
        f"WorkDir={spec.cwd}",
        *([f"Comment={spec.comment} "] if spec.comment else []),
        f"StdErr={_path(spec.stderr_path or spec.stdout_path or 'slurm-%j.out', job)}",
        "StdIn=/dev/null",
        f"StdOut={_path(spec.stdout_path or 'slurm-%j.out', job)}",
        "Power=",
    ]
    if spec.mail_user and (spec.mail_begin or spec.mail_end):
        kinds = ",".join(kind for kind, on in (("BEGIN", spec.mail_begin), ("END", spec.mail_end)) if on)
        lines.append(f"MailUser={spec.mail_user} MailType={kinds}")
    return lines


def node_state(host: api.Host) -> str:
    """State= as Slurm's node_state_string: IDLE, MIXED, ALLOCATED, +DRAIN when closed, DOWN."""
    if host.status != api.HOST_OK:
        return "DOWN"
    used = min(host.slots_used, host.spec.slots)
    base = "ALLOCATED" if used >= host.spec.slots else "MIXED" if used else "IDLE"
    return base + ("+DRAIN" if host.closed else "")


def node_lines(host: api.Host, partitions: list[str]) -> list[str]:
    """`scontrol show node`'s record of a host, Slurm 22.05's lines in its order (pure). A host's CPUs are
    its slots, each a socket of one core of one thread (what Slurm makes of a node given CPUs= alone);
    its load and free memory the worker's last (r1m, mem); its start the time it joined; Arch=, OS= and
    BootTime, which XCE does not know, as Slurm prints a node that did not say (left out, None)."""
    spec = host.spec
    slots, used = spec.slots, min(host.slots_used, spec.slots)
    gpus = int(spec.resources.get("gpu", 0))
    reserved_mem = host.reserved.get("mem", 0)
    load, free = host.load.get("r1m"), host.load.get("mem")
    allocated = [f"cpu={used}"] if used else []
    allocated += [f"mem={formats.memory(reserved_mem)}"] if reserved_mem else []
    allocated += [f"gres/gpu={host.reserved['gpu']}"] if host.reserved.get("gpu") else []
    features = ",".join(spec.tags) or "(null)"
    joined = host.status == api.HOST_OK and host.status_time_ms
    lines = [
        f"NodeName={spec.name} CoresPerSocket=1 ",
        f"CPUAlloc={used} CPUEfctv={slots} CPUTot={slots} "
        f"CPULoad={f'{load:.2f}' if load is not None else 'N/A'}",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        f"Gres={f'gpu:{gpus}' if gpus else '(null)'}",
        f"NodeAddr={spec.name} NodeHostName={spec.name} Version=22.05.8",
        f"RealMemory={spec.memory_mb} AllocMem={reserved_mem} "
        f"FreeMem={int(free) if free is not None else 'N/A'} Sockets={slots} Boards=1",
        f"State={node_state(host)} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        f"Partitions={','.join(partitions)} ",
        f"BootTime=None SlurmdStartTime={formats.timestamp(host.status_time_ms) if joined else 'None'}",
        "LastBusyTime=Unknown",
        f"CfgTRES=cpu={slots},mem={formats.memory(spec.memory_mb)},billing={slots}"
        + (f",gres/gpu={gpus}" if gpus else ""),
        f"AllocTRES={','.join(allocated)}",
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if host.closed:
        when = formats.timestamp(host.closed_time_ms) if host.closed_time_ms else "Unknown"
        lines.append(f"Reason={host.closed_reason or 'closed'} [{host.closed_by or 'root'}@{when}]")
    return lines


def partition_lines(queue: api.Queue, default: str, hosts: list[api.Host]) -> list[str]:
    """`scontrol show partition`'s record of a queue, Slurm 22.05's lines in its order (pure): every host
    is in every queue; its priority is the PriorityTier (higher first, as XCE's); a preemptable queue's
    PreemptMode its action."""
    names = sorted(h.spec.name for h in hosts)
    cpus, mb = sum(h.spec.slots for h in hosts), sum(h.spec.memory_mb for h in hosts)
    groups = ",".join(u[1:] for u in queue.users if u.startswith("@")) or "ALL"
    preempt = ("REQUEUE" if queue.preempt_action == api.PREEMPT_REQUEUE else "SUSPEND") \
        if queue.preemptable else "OFF"
    return [
        f"PartitionName={queue.name}",
        f"AllowGroups={groups} AllowAccounts=ALL AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if queue.name == default else 'NO'} QoS=N/A",
        "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO",
        "MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"Nodes={hostlist.compress(names) if names else '(null)'}",
        f"PriorityJobFactor=1 PriorityTier={queue.priority} RootOnly=NO ReqResv=NO OverSubscribe=NO",
        f"OverTimeLimit=NONE PreemptMode={preempt}",
        f"State={sinfo.partition_state(queue)} TotalCPUs={cpus} TotalNodes={len(names)} "
        "SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES=cpu={cpus},mem={formats.memory(mb)},node={len(names)},billing={cpus}",
    ]
