"""bmod, bswitch, brun: change a job as LSF 10.1 does, as far as XCE carries it.

`bmod [-q queue] [-R res_req] [-sp priority] JOB` (pending jobs: the
queue and requirement; the priority any time), `bswitch queue JOB`, `brun -m
host JOB` (an operator forces a pending job onto a host), `btop JOB` and
`bbot JOB` (first or last among its owner's pending jobs of its queue: XCE
orders a queue by priority, so these set the job's priority past the others'). Options of bmod
XCE does not carry out are refused by name.
"""

from __future__ import annotations

import argparse
import sys

from cli.job_spec import int32
from cli.lsf import formats, not_yet
from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

NOT_YET = ("-n", "-W", "-We", "-M", "-o", "-e", "-J", "-w", "-b", "-t", "-E", "-Ep", "-P", "-m", "-x", "-u",
           "-g", "-G", "-app", "-gpu", "-cwd", "-env", "-k", "-L", "-U", "-sla")


def declare(p: argparse.ArgumentParser, name: str) -> None:
    if name == "bmod":
        p.add_argument("-q", dest="queue", metavar="queue_name", help="the new queue (pending jobs)")
        p.add_argument("-R", dest="resource_req", metavar="res_req", help="the new requirement (pending)")
        p.add_argument("-sp", dest="priority", metavar="priority", type=int32, help="the new priority")
        not_yet.declare(p, NOT_YET)
    elif name == "bswitch":
        p.add_argument("queue", metavar="destination_queue")
    elif name in ("btop", "bbot"):
        p.add_argument("id", metavar="job_ID")
        p.add_argument("position", nargs="?", type=int, default=1, metavar="position",
                       help="(1: the top or bottom; others are taken as 1 here)")
        return
    else:
        p.add_argument("-m", dest="host", metavar='"host_name"', required=True, help="the host to run it on")
        p.add_argument("-f", dest="force", action="store_true", help="(as brun here: it is forced)")
    p.add_argument("id", metavar="job_ID")


def prepare(args: argparse.Namespace) -> bool:
    if args.command == "bmod" and args.queue is None and args.resource_req is None and args.priority is None:
        raise ValueError("nothing to change: -q, -R or -sp")
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    try:
        if args.command in ("btop", "bbot"):
            return _move(client, args)
        if args.command == "brun":
            client.run(args.id, args.host.split()[0])
            print(f"Job <{shown(args.id)}> is being forced to run.")
        elif args.command == "bswitch":
            client.modify(args.id, queue=args.queue)
            print(f"Job <{shown(args.id)}> is switched to queue <{shown(args.queue)}>")
        else:
            client.modify(args.id, args.priority, args.queue, args.resource_req)
            print(f"Parameters of job <{shown(args.id)}> are being changed")
    except XceError as exc:
        if exc.code_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            raise
        print(f"Job <{shown(args.id)}>: {formats.refusal_words(exc)}", file=sys.stderr)
        return 255
    return 0


def _move(client: Client, args: argparse.Namespace) -> int:
    """btop, bbot: the pending job first (last) among its owner's pending jobs of its queue, by its
    priority (XCE orders a queue's jobs by priority, then by submission)."""
    job = client.get_job(args.id)
    if job.state not in (api.PEND, api.PSUSP):
        print(f"Job <{shown(args.id)}>: Job has already started", file=sys.stderr)
        return 255
    filters = [f"user:eq:{job.spec.user}", f"queue:eq:{job.spec.queue}", "state:in:PEND,PSUSP"]
    others = [j.spec.priority for j in client.list_jobs(filters) if j.id != job.id]
    top = args.command == "btop"
    priority = (max(others, default=job.spec.priority - 1) + 1) if top else \
        (min(others, default=job.spec.priority + 1) - 1)
    if top and priority <= job.spec.priority or not top and priority >= job.spec.priority:
        priority = job.spec.priority  # first (last) already
    client.modify(args.id, priority=priority)
    print(f"Job <{shown(args.id)}> has been moved to position 1 from {'top' if top else 'bottom'}.")
    return 0


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"{args.command}: {shown(exc.message)}"
