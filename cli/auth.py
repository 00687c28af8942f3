"""Who may do what: `xce token create|list|revoke` (bearer tokens, cluster admins) and `xce whoami`.

A token is printed once, when made; the cluster keeps only its hash. An
agent's key may be scoped to some queues, owners and actions, and to a
number of unfinished jobs and slots.
"""

from __future__ import annotations

import argparse
import time

from cli.output import as_dict, emit
from client.channel import Client
from client.credentials import new_token
from xce.v1 import api_pb2 as api


def declare_token(p: argparse.ArgumentParser) -> None:
    tsub = p.add_subparsers(dest="token_command", required=True)
    q = tsub.add_parser("create", help="make a token; it is printed once, and only its hash is stored")
    q.add_argument("--user", required=True, help="who the token speaks for")
    q.add_argument("--role", default="user", help="user (default), operator, cluster_admin, ...")
    q.add_argument("--expires-s", type=int, default=0, help="seconds it is valid (default: no expiry)")
    q.add_argument("--description", default="", help="words for whoever lists the tokens")
    q.add_argument("--scope-queues", default="", help="an agent key's scope: only jobs of these queues (a,b)")
    q.add_argument("--scope-users", default="", help="... only jobs of these owners")
    q.add_argument("--scope-actions", default="",
                   help="... only these actions (submit,kill,stop,resume,hold,release,requeue,modify,run)")
    q.add_argument("--scope-clusters", default="",
                   help="... only these clusters of the gateway's clusters file (a,b; this one's name too)")
    q.add_argument("--scope-max-jobs", type=int, default=0, help="... at most this many unfinished jobs")
    q.add_argument("--scope-max-slots", type=int, default=0, help="... holding at most this many slots")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q = tsub.add_parser("list", help="the tokens (ids, users, roles; never the tokens)")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q = tsub.add_parser("revoke", help="revoke a token by id")
    q.add_argument("id", help="the token's id (xce token list)")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_token(client: Client, args: argparse.Namespace) -> int:
    if args.token_command == "create":
        token, digest = new_token()
        expires_ms = int((time.time() + args.expires_s) * 1000) if args.expires_s > 0 else 0
        info = client.create_token(digest, args.user, args.role, expires_ms, args.description,
                                   _token_scope(args)).token
        return emit(args, lambda: {"token": token, **as_dict(info)}, lambda: print(
            f"{token}\n(token {info.id} for {info.user}, role {info.role}; shown once: store it 0600, "
            "for example in ~/.config/xce/token)"))
    if args.token_command == "list":
        found = client.list_tokens()
        return emit(args, lambda: {"tokens": [as_dict(t) for t in found]}, lambda: _token_table(found))
    revoked = client.revoke_token(args.id)
    return emit(args, lambda: as_dict(revoked), lambda: print(f"token {args.id} revoked"))


def declare_whoami(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_whoami(client: Client, args: argparse.Namespace) -> int:
    me = client.who_am_i()
    return emit(args, lambda: as_dict(me), lambda: print(f"{me.name} (role {me.role}, by {me.via}): "
                                                       f"{', '.join(me.permissions)}"))


def _token_scope(args: argparse.Namespace) -> api.TokenScope | None:
    def names(text: str) -> list[str]:
        return [name.strip() for name in text.split(",") if name.strip()]

    scope = api.TokenScope(queues=names(args.scope_queues), users=names(args.scope_users),
                           actions=names(args.scope_actions), clusters=names(args.scope_clusters),
                           max_jobs=args.scope_max_jobs,
                           max_slots=args.scope_max_slots)
    return scope if scope.ByteSize() else None


def _token_table(found: list[api.TokenInfo]) -> None:
    print(f"{'ID':<18}{'USER':<16}{'ROLE':<15}{'EXPIRES':<22}CREATED BY")
    for t in found:
        expires = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t.expires_ms / 1000)) \
            if t.expires_ms else "never"
        print(f"{t.id:<18}{t.user:<16}{t.role:<15}{expires:<22}{t.created_by}")
