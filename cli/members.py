"""`xce member add|remove|list`: the controller replicas of the committed membership.

`add` takes a new replica that already runs as a learner (`xce controller
--config FILE --id N --join`, with its bundle) into the membership; the leader
then promotes it once it has caught up, and the Raft configuration takes it
in. `remove` lets a member go (the leader hands its leadership over first
when it is the one). Both wait, unless `--no-wait`, until the change is done:
the member is a voter, or gone. `list` shows each member's role in the
committed membership beside what the member says of itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from cli.output import as_dict
from cli.parser import STALE_HELP
from client.channel import Client, XceError
from xce.v1 import api_pb2 as api

WAIT_S = 120.0
POLL_S = 0.2


def declare_member(p: argparse.ArgumentParser) -> None:
    msub = p.add_subparsers(dest="member_command", required=True)
    q = msub.add_parser("add", help="take a new replica, running with --join, into the membership")
    q.add_argument("address", help="its gRPC HOST:PORT")
    q.add_argument("--id", type=int, default=0, help="its replica id (default: what it says it is)")
    q.add_argument("--raft", default="", help="its Raft HOST:PORT (default: what it says)")
    q.add_argument("--no-wait", action="store_true", help="return once it is a learner")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q = msub.add_parser("remove", help="let a member go (a learner at once; the leader hands over first)")
    q.add_argument("id", type=int, help="the member's id (xce member list)")
    q.add_argument("--no-wait", action="store_true", help="return once the removal has started")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q = msub.add_parser("list", help="the committed membership and what each member says")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q.add_argument("--stale", action="store_true", help=STALE_HELP)


def run_member(client: Client, args: argparse.Namespace) -> int:
    if args.member_command == "list":
        response = client.list_members(stale=args.stale)
        if args.json:
            print(json.dumps(as_dict(response)))
        else:
            print_members(response)
        return 0
    if args.member_command == "add":
        response = client.add_member(args.address, args.id, args.raft)
        added = next((m for m in response.members if m.grpc_address == args.address), None)
        if added is None:
            print(f"xce: {args.address} is not among the members after the add", file=sys.stderr)
            return 1
        member_id = added.id
        print(f"replica {member_id} ({args.address}) is a learner", file=sys.stderr)
        goal: int | None = api.MEMBER_VOTER
    else:
        member_id = args.id
        response = client.remove_member(member_id)
        goal = None
    if not args.no_wait:
        response = _wait(client, lambda r: _role(r, member_id) == goal,
                         f"replica {member_id} to be {_word(goal)}")
    if args.json:
        print(json.dumps(as_dict(response)))
    else:
        print(f"replica {member_id} is {_word(_role(response, member_id))}")
    return 0


def _role(response: api.MembersResponse, member_id: int) -> int | None:
    return next((m.role for m in response.members if m.id == member_id), None)


def _word(role: int | None) -> str:
    return "gone" if role is None else "a " + api.MemberRole.Name(role).removeprefix("MEMBER_").lower()


def _wait(client: Client, done: Callable[[api.MembersResponse], bool], what: str) -> api.MembersResponse:
    deadline = time.monotonic() + WAIT_S
    while True:
        response = client.list_members()
        if done(response):
            return response
        if time.monotonic() > deadline:
            raise XceError("DEADLINE_EXCEEDED",
                           f"waited {WAIT_S:.0f} s for {what}; `xce member list` shows where it is")
        time.sleep(POLL_S)


def print_members(response: api.MembersResponse) -> None:
    said = {r.id: r for r in response.replicas}
    print(f"{'ID':>3}  {'MEMBER':<10}{'RAFT STATE':<12}{'APPLIED':>9}  {'GRPC':<22}RAFT")
    for m in response.members:
        r = said.get(m.id)
        print(f"{m.id:>3}  {api.MemberRole.Name(m.role).removeprefix('MEMBER_').lower():<10}"
              f"{(r.role if r else '?'):<12}{(r.applied_index if r else 0):>9}  {m.grpc_address:<22}"
              f"{m.raft_address}")
    if response.bootstrap:
        print("the cluster file (bootstrap list) differs; the committed membership above wins:")
        for m in response.bootstrap:
            print(f"{m.id:>3}  {m.grpc_address:<22}{m.raft_address}")

