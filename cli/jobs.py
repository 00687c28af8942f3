"""The commands that submit and change jobs: `xce submit` (bsub), `xce kill|stop|resume|hold|release|
requeue|checkpoint`, `xce run` (brun), `xce modify` (bmod), and `xce peek` (bpeek) to read one's output.

An action takes a job, an array, or elements of it (17[1-100]); what a
submit's options mean is cli/job_spec.py's.
"""

from __future__ import annotations

import argparse
import sys

from cli import job_spec
from cli.job_queries import array_counts
from cli.output import as_dict, emit
from client.channel import Client
from xce.printable import shown
from xce.v1 import api_pb2 as api

# The job actions of the command table (cli/table.py's JOB_ACTIONS), one command each.
ACTIONS = {"kill": api.KILL, "stop": api.STOP, "resume": api.RESUME, "hold": api.HOLD,
           "release": api.RELEASE, "requeue": api.REQUEUE, "checkpoint": api.CHECKPOINT}


def declare_submit(p: argparse.ArgumentParser) -> None:
    job_spec.add_options(p)
    p.add_argument("--file", metavar="JOBS", help="many jobs in one request: one command line per line, "
                                                  "optionally led by its own options (- reads stdin)")
    p.add_argument("--json", action="store_true", help="print the submitted jobs as JSON")
    p.add_argument("--request-id", default="", metavar="ID",
                   help="the submit's request id (default: a new one): a submit that gave up or was "
                        "interrupted, asked again under its printed id, is found instead of made twice")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")


def run_submit(client: Client, args: argparse.Namespace) -> int:
    specs = job_spec.read_specs(args)
    response = client.submit(specs, request_id=args.request_id)
    jobs = list(response.jobs)
    return emit(args, lambda: {"jobs": [as_dict(j) for j in jobs]} if len(jobs) != 1 else as_dict(jobs[0]),
                lambda: print(job_spec.describe(jobs)))


def declare_action(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="a job id, an array (17), or elements of it (17[1-100], 17[5,9])")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_action(client: Client, args: argparse.Namespace) -> int:
    command = args.command
    job = client.control(args.id, ACTIONS[command])
    if job.spec.HasField("array"):
        said = f"Job <{shown(args.id)}> {command}: done; array <{job.id}> now {array_counts(job)}"
        return emit(args, lambda: as_dict(job), lambda: print(said))
    pending = " (being killed; pending again once it has ended)" if job.requeue_requested else \
        " (being killed)" if job.kill_requested else ""
    return emit(args, lambda: as_dict(job), lambda: print(f"Job <{job.id}> {command}: now "
                                                        f"{api.JobState.Name(job.state)}{pending}"))


def declare_peek(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="job id (numeric, readable, or an array element 12[3])")
    p.add_argument("--stderr", action="store_true", help="its stderr (default: stdout)")
    p.add_argument("-n", "--bytes", type=int, default=65536, help="the last this many bytes (at most 524288)")


def run_peek(client: Client, args: argparse.Namespace) -> int:
    got = client.job_output(args.id, args.stderr, args.bytes)
    if got.size > len(got.data):
        print(f"(the last {len(got.data)} of {got.size} bytes of {got.path} on {got.host})", file=sys.stderr)
    sys.stdout.buffer.write(got.data)
    sys.stdout.flush()
    return 0


def declare_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="the pending job")
    p.add_argument("--host", "-m", required=True, help="the host to run it on")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_run(client: Client, args: argparse.Namespace) -> int:
    job = client.run(args.id, args.host)
    return emit(args, lambda: as_dict(job),
                lambda: print(f"Job <{job.id}> is forced to run on <{job.host}>."))


def declare_modify(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="a job id, an array (17), or elements of it (17[1-100])")
    p.add_argument("--priority", type=job_spec.int32, help="the new priority")
    p.add_argument("-q", "--queue", help="the new queue (while pending)")
    p.add_argument("-R", "--resource-req", help="the new resource requirement (while pending)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_modify(client: Client, args: argparse.Namespace) -> int:
    job = client.modify(args.id, args.priority, args.queue, args.resource_req)
    return emit(args, lambda: as_dict(job), lambda: print(f"Job <{job.id}> modified"))
