"""bqueues: the queues, as LSF 10.1 lists them (QUEUE_NAME PRIO STATUS MAX ... NJOBS PEND RUN SUSP).

NJOBS, PEND, RUN and SUSP count slots of the jobs in each queue, as LSF
counts them; MAX is the queue's slot limit (QJOB_LIMIT). `-w` does not cut
names; `-l` gives each queue in full.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

GETOPT = ("wlrhV", "um", ())


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-w", dest="wide", action="store_true", help="wide: names not cut")
    p.add_argument("-l", dest="long", action="store_true", help="each queue in full")
    p.add_argument("-r", dest="long", action="store_true", help="as -l (fair share: `xce fairshare`)")
    p.add_argument("-u", dest="user", metavar="user_name", help="queues this user may submit to")
    p.add_argument("-m", dest="host", metavar="host_name", help="(all queues use every host here)")
    p.add_argument("queues", nargs="*", metavar="queue_name")


def status(queue: api.Queue) -> str:
    return f"{'Closed' if queue.closed else 'Open'}:{'Inact' if queue.inactive else 'Active'}"


def run(client: Client, args: argparse.Namespace) -> int:
    listed = client.list_queues()
    queues = [q for q in listed.queues if not args.queues or q.name in args.queues]
    if args.user:
        queues = [q for q in queues if not q.users or args.user in q.users]
    for missing in sorted(set(args.queues) - {q.name for q in queues}):
        print(f"{shown(missing)}: No such queue", file=sys.stderr)
    if not queues:
        return 255
    slots: dict[str, Counter[str]] = {}
    for job in client.list_jobs(["state:in:PEND,PSUSP,RUN,USUSP,SSUSP"]):
        if job.spec.HasField("array"):
            continue
        kind = "PEND" if job.state in (api.PEND, api.PSUSP) else "RUN" if job.state == api.RUN else "SUSP"
        slots.setdefault(job.spec.queue, Counter())[kind] += max(1, job.spec.slots)
    queues.sort(key=lambda q: (-q.priority, q.name))
    if args.long:
        for queue in queues:
            _long(queue, slots.get(queue.name, Counter()), queue.name == listed.default_queue)
        return 0
    print("QUEUE_NAME      PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP")
    for queue in queues:
        count = slots.get(queue.name, Counter())
        name = shown(queue.name) if args.wide else shown(queue.name)[:15]
        limit = str(queue.slot_limit) if queue.slot_limit else "-"
        print(f"{name:<15} {queue.priority:>3}  {status(queue):<15}{limit:>4}{'-':>5}{'-':>5}{'-':>5}"
              f"{sum(count.values()):>6}{count['PEND']:>6}{count['RUN']:>6}{count['SUSP']:>6}")
    return 0


def _long(queue: api.Queue, count: Counter[str], default: bool) -> None:
    print(f"\nQUEUE: {shown(queue.name)}")
    print(f"  -- {shown(queue.description) or 'No description provided.'}"
          f"{' This is the default queue.' if default else ''}\n")
    print("PARAMETERS/STATISTICS")
    print("PRIO NICE STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN SSUSP USUSP  RSV")
    limit = str(queue.slot_limit) if queue.slot_limit else "-"
    print(f"{queue.priority:>4}{0:>5}  {status(queue):<15}{limit:>4}{'-':>5}{'-':>5}{'-':>5}"
          f"{sum(count.values()):>6}{count['PEND']:>6}{count['RUN']:>6}{count['SUSP']:>6}{0:>6}{0:>5}\n")
    if queue.users:
        print(f"USERS: {' '.join(shown(u) for u in queue.users)}")
    else:
        print("USERS: all")
    print("HOSTS:  all")
    if queue.admins:
        print(f"ADMINISTRATORS: {' '.join(shown(a) for a in queue.admins)}")
    if queue.res_req:
        print(f"RES_REQ:  {shown(queue.res_req)}")
    if queue.preemptive:
        print(f"PREEMPTION = PREEMPTIVE[{' '.join(shown(q) for q in queue.preemptive)}]")
    elif queue.preemptable:
        print("PREEMPTION = PREEMPTABLE")
    if queue.HasField("fairshare") and queue.fairshare.ByteSize():
        print("SCHEDULING POLICIES:  FAIRSHARE")
    if queue.chunk_job_size >= 2:
        print(f"CHUNK_JOB_SIZE:  {queue.chunk_job_size}")
        if queue.chunk_job_duration_s:
            print(f"CHUNK_JOB_DURATION:  {queue.chunk_job_duration_s // 60} minutes")


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"bqueues: {shown(exc.message)}"
