"""Hosts, queues and the configuration, for operators: `xce queue create|update`, `xce host close|open`
(badmin's qclose/qinact and hclose/hopen) and `xce reconfig` (badmin reconfig)."""

from __future__ import annotations

import argparse

from cli.output import as_dict, emit
from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

# What `queue update` changes when given (argparse's None: not given).
QUEUE_FIELDS = ("priority", "description", "closed", "inactive", "job_pick_plugin", "slot_limit", "res_req",
                "kill_invalid_depend")


def declare_queue(p: argparse.ArgumentParser) -> None:
    qsub = p.add_subparsers(dest="queue_command", required=True)
    for name in ("create", "update"):  # update changes only what is given
        q = qsub.add_parser(name, help=f"{name} a queue")
        q.add_argument("name", help="the queue's name")
        q.add_argument("--priority", type=int, help="higher is dispatched first")
        q.add_argument("--description", help="words for bqueues-style listings")
        q.add_argument("--closed", action="store_true", default=None,
                       help="refuse new submits (badmin qclose)")
        q.add_argument("--open", dest="closed", action="store_false", help="take submits again")
        q.add_argument("--inactive", action="store_true", default=None,
                       help="dispatch nothing (badmin qinact)")
        q.add_argument("--active", dest="inactive", action="store_false", help="dispatch again")
        q.add_argument("--picker", dest="job_pick_plugin",
                       help="this queue's job_pick_plugin ('' for the default)")
        q.add_argument("--slot-limit", dest="slot_limit", type=int,
                       help="at most this many slots of its jobs run at once (QJOB_LIMIT; 0: none)")
        q.add_argument("--res-req", dest="res_req",
                       help="a resource requirement merged with each job's -R (LSF RES_REQ; '' for none)")
        q.add_argument("--kill-invalid-depend", dest="kill_invalid_depend", action="store_true", default=None,
                       help="kill its jobs whose -w condition can never hold (Slurm kill_invalid_depend)")
        q.add_argument("--keep-invalid-depend", dest="kill_invalid_depend", action="store_false",
                       help="leave them pending, saying why (the default)")
        q.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_queue(client: Client, args: argparse.Namespace) -> int:
    queue = api.Queue(name=args.name, priority=30)
    if args.queue_command == "update":
        current = [q for q in client.list_queues().queues if q.name == args.name]
        if current:
            queue.CopyFrom(current[0])
    for field in QUEUE_FIELDS:
        if getattr(args, field) is not None:
            setattr(queue, field, getattr(args, field))
    result = client.put_queue(queue, create=args.queue_command == "create")
    return emit(args, lambda: as_dict(result), lambda: print(f"Queue <{args.name}> {args.queue_command}d"))


def declare_host(p: argparse.ArgumentParser) -> None:
    hsub = p.add_subparsers(dest="host_command", required=True)
    for name, words in (("close", "no new jobs; its running jobs finish"), ("open", "take jobs again")):
        h = hsub.add_parser(name, help=f"{name} a host: {words}")
        h.add_argument("name", help="the host's name")
        if name == "close":
            h.add_argument("--reason", default="", help="why, shown in xce hosts and pending reasons")
        h.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_host(client: Client, args: argparse.Namespace) -> int:
    answer = client.control_host(args.name, args.host_command == "close", getattr(args, "reason", ""))
    return emit(args, lambda: as_dict(answer), lambda: print(
        f"host {shown(args.name)} is now {'closed' if answer.host.closed else 'open'}"))


def declare_reconfig(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print each replica's answer as JSON")


def reconfigure_all(client: Client) -> list[tuple[str, api.ReconfigureResponse | str]]:
    """Every replica re-reads its cluster file, the leader last (a follower with the old file that
    became leader meanwhile would push the old configuration back); each one's answer or why not.
    Every replica checks its file first (a dry run): one that refuses it stops everything before any
    replica took its own."""
    status = client.status()
    leader = next((r.grpc_address for r in status.replicas if r.role == "leader"), "")
    addresses = [r.grpc_address for r in status.replicas if r.grpc_address != leader] + \
        ([leader] if leader else [])
    for dry_run in (True, False):  # first every replica checks its file; then each takes it
        answers: list[tuple[str, api.ReconfigureResponse | str]] = []
        for address in addresses:
            try:
                with Client([address], client.credentials, deadline_s=20, call_timeout_s=15,
                            follow_leader=False) as one:
                    answers.append((address, one.call("AdminService", "Reconfigure",
                                                      api.ReconfigureRequest(dry_run=dry_run),
                                                      api.ReconfigureResponse)))
            except XceError as exc:
                if exc.code_name in ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "PERMISSION_DENIED"):
                    raise  # a file (or the caller) refused: no replica has taken anything
                answers.append((address, f"{exc.code_name}: {exc.message}"))
    return answers


def run_reconfig(client: Client, args: argparse.Namespace) -> int:
    answers = reconfigure_all(client)
    if args.json:
        return emit(args, lambda: {"replicas": [{"address": a, **(as_dict(r) if not isinstance(r, str)
                                                                   else {"error": r})} for a, r in answers]},
                    lambda: None)
    failed = False
    for address, answer in answers:
        if isinstance(answer, str):
            failed = True
            print(f"replica at {shown(address)}: not reached ({shown(answer)}); it reads its file when it "
                  "starts")
            continue
        what = "changed" if answer.changed else "unchanged"
        role = (" leader: committed" if answer.committed else " leader: not committed yet") if answer.leader \
            else ""
        note = f"; {shown(answer.message)}" if answer.message else ""
        print(f"replica {answer.replica_id} at {shown(address)}: file {what} "
              f"(digest {answer.config_digest[:12]}){role}{note}")
        failed |= answer.leader and not answer.committed
    return 1 if failed else 0
