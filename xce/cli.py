"""The `xce` command line: daemons, the local cluster, and job commands.

Controllers come from `--controllers host:port,...`, else $XCE_CONTROLLERS,
else the cluster file (`--cluster FILE`, $XCE_CLUSTER, else the local
cluster's `cluster.toml` in the data directory: $XCE_DATA or ./xce-data,
else a deployment's /etc/xce/cluster.toml).
The cluster file also gives the TLS files; who the caller is comes from a
token or MUNGE (xce/credentials.py). Every read command takes --json.
Errors print the gRPC status and the server's message and exit 1 (2 for
usage and configuration errors).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from xce import cli_history, cli_member, cli_submit
from xce.array_spec import describe as array_describe
from xce.client import Client, XceError, new_request_id
from xce.cluster_file import cached_leader, grpc_addresses, remember_leader
from xce.credentials import Credentials, CredentialsError, for_cluster, new_token
from xce.http2 import Http2Transport
from xce.printable import shown
from xce.quorum_watch import EX_TEMPFAIL, QuorumWatch, gave_up
from xce.v1 import api_pb2 as api

if TYPE_CHECKING:
    from pathlib import Path

    from gateway.http_limits import HttpLimits

DEFAULT_DATA = "xce-data"
# The commands that change the cluster (a submit says more: its request id).
WRITES = frozenset({"kill", "stop", "resume", "hold", "release", "requeue", "checkpoint", "modify", "run",
                    "queue", "host", "token", "member"})
SYSTEM_CLUSTER_FILE = "/etc/xce/cluster.toml"  # where xce init's bundles put it on every host
STALE_HELP = "any replica answers from its own state, saying its revision (default: the leader, linearizable)"
ACTIONS = {"kill": api.KILL, "stop": api.STOP, "resume": api.RESUME, "hold": api.HOLD,
           "release": api.RELEASE, "requeue": api.REQUEUE, "checkpoint": api.CHECKPOINT}


def data_dir(explicit: str | None = None) -> str:
    return os.path.realpath(explicit or os.environ.get("XCE_DATA") or DEFAULT_DATA)


def cluster_file(args: argparse.Namespace) -> str | None:
    explicit = getattr(args, "cluster", None) or os.environ.get("XCE_CLUSTER")
    if explicit:
        return os.path.realpath(explicit)
    for path in (os.path.join(data_dir(), "cluster.toml"), SYSTEM_CLUSTER_FILE):
        if os.path.exists(path):
            return path
    return None


def path_arg(text: str) -> Path:
    """An argument naming a file, as a Path: pathlib (~5 ms to import) only for the commands that
    take one, none of them a client command's."""
    from pathlib import Path

    return Path(text)


def controllers(args: argparse.Namespace) -> list[str]:
    explicit = args.controllers or os.environ.get("XCE_CONTROLLERS")
    if explicit:
        return [a.strip() for a in explicit.split(",") if a.strip()]
    config_path = cluster_file(args)
    if config_path is None:
        local = os.path.join(data_dir(), "cluster.toml")
        raise SystemExit(f"xce: no --controllers, no local cluster at {local} "
                         f"(start one with `xce cluster up`) and no {SYSTEM_CLUSTER_FILE}")
    try:
        # Not the whole file: only replica hosts can read the password.
        return grpc_addresses(config_path, cached=True)
    except ValueError as exc:
        raise SystemExit(f"xce: {exc}") from None


def credentials(args: argparse.Namespace) -> Credentials:
    cert, key = getattr(args, "cert", None), getattr(args, "key", None)
    try:
        # A daemon with a certificate is named by it: no token from the files (an insecure
        # cluster's daemons take theirs from $XCE_TOKEN).
        token = os.environ.get("XCE_TOKEN") if cert is not None else None
        found = for_cluster(cluster_file(args), token=token, use_token_search=cert is None, cert=cert,
                            key=key, cached=True)
        found.check()
        return found
    except CredentialsError as exc:
        print(f"xce: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


class _Formatter(argparse.HelpFormatter):
    """argparse's, sized without importing shutil (~3 ms, with bz2 and lzma) for every parser: the
    terminal's width as shutil.get_terminal_size finds it ($COLUMNS, else stdout's, else 80)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        if width is None:
            try:
                columns = int(os.environ.get("COLUMNS", "0"))
            except ValueError:
                columns = 0
            if columns <= 0:
                try:
                    columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
                except (AttributeError, ValueError, OSError):
                    columns = 80
            width = (columns or 80) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class Parser(argparse.ArgumentParser):
    """A bad argument is one line on stderr and exit status 2 (usage is what --help is for)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {shown(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


class _Unbuilt:
    """Stands for the parser of a command not on this command line, and takes whatever a real one
    would: building all forty costs ~10 ms of every command (argparse looks up gettext
    catalogues on disk for every option)."""

    def __getattr__(self, name: str) -> Callable[..., _Unbuilt]:
        return lambda *args, **kwargs: self


class _Commands:
    """The subcommands' action, building only `only`'s parser (all, if only is None)."""

    def __init__(self, action: Any, only: str | None) -> None:
        self._action, self._only = action, only
        self.built = False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self._only is not None and name != self._only:
            return _Unbuilt()
        self.built = True
        return self._action.add_parser(name, **kwargs)


GLOBAL_OPTIONS = ("--controllers", "--cluster")


def command_word(words: Sequence[str]) -> str | None:
    """The subcommand a command line names, past the global options; None when unsure (an
    abbreviated option, -h), which builds every parser."""
    i = 0
    while i < len(words):
        word = words[i]
        if word in GLOBAL_OPTIONS:
            i += 2
        elif word.startswith(tuple(f"{option}=" for option in GLOBAL_OPTIONS)):
            i += 1
        else:
            return None if word.startswith("-") else word
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with `command`, only that subcommand's parser is built (the
    others are not needed to parse its line); every one if it names none."""
    parser = Parser(prog="xce", description="XCE batch workload manager")
    parser.add_argument("--controllers", help="host:port,... of the controller replicas")
    parser.add_argument("--cluster", help="the cluster file (replicas, TLS); default $XCE_CLUSTER or "
                                          "the local cluster's")
    sub = _Commands(parser.add_subparsers(dest="command", required=True), command)

    p = sub.add_parser("controller", help="run one controller replica")
    p.add_argument("--config", required=True, type=path_arg, help="the cluster file (cluster.toml)")
    p.add_argument("--id", required=True, type=int, help="this replica's id in the cluster file")
    p.add_argument("--join", action="store_true",
                   help="a new replica: run as a learner until `xce member add` takes it in")
    p.add_argument("--force-new-cluster", action="store_true",
                   help="disaster recovery: this survivor's state as a one-member cluster (etcd's name)")

    p = sub.add_parser("worker", help="run the worker daemon of this host")
    p.add_argument("--config", required=True, type=path_arg, help="the worker's file (worker.toml)")
    p.add_argument("--name", help="host name (default: from the config, else this machine's)")

    p = sub.add_parser("scheduler", help="run a scheduler (one holds the lease; others stand by)")
    p.add_argument("--id", help="scheduler id (default: random)")
    p.add_argument("--lease-s", type=float, default=10.0, help="lease duration in seconds")
    p.add_argument("--picker", default="fcfs", help="job_pick_plugin for queues without their own")
    p.add_argument("--cert", type=path_arg,
                   help="its certificate (role scheduler; the id defaults to its name)")
    p.add_argument("--key", type=path_arg, help="the certificate's key")
    p.add_argument("--metrics", default="", metavar="HOST:PORT", help="serve Prometheus /metrics there")

    p = sub.add_parser("ca", help="the cluster's certificate authority")
    casub = p.add_subparsers(dest="ca_command", required=True)
    q = casub.add_parser("init", help="create ca.crt and ca.key in DIR (unless they exist)")
    q.add_argument("--dir", required=True, type=path_arg, help="where ca.crt and ca.key go")
    q.add_argument("--cluster-id", default="xce", help="the CA's name (default xce)")
    q = casub.add_parser("issue", help="issue a certificate: role replica, worker, scheduler or client")
    q.add_argument("--dir", required=True, type=path_arg, help="where ca.crt and ca.key are")
    q.add_argument("--role", required=True, choices=("replica", "worker", "scheduler", "client"),
                   help="what the certificate names: a replica, worker, scheduler, or the shared client")
    q.add_argument("--name", required=True, help="replica id, host name, scheduler id, or any for client")
    q.add_argument("--san", action="append", default=[], help="a host name or IP it serves (replicas)")
    q.add_argument("--out", type=path_arg, help="where to write it (default: DIR)")
    q.add_argument("--days", type=int, default=825, help="validity (default 825 days)")

    p = sub.add_parser("init", help="make a deployment: CA, certificates, password, admin token; "
                                    "a bundle per host")
    p.add_argument("--replicas", required=True,
                   help="HOST:GRPC_PORT[:RAFT_PORT],... (Raft default: gRPC + 100)")
    p.add_argument("--workers", default="", help="the worker hosts' names, as they will join: n1,n2,...")
    p.add_argument("--schedulers", help="hosts that run a scheduler (default: every replica host)")
    p.add_argument("--cluster-id", default="xce", help="the cluster's id (default xce)")
    p.add_argument("--admin", default="root", help="the user the first admin token is for (default root)")
    p.add_argument("--data-dir", default="/var/lib/xce", help="the replicas' state (default /var/lib/xce)")
    p.add_argument("--spool-dir", default="/var/spool/xce",
                   help="the workers' spools (default /var/spool/xce)")
    p.add_argument("--out", required=True, type=path_arg, help="where to write (must not exist or be empty)")

    p = sub.add_parser("init-replica", help="the bundle of a replica to add, from an `xce init` output")
    p.add_argument("--deploy", required=True, type=path_arg, help="the `xce init --out` directory (its CA)")
    p.add_argument("--id", required=True, type=int, help="the new replica's id (one never used before)")
    p.add_argument("--address", required=True, help="HOST:GRPC_PORT[:RAFT_PORT] (Raft default: gRPC + 100)")

    p = sub.add_parser("token", help="bearer tokens (cluster admins)")
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
    q.add_argument("--scope-max-jobs", type=int, default=0, help="... at most this many unfinished jobs")
    q.add_argument("--scope-max-slots", type=int, default=0, help="... holding at most this many slots")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q = tsub.add_parser("list", help="the tokens (ids, users, roles; never the tokens)")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q = tsub.add_parser("revoke", help="revoke a token by id")
    q.add_argument("id", help="the token's id (xce token list)")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("whoami", help="who the cluster takes you for, and what you may do")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("cluster", help="a local cluster")
    csub = p.add_subparsers(dest="cluster_command", required=True)
    up = csub.add_parser("up", help="run a local cluster in the foreground (Ctrl-C stops it)")
    up.add_argument("--data", help=f"data directory (default $XCE_DATA or ./{DEFAULT_DATA})")
    up.add_argument("--replicas", type=int, default=3, help="controller replicas (default 3)")
    up.add_argument("--base-port", type=int, default=0, help="first port (default: free ports)")
    up.add_argument("--workers", type=int, default=2, help="local workers to start (default 2)")
    up.add_argument("--slots", type=int, default=4, help="slots per local worker (default 4)")

    p = sub.add_parser("demo", help="the whole story in a minute: jobs through a leader kill")
    p.add_argument("--jobs", type=int, default=100, help="jobs to run through the leader kill (default 100)")
    p.add_argument("--data", help="data directory (default: a fresh temporary one)")

    p = sub.add_parser("submit", help="submit a job or a job array (like bsub)")
    cli_submit.add_options(p)
    p.add_argument("--file", metavar="JOBS", help="many jobs in one request: one command line per line, "
                                                  "optionally led by its own options (- reads stdin)")
    p.add_argument("--json", action="store_true", help="print the submitted jobs as JSON")
    p.add_argument("--request-id", default="", metavar="ID",
                   help="the submit's request id (default: a new one): a submit that gave up or was "
                        "interrupted, asked again under its printed id, is found instead of made twice")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")

    p = sub.add_parser("jobs", help="list jobs (like bjobs)")
    p.add_argument("--state", help="only these states, comma-separated (PEND,RUN,...)")
    p.add_argument("--queue", help="only this queue")
    p.add_argument("--filter", action="append", default=[], help="field:op:value, repeatable")
    p.add_argument("-p", "--pending", action="store_true",
                   help="pending and preempted (SSUSP) jobs with their reasons (like bjobs -p)")
    p.add_argument("-A", "--array-elements", action="store_true",
                   help="every element of each job array, not only the array's summary")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)

    p = sub.add_parser("job", help="one job in full")
    p.add_argument("id", help="a job id, a readable id, or one element of an array: 17[42]")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)

    for action in ACTIONS:
        p = sub.add_parser(action, help=f"{action} a job, a job array, or some of its elements")
        p.add_argument("id", help="a job id, an array (17), or elements of it (17[1-100], 17[5,9])")
        p.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("peek", help="the end of a job's output, read on its host (like bpeek)")
    p.add_argument("id", help="job id (numeric, readable, or an array element 12[3])")
    p.add_argument("--stderr", action="store_true", help="its stderr (default: stdout)")
    p.add_argument("-n", "--bytes", type=int, default=65536, help="the last this many bytes (at most 524288)")

    p = sub.add_parser("run", help="force-run a pending job on a host (like brun)")
    p.add_argument("id", help="the pending job")
    p.add_argument("--host", "-m", required=True, help="the host to run it on")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("modify", help="change a job's priority, queue or resource requirement (like bmod)")
    p.add_argument("id", help="a job id, an array (17), or elements of it (17[1-100])")
    p.add_argument("--priority", type=cli_submit.int32, help="the new priority")
    p.add_argument("-q", "--queue", help="the new queue (while pending)")
    p.add_argument("-R", "--resource-req", help="the new resource requirement (while pending)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("queues", help="list queues (like bqueues)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)

    p = sub.add_parser("fairshare", help="shares, usage and priority of fair-share queues (bqueues -r)")
    p.add_argument("queue", nargs="?", help="only this queue")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)

    p = sub.add_parser("limits", help="the limits and what running jobs hold of them (like blimits)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)

    p = sub.add_parser("queue", help="create or update a queue")
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

    cli_history.add_parsers(sub, STALE_HELP)
    if command in (None, "snapshot"):  # it imports pathlib: not for other commands
        from xce import cli_snapshot

        cli_snapshot.add_parsers(sub)
    cli_member.add_parsers(sub, STALE_HELP)
    if command in (None, "record", "sim"):
        from xce import cli_sim

        cli_sim.add_parsers(sub)
    if command in (None, "launch"):
        from xce import cli_launch

        cli_launch.add_parser(sub)

    p = sub.add_parser("hosts", help="list hosts (like bhosts)")
    p.add_argument("-l", "--long", action="store_true",
                   help="each host in full: slots, memory, resources, tags (like bhosts -l)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    p.add_argument("--stale", action="store_true", help=STALE_HELP)

    p = sub.add_parser("host", help="close or open a host (like badmin hclose/hopen)")
    hsub = p.add_subparsers(dest="host_command", required=True)
    for name, words in (("close", "no new jobs; its running jobs finish"), ("open", "take jobs again")):
        h = hsub.add_parser(name, help=f"{name} a host: {words}")
        h.add_argument("name", help="the host's name")
        if name == "close":
            h.add_argument("--reason", default="", help="why, shown in xce hosts and pending reasons")
        h.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("status", help="every replica's role, term, indexes and health")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("gateway", help="serve the REST API (/xce/v1/) for people, scripts and agents")
    p.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT (default 127.0.0.1:8080)")
    p.add_argument("--max-event-streams", type=int, default=16, metavar="N",
                   help="event streams one user may follow at once (default 16)")
    http_limit_options(p)

    p = sub.add_parser("mcp", help="the MCP server for agents (stdio with its own key; or HTTP, each caller "
                                   "with theirs)")
    p.add_argument("--gateway", default="http://127.0.0.1:8080", help="the gateway's URL")
    p.add_argument("--http", default="", metavar="[HOST:]PORT",
                   help="serve streamable HTTP instead of stdio (host 127.0.0.1 unless given; another "
                        "host needs --tls-cert and --tls-key); every request must carry its caller's key")
    p.add_argument("--tls-cert", default="", help="certificate (PEM) for --http")
    p.add_argument("--tls-key", default="", help="its private key (PEM) for --http")
    http_limit_options(p)
    if command is not None and not sub.built:  # no such command: the full parser lists them
        return build_parser()
    return parser


def http_limit_options(p: argparse.ArgumentParser) -> None:
    """The connection limits of an HTTP server (gateway/http_guard.py; docs/SECURITY.md)."""
    from gateway.http_limits import HttpLimits

    d = HttpLimits()
    p.add_argument("--max-connections", type=int, default=d.max_connections, metavar="N",
                   help=f"connections open at once (default {d.max_connections})")
    p.add_argument("--max-connections-per-peer", type=int, default=d.max_connections_per_peer, metavar="N",
                   help=f"connections from one address (default {d.max_connections_per_peer})")
    p.add_argument("--header-timeout-s", type=float, default=d.header_timeout_s, metavar="S",
                   help=f"a request's headers must arrive within this (default {d.header_timeout_s:g})")
    p.add_argument("--body-timeout-s", type=float, default=d.body_timeout_s, metavar="S",
                   help=f"its body within this after them (default {d.body_timeout_s:g})")
    p.add_argument("--idle-timeout-s", type=float, default=d.idle_timeout_s, metavar="S",
                   help=f"an idle connection is closed after this (default {d.idle_timeout_s:g})")


def http_limits(args: argparse.Namespace) -> HttpLimits:
    from gateway.http_limits import HttpLimits

    return HttpLimits(args.max_connections, args.max_connections_per_peer, args.header_timeout_s,
                      args.body_timeout_s, args.idle_timeout_s)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    for word in words:
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:  # what the OS gave was not UTF-8 (argv decodes with surrogates)
            print(f"xce: an argument is not UTF-8 text: {word.encode('utf-8', 'replace')[:80]!r}",
                  file=sys.stderr)
            return 2
    args = build_parser(command_word(words)).parse_args(words)
    if args.command == "controller":
        from controller.main import run

        return run(args.config, args.id, args.join, args.force_new_cluster)
    if args.command == "worker":
        from worker.daemon import run as run_worker

        return run_worker(args.config, args.name)
    if args.command == "scheduler":
        from scheduler.daemon import run as run_scheduler
        from scheduler.picker import PickerError, load

        try:
            load(args.picker)
        except PickerError as exc:
            print(f"xce scheduler: {exc}", file=sys.stderr)
            return 2
        return run_scheduler(controllers(args), credentials(args), args.id, args.lease_s, args.picker,
                             args.metrics)
    if args.command == "mcp":
        from xce.credentials import CredentialsError, find_token

        try:
            key = find_token(None)
        except CredentialsError as exc:
            print(f"xce mcp: {exc}", file=sys.stderr)
            return 2
        if not key and not args.http:
            print("xce mcp: no key: give the agent's token as $XCE_TOKEN or $XCE_TOKEN_FILE (a 0600 file)",
                  file=sys.stderr)
            return 2
        from gateway.mcp_server import HttpOptions, run_http, run_stdio

        if not args.http:
            return run_stdio(args.gateway, key or "")
        # Over HTTP each request acts as the key it carries; the key found here (if any) is refused.
        return run_http(args.gateway, HttpOptions(args.http, args.tls_cert, args.tls_key, http_limits(args)),
                        refused_key=key or "")
    if args.command == "gateway":
        from gateway.main import run as run_gateway

        return run_gateway(controllers(args), credentials(args), args.listen, http_limits(args),
                           args.max_event_streams)
    if args.command == "cluster":
        from xce.local_cluster import up

        return up(path_arg(data_dir(args.data)), args.replicas, args.base_port, args.workers, args.slots)
    if args.command == "demo":
        from xce.demo import run as run_demo

        return run_demo(args.jobs, path_arg(args.data) if args.data else None)
    if args.command == "ca":
        return _ca(args)
    if args.command == "init":
        return _init(args)
    if args.command == "init-replica":
        return _init_replica(args)
    if args.command == "launch":
        from xce import cli_launch

        return cli_launch.run(args)
    if args.command == "snapshot":
        from xce import cli_snapshot
    if args.command == "sim":
        from xce import cli_sim

        return cli_sim.sim(args)
    if args.command == "snapshot" and args.snapshot_command == "status":
        return cli_snapshot.status(args)
    if args.command == "snapshot" and args.snapshot_command == "restore":
        return cli_snapshot.restore(args)
    if args.command == "submit":  # known before the call: printed if it cannot be answered
        args.request_id = args.request_id or new_request_id()
    try:
        addresses = controllers(args)
        creds = credentials(args)
        with Client(addresses, creds, deadline_s=wait_s(), transport=Http2Transport(creds)) as client:
            # The leader the last command found goes first; a wrong guess costs one redirect.
            client.prefer(cached_leader(addresses) or addresses[0])
            waiting = f"Waiting up to {client.deadline_s:.0f} s for it (Ctrl-C stops waiting)"
            if args.command == "submit":
                waiting += f"; the submit's request id is {args.request_id}"
            try:
                with QuorumWatch(addresses, creds, _say, waiting):
                    return _run(client, args)
            finally:
                if client.redirects or client.retries:
                    remember_leader(addresses, client.target)
    except XceError as exc:
        print(f"xce: {exc.code_name}: {shown(exc.message)}", file=sys.stderr)
        if exc.code_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):  # it ran out of time: it may be taken
            _said_unanswered(args, words)
            return EX_TEMPFAIL
        return 1
    except KeyboardInterrupt:
        print("xce: interrupted", file=sys.stderr)
        _said_unanswered(args, words)
        return 130
    except cli_submit.UsageError as exc:
        print(f"xce {args.command}: {shown(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `xce jobs | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141  # a shell's 128 + SIGPIPE


def wait_s() -> float:
    """How long a command waits for the cluster to answer ($XCE_WAIT_S, default 30 s)."""
    raw = os.environ.get("XCE_WAIT_S", "")
    try:
        seconds = float(raw) if raw else 30.0
    except ValueError:
        raise SystemExit(f"xce: XCE_WAIT_S={raw[:20]!r} is not a number of seconds") from None
    if not 0 < seconds <= 86400:
        raise SystemExit("xce: XCE_WAIT_S must be above 0 and at most a day")
    return seconds


def _say(line: str) -> None:
    print(f"xce: {line}", file=sys.stderr, flush=True)


def _said_unanswered(args: argparse.Namespace, words: Sequence[str]) -> None:
    """What a command that got no answer may have done, and how to ask again safely."""
    if args.command == "submit":
        rest = list(words[words.index("submit") + 1:])
        if "--request-id" in rest:
            del rest[rest.index("--request-id"):rest.index("--request-id") + 2]
        retry = shlex.join(["xce", "submit", "--request-id", args.request_id, *rest])
        _say(gave_up("the submit", args.request_id, retry))
    elif args.command in WRITES:
        _say(gave_up(f"`xce {args.command}`", "", ""))


def _init_replica(args: argparse.Namespace) -> int:
    from xce import deploy_init

    try:
        etc = deploy_init.add_replica(args.deploy, args.id, args.address)
    except deploy_init.InitError as exc:
        print(f"xce init-replica: {exc}", file=sys.stderr)
        return 2
    grpc = ":".join(args.address.split(":")[:2])
    print(f"wrote {etc}: copy it to the new host's /etc/xce (rsync -a), start xce-controller@{args.id} "
          f"(it joins as a learner), then run `xce member add {grpc}`")
    return 0


def _init(args: argparse.Namespace) -> int:
    from xce import deploy_init

    try:
        plan = deploy_init.plan(args.cluster_id, args.replicas, args.workers, args.schedulers, args.admin,
                                args.data_dir, args.spool_dir)
        hosts = deploy_init.write(plan, args.out)
    except deploy_init.InitError as exc:
        print(f"xce init: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: a bundle for each of {len(hosts)} hosts ({', '.join(h.name for h in hosts)}) "
          f"in {args.out / 'hosts'}; the CA in {args.out / 'ca'} (keep it off the hosts); the admin token "
          f"in {args.out / 'admin' / 'token'}. {args.out / 'README.txt'} says what goes where.")
    return 0


def _run(client: Client, args: argparse.Namespace) -> int:
    command = args.command
    if command == "submit":
        return _submit(client, args)
    if command == "snapshot":
        from xce import cli_snapshot

        return cli_snapshot.save(client, args)
    if command == "record":
        from xce import cli_sim

        return cli_sim.record(client, args)
    if command == "member":
        return cli_member.run(client, args)
    if command == "jobs":
        filters = list(args.filter)
        if args.state:
            filters.append(f"state:in:{args.state.upper()}")
        if args.queue:
            filters.append(f"queue:eq:{args.queue}")
        if args.pending:
            filters.append("state:in:PEND,PSUSP,SSUSP")
        elif not args.array_elements:
            filters.append("array:eq:0")  # an array is one line, its summary
        jobs = client.list_jobs(filters, stale=args.stale)
        if args.pending:
            waiting = _no_scheduler(client.status())
            jobs = [j for j in jobs if not j.spec.HasField("array")]  # its elements say why they wait
            return _emit(args, lambda: {"jobs": [_dict(j) for j in jobs], "no_scheduler": waiting},
                         lambda: _pending_table(jobs, waiting))
        return _emit(args, lambda: {"jobs": [_dict(j) for j in jobs]}, lambda: _job_table(jobs))
    if command == "history":
        finished = cli_history.history(client, args)
        return _emit(args, lambda: {"jobs": [_dict(j) for j in finished]},
                     lambda: cli_history.print_history(finished))
    if command == "acct":
        totals = cli_history.accounting(client, args)
        return _emit(args, lambda: _dict(totals), lambda: cli_history.print_accounting(totals))
    if command == "peek":
        got = client.job_output(args.id, args.stderr, args.bytes)
        if got.size > len(got.data):
            print(f"(the last {len(got.data)} of {got.size} bytes of {got.path} on {got.host})",
                  file=sys.stderr)
        sys.stdout.buffer.write(got.data)
        sys.stdout.flush()
        return 0
    if command == "audit":
        rows = cli_history.audit(client, args)
        return _emit(args, lambda: {"records": [_dict(r) for r in rows]},
                     lambda: cli_history.print_audit(rows))
    if command == "job":
        job = client.get_job(args.id, stale=args.stale)
        return _emit(args, lambda: _dict(job), lambda: _job_long(job))
    if command in ACTIONS:
        job = client.control(args.id, ACTIONS[command])
        if job.spec.HasField("array"):
            said = f"Job <{shown(args.id)}> {command}: done; array <{job.id}> now {_counts(job)}"
            return _emit(args, lambda: _dict(job), lambda: print(said))
        pending = " (being killed; pending again once it has ended)" if job.requeue_requested else \
            " (being killed)" if job.kill_requested else ""
        return _emit(args, lambda: _dict(job), lambda: print(f"Job <{job.id}> {command}: now "
                                                      f"{api.JobState.Name(job.state)}{pending}"))
    if command == "run":
        job = client.run(args.id, args.host)
        return _emit(args, lambda: _dict(job),
                     lambda: print(f"Job <{job.id}> is forced to run on <{job.host}>."))
    if command == "modify":
        job = client.modify(args.id, args.priority, args.queue, args.resource_req)
        return _emit(args, lambda: _dict(job), lambda: print(f"Job <{job.id}> modified"))
    if command == "queues":
        response = client.list_queues(stale=args.stale)
        return _emit(args, lambda: _dict(response), lambda: _queue_table(response))
    if command == "fairshare":
        return _fairshare(client, args)
    if command == "limits":
        response = client.list_queues(stale=args.stale, user_bounds=True)
        return _emit(args, lambda: {"limits": [_dict(x) for x in response.limits],
                                    "used": dict(response.limit_used),
                                    "per_user": _dict(response.user_bounds)}, lambda: _limit_table(response))
    if command == "queue":
        queue = api.Queue(name=args.name, priority=30)
        if args.queue_command == "update":
            current = [q for q in client.list_queues().queues if q.name == args.name]
            if current:
                queue.CopyFrom(current[0])
        for field in ("priority", "description", "closed", "inactive", "job_pick_plugin", "slot_limit",
                      "res_req", "kill_invalid_depend"):
            if getattr(args, field) is not None:
                setattr(queue, field, getattr(args, field))
        result = client.put_queue(queue, create=args.queue_command == "create")
        return _emit(args, lambda: _dict(result), lambda: print(f"Queue <{args.name}> {args.queue_command}d"))
    if command == "hosts":
        hosts = client.list_hosts(stale=args.stale)
        return _emit(args, lambda: _dict(hosts),
                     lambda: (_host_details if args.long else _host_table)(hosts))
    if command == "host":
        answer = client.control_host(args.name, args.host_command == "close", getattr(args, "reason", ""))
        return _emit(args, lambda: _dict(answer), lambda: print(
            f"host {shown(args.name)} is now {'closed' if answer.host.closed else 'open'}"))
    if command == "status":
        status = client.status()
        return _emit(args, lambda: _dict(status), lambda: _status_table(status))
    if command == "token":
        return _token(client, args)
    if command == "whoami":
        me = client.who_am_i()
        return _emit(args, lambda: _dict(me), lambda: print(f"{me.name} (role {me.role}, by {me.via}): "
                                                     f"{', '.join(me.permissions)}"))
    raise AssertionError(command)


def _token_scope(args: argparse.Namespace) -> api.TokenScope | None:
    def names(text: str) -> list[str]:
        return [name.strip() for name in text.split(",") if name.strip()]

    scope = api.TokenScope(queues=names(args.scope_queues), users=names(args.scope_users),
                           actions=names(args.scope_actions), max_jobs=args.scope_max_jobs,
                           max_slots=args.scope_max_slots)
    return scope if scope.ByteSize() else None


def _token(client: Client, args: argparse.Namespace) -> int:
    if args.token_command == "create":
        token, digest = new_token()
        expires_ms = int((time.time() + args.expires_s) * 1000) if args.expires_s > 0 else 0
        info = client.create_token(digest, args.user, args.role, expires_ms, args.description,
                                   _token_scope(args)).token
        return _emit(args, lambda: {"token": token, **_dict(info)}, lambda: print(
            f"{token}\n(token {info.id} for {info.user}, role {info.role}; shown once: store it 0600, "
            "for example in ~/.config/xce/token)"))
    if args.token_command == "list":
        found = client.list_tokens()
        return _emit(args, lambda: {"tokens": [_dict(t) for t in found]}, lambda: _token_table(found))
    revoked = client.revoke_token(args.id)
    return _emit(args, lambda: _dict(revoked), lambda: print(f"token {args.id} revoked"))


def _token_table(found: list[api.TokenInfo]) -> None:
    print(f"{'ID':<18}{'USER':<16}{'ROLE':<15}{'EXPIRES':<22}CREATED BY")
    for t in found:
        expires = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t.expires_ms / 1000)) \
            if t.expires_ms else "never"
        print(f"{t.id:<18}{t.user:<16}{t.role:<15}{expires:<22}{t.created_by}")


def _ca(args: argparse.Namespace) -> int:
    from xce import pki

    try:
        if args.ca_command == "init":
            print(f"CA certificate: {pki.init_ca(args.dir, args.cluster_id)}")
        else:
            cert, key = pki.issue(args.dir, args.role, args.name, args.san, args.days, args.out)
            print(f"certificate {cert}\nkey {key} (0600)")
    except pki.PkiError as exc:
        print(f"xce: {exc}", file=sys.stderr)
        return 2
    return 0


def _submit(client: Client, args: argparse.Namespace) -> int:
    specs = cli_submit.read_specs(args)
    response = client.submit(specs, request_id=args.request_id)
    jobs = list(response.jobs)
    return _emit(args, lambda: {"jobs": [_dict(j) for j in jobs]} if len(jobs) != 1 else _dict(jobs[0]),
                 lambda: print(cli_submit.describe(jobs)))


def _dict(message: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict  # 20-40 ms to import: only for --json

    return MessageToDict(message, preserving_proto_field_name=True)


def _emit(args: argparse.Namespace, data: Callable[[], dict[str, Any]], human: Any) -> int:
    """Print `data()` as JSON with --json, else call `human` (the JSON costs an import: only then)."""
    if getattr(args, "json", False):
        import json

        print(json.dumps(data(), indent=2, sort_keys=True))
    else:
        human()
    return 0


def job_label(job: api.Job) -> str:
    """A job as LSF names it: 17, or 17[42] for an element of array 17."""
    return f"{job.array_id}[{job.array_index}]" if job.array_id else str(job.id)


def _name(job: api.Job) -> str:
    if job.spec.HasField("array"):
        return f"{job.spec.name}[{array_describe(job.spec.array)}]"
    return job.spec.name or "-"


def _counts(job: api.Job) -> str:
    """An array's elements per state, as `bjobs -A` counts them."""
    found = [f"{n} {api.JobState.Name(state)}" for state, n in enumerate(job.array.counts) if n]
    return f"{job.array.size} elements: " + ", ".join(found)


def _job_table(jobs: list[api.Job]) -> None:
    print(f"{'JOBID':>8}  {'STAT':<6}{'QUEUE':<12}{'SLOTS':>5}  {'NAME':<20}COMMAND")
    for job in jobs:
        print(f"{job_label(job):>8}  {api.JobState.Name(job.state):<6}{shown(job.spec.queue):<12}"
              f"{job.spec.slots:>5}  {shown(_name(job))[:19]:<20}{shown(' '.join(job.spec.command))[:60]}")
    arrays = [j for j in jobs if j.spec.HasField("array")]
    if arrays:
        names = [api.JobState.Name(s) for s in (api.PEND, api.PSUSP, api.RUN, api.USUSP, api.SSUSP, api.DONE,
                                                api.EXIT, api.UNKWN)]
        print(f"\n{'ARRAY':>8}  {'NJOBS':>8}" + "".join(f"{n:>8}" for n in names) + "  NAME")
        for job in arrays:
            counts = job.array.counts
            row = "".join(f"{counts[api.JobState.Value(n)] if len(counts) > api.JobState.Value(n) else 0:>8}"
                          for n in names)
            print(f"{job.id:>8}  {job.array.size:>8}{row}  {shown(_name(job))[:40]}")


def _no_scheduler(status: api.StatusResponse) -> str:
    """Why no pass runs at all (G5: waiting for the lease), or "" if a scheduler holds it."""
    if not status.scheduler_lease_holder:
        return "no scheduler holds the lease"
    if status.scheduler_lease_expires_ms < time.time() * 1000:  # the leader's clock against ours
        return f"the lease of {status.scheduler_lease_holder} expired"
    return ""


def pending_reason(job: api.Job, no_scheduler: str = "") -> str:
    """What `xce jobs -p` says: the committed reason, with the code, unless nothing decides at all."""
    held = job.pending_code == api.PEND_JOB_HELD or job.state == api.PSUSP
    if job.state == api.SSUSP:  # preempted: what it waits for (controller/fsm/preempt.py)
        return f"SUSPENDED: {job.pending_reason or 'suspended by the system'}"
    if no_scheduler and not held:
        code, words = api.PEND_WAITING_FOR_SCHEDULER, no_scheduler
        if job.pending_reason:
            words += f" (last: {job.pending_reason})"
    elif job.pending_code == api.PENDING_REASON_UNSPECIFIED and not job.pending_reason:
        code, words = api.PEND_WAITING_FOR_SCHEDULER, "waiting for the scheduler's next pass"
    else:
        code, words = job.pending_code, job.pending_reason
    name = api.PendingReason.Name(code).removeprefix("PEND_") if code else "-"
    return f"{name}: {words}"


def _pending_table(jobs: list[api.Job], no_scheduler: str) -> None:
    print(f"{'JOBID':>8}  {'STAT':<6}{'QUEUE':<12}{'NAME':<20}PENDING REASON")
    for job in jobs:
        print(f"{job_label(job):>8}  {api.JobState.Name(job.state):<6}{shown(job.spec.queue):<12}"
              f"{shown(_name(job))[:19]:<20}{shown(pending_reason(job, no_scheduler))}")


def _job_long(job: api.Job) -> None:
    if job.array_id:
        own = f"job {job.id}" if job.id else "not a job yet"
        print(f"Job <{job_label(job)}> ({shown(job.readable_id)}; {own})")
    else:
        print(f"Job <{job.id}> ({shown(job.readable_id)})")
    reason = f"  ({shown(pending_reason(job))})" if job.state in (api.PEND, api.PSUSP, api.SSUSP) and \
        not job.spec.HasField("array") else ""
    print(f"  state      {api.JobState.Name(job.state)}{reason}")
    if job.spec.HasField("array"):
        print(f"  array      {shown(_name(job))}: {_counts(job)}")
    print(f"  name       {shown(_name(job))}")
    slots = str(job.spec.slots)
    if job.spec.HasField("min_slots"):
        slots = f"{job.spec.min_slots},{slots}"
    exclusive = "   exclusive (-x)" if job.spec.exclusive else ""
    print(f"  queue      {shown(job.spec.queue)}   priority {job.spec.priority}   slots {slots}{exclusive}")
    print(f"  command    {shown(' '.join(job.spec.command))}")
    project = f"   project {shown(job.spec.project)}" if job.spec.project else ""
    print(f"  cwd        {shown(job.spec.cwd or '-')}   user {shown(job.spec.user or '-')}{project}")
    print(f"  attempt    {job.attempt}   submitted {job.submit_time_ms} ms")
    if job.spec.resource_req:
        print(f"  resources  {shown(job.spec.resource_req)}")
    if job.host:
        print(f"  hosts      {_allocation(job)}")
    if job.spec.mem_limit_mb:
        print(f"  mem limit  {job.spec.mem_limit_mb} MB per host")
    if job.spec.run_limit_s or job.spec.estimate_s:
        estimate = f"   estimate {_hours_minutes(job.spec.estimate_s)}" if job.spec.estimate_s else ""
        limit = _hours_minutes(job.spec.run_limit_s) if job.spec.run_limit_s else "none"
        print(f"  run limit  {limit}{estimate}")
    if job.preemptions or job.preempting:
        victims = f"   preempting {', '.join(map(str, job.preempting))}" if job.preempting else ""
        print(f"  preempted  {job.preemptions} time{'s' if job.preemptions != 1 else ''}{victims}")
    if job.spec.depend:
        verdict = {api.DEPEND_PENDING: "not yet", api.DEPEND_SATISFIED: "satisfied",
                   api.DEPEND_NEVER: "never satisfied"}.get(job.depend_state, "not evaluated")
        kill = ", killed if it can never hold" if job.spec.kill_on_invalid_dep else ""
        print(f"  depends on {shown(job.spec.depend)}   ({verdict}{kill})")
    if job.usage_time_ms and job.state not in (api.DONE, api.EXIT):
        now = job.usage_now
        print(f"  usage      cpu {now.user_cpu_s + now.system_cpu_s:.1f} s, rss {now.max_rss_kb // 1024} MB, "
              f"running {now.wall_s:.0f} s (at {_when(job.usage_time_ms)}, on {shown(job.host)})")
    _start_failures(job)
    if job.state in (api.DONE, api.EXIT):
        reason = f"   ({shown(job.exit_reason)})" if job.exit_reason else ""
        print(f"  exit code  {job.exit_code}{reason}")
        if job.usage.wall_s or job.usage.user_cpu_s:
            used = job.usage
            print(f"  usage      cpu {used.user_cpu_s + used.system_cpu_s:.1f} s, max rss "
                  f"{used.max_rss_kb // 1024} MB, ran {used.wall_s:.0f} s")


def _start_failures(job: api.Job) -> None:
    """What its workers' refusals left: the last start that failed for a reason of its own (and how often
    such a start failed, when the job may try again), the hosts that refused its owner."""
    if job.start_error:
        count = job.start_failures
        tries = f" {count} time{'s' if count != 1 else ''}" if count else ""
        print(f"  start      failed{tries}: {shown(job.start_error)}")
        if job.state == api.PEND and job.not_before_ms:
            print(f"  next try   not before {_when(job.not_before_ms)}")
    if job.refused_owner:
        hosts = ", ".join(shown(h) for h in sorted(job.refused_owner))
        print(f"  refused    by {hosts} (its owner: no account there, or not allowed)")


def _hours_minutes(seconds: int) -> str:
    """LSF's [hour:]minute, as -W takes it."""
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}"


def _allocation(job: api.Job) -> str:
    """Where the attempt runs (or ran): host*slots, and what rusage[] reserved there."""
    if not job.allocation:
        return f"{shown(job.host)}*{job.spec.slots}"
    words = []
    for part in job.allocation:
        reserved = ",".join(f"{shown(name)}={amount}" for name, amount in sorted(part.resources.items()))
        words.append(f"{shown(part.host)}*{part.slots}" + (f" ({reserved})" if reserved else ""))
    return " ".join(words)


def _queue_table(response: api.ListQueuesResponse) -> None:
    print(f"{'QUEUE_NAME':<16}{'PRIO':>5}  {'STATUS':<15}{'MAX':>6}  PICKER")
    for queue in response.queues:
        default = "  (default)" if queue.name == response.default_queue else ""
        status = f"{'Closed' if queue.closed else 'Open'}:{'Inact' if queue.inactive else 'Active'}"
        limit = str(queue.slot_limit) if queue.slot_limit else "-"
        print(f"{queue.name:<16}{queue.priority:>5}  {status:<15}{limit:>6}  "
              f"{queue.job_pick_plugin or '-'}{default}")


def _fairshare(client: Client, args: argparse.Namespace) -> int:
    """Each fair-share queue's tree: shares, running slots, recent slots and the priority now."""
    from xce import fairshare

    response = client.list_queues(stale=args.stale)
    queues = [q for q in response.queues if q.HasField("fairshare") and args.queue in (None, q.name)]
    if args.queue and not queues:
        raise cli_submit.UsageError(f"no fair-share queue {args.queue!r} (fairshare in the cluster's file)")
    now = int(time.time() * 1000)
    tables = {}
    for queue in queues:
        usage = {(u.project, u.user): (u.slot_ms, u.stamp_ms) for u in response.share_usage
                 if u.queue == queue.name}
        jobs = client.list_jobs([f"queue:eq:{queue.name}", "state:in:PEND,RUN,USUSP,UNKWN"],
                                stale=args.stale)
        tables[queue.name] = (queue, fairshare.report(queue.fairshare, queue.name, jobs, usage, now))

    def table() -> None:
        for name, (queue, rows) in tables.items():
            half = queue.fairshare.half_life_s or fairshare.DEFAULT_HALF_LIFE_S
            print(f"queue {shown(name)} (picker {shown(queue.job_pick_plugin or '-')}, half-life {half} s)")
            print(f"  {'NODE':<36}{'SHARES':>8}{'RUNNING':>9}{'RECENT':>9}  PRIORITY")
            for path, shares, running, recent, priority in rows:
                depth = path.count("/") + path.count(":")
                label = ("  " * depth + (path.rsplit(":", 1)[-1] if ":" in path else path.rsplit("/", 1)[-1]))
                print(f"  {shown(label):<36}{shares:>8}{running:>9.1f}{recent:>9.2f}  {priority:.4g}")

    return _emit(args, lambda: {name: [dict(zip(("node", "shares", "running", "recent", "priority"), row,
                                                strict=True)) for row in rows]
                                for name, (_, rows) in tables.items()}, table)


def _limit_table(response: api.ListQueuesResponse) -> None:
    """Like blimits: per limit and consumer, what is held of each bound; first the bounds on each
    user's submits, and where the caller stands."""
    per_user = response.user_bounds
    if per_user.user:
        exempt = f" (role exempt: {', '.join(per_user.exempt_roles)})" if per_user.exempt else ""
        most = per_user.max_pend_jobs_per_user
        pend = f"{per_user.pending}/{most}" if most else f"{per_user.pending} (no limit)"
        rate = f"{per_user.submit_rate_per_user:g} jobs/s, {per_user.submit_burst_per_user} at once" \
            if per_user.submit_rate_per_user else "no bound"
        print(f"PER USER ([auth] in the cluster file), for {shown(per_user.user)}{exempt}:")
        print(f"  pending jobs     {pend:<24}max_pend_jobs_per_user")
        print(f"  submit rate      {rate:<24}submit_rate_per_user, submit_burst_per_user")
        print(f"  jobs a request   {per_user.max_jobs_per_request:<24}max_jobs_per_request")
        print(f"  array elements   {per_user.max_array_size:<24}max_array_size")
        print()
    if not response.limits:
        print("no limits ([[limits]] in the cluster's file)")
        return
    held: dict[tuple[str, str], dict[str, int]] = {}
    for counter, amount in response.limit_used.items():
        _, name, rest = counter.split("/", 2)
        key, _, metric = rest.rpartition("/")
        held.setdefault((name, key), {})[metric] = amount
    print(f"{'LIMIT':<20}{'CONSUMER':<32}USED/BOUND")
    for limit in response.limits:
        bounds = {"slots": limit.slots, "jobs": limit.jobs, **dict(limit.resources)}
        bounds = {m: b for m, b in bounds.items() if b > 0}
        rows = sorted((key, used) for (name, key), used in held.items() if name == limit.name) \
            or [("all", {})]
        for key, used in rows:
            who = "; ".join(filter(None, [", ".join(_consumer(part) for part in key.split(","))
                                          if key != "all" else "", _scope(limit)])) or "all jobs"
            shown_bounds = "  ".join(f"{m} {used.get(m, 0)}/{b}" for m, b in bounds.items())
            print(f"{shown(limit.name):<20}{shown(who):<32}{shown_bounds}")


def _consumer(part: str) -> str:
    kind, _, value = part.partition("=")
    return f"{ {'u': 'user', 'q': 'queue', 'p': 'project'}.get(kind, kind)} {value}"


def _scope(limit: api.Limit) -> str:
    named = (("users", limit.users), ("queues", limit.queues), ("projects", limit.projects))
    lists = [(w, v) for w, v in named if v]
    return "; ".join(f"{w} {','.join(v)}" for w, v in lists)


def _host_status(host: api.Host) -> str:
    """As bhosts says it: ok, unavail, closed_Adm (by an operator), closed_Full (no slots: MXJ=0)."""
    if host.status == api.HOST_UNAVAIL:
        return "unavail"
    if host.closed:
        return "closed_Adm"
    if host.status == api.HOST_OK and host.spec.slots == 0:
        return "closed_Full"
    return {api.HOST_OK: "ok"}.get(host.status, "?")


def _host_table(response: api.ListHostsResponse) -> None:
    print(f"{'HOST_NAME':<20}{'STATUS':<12}{'MAX':>5}{'USED':>6}{'RUN':>5}{'GEN':>6}  TAGS")
    for host in response.hosts:
        print(f"{host.spec.name:<20}{_host_status(host):<12}{host.spec.slots:>5}{host.slots_used:>6}"
              f"{host.running_jobs:>5}{host.generation:>6}  {','.join(map(shown, host.spec.tags)) or '-'}")


_LOAD_ORDER = ("r15s", "r1m", "r15m", "ut", "pg", "io", "ls", "it", "tmp", "swp", "mem")  # as lsload


def _host_details(response: api.ListHostsResponse) -> None:
    """`xce hosts -l`: what the resource requirement language sees of each host (resreq.py names)."""
    for n, host in enumerate(response.hosts):
        status = _host_status(host)
        since = f", since {_when(host.status_time_ms)}" if host.status_time_ms else ""
        resources = " ".join(f"{shown(name)}={value:g}"
                             for name, value in sorted(host.spec.resources.items()))
        print(("\n" if n else "") + f"HOST {shown(host.spec.name)}")
        print(f"  status     {status} (generation {host.generation}{since})")
        print(f"  slots      {host.spec.slots} (used {host.slots_used}, jobs running {host.running_jobs})")
        print(f"  maxmem     {host.spec.memory_mb} MB" if host.spec.memory_mb else "  maxmem     -")
        print(f"  resources  {resources or '-'}")
        if host.reserved:
            reserved = sorted(host.reserved.items())
            print("  reserved   " + " ".join(f"{shown(name)}={amount}" for name, amount in reserved))
        print(f"  tags       {', '.join(shown(t) for t in host.spec.tags) or '-'}")
        if host.load:  # the planner's (select[r1m < 2]), committed every [hosts] load_commit_s at most
            load = " ".join(f"{name}={host.load[name]:g}" for name in _LOAD_ORDER if name in host.load)
            print(f"  load       {load} (at {_when(host.load_time_ms)})")
        if host.groups:
            print(f"  groups     {', '.join(shown(g) for g in host.groups)}")
        if host.closed:
            by = f" by {shown(host.closed_by)}" if host.closed_by else ""
            print(f"  closed     {_when(host.closed_time_ms)}{by}: {shown(host.closed_reason) or '-'}")
    if response.shared:
        print("\nSHARED RESOURCES")
        for resource in response.shared:
            print(f"  {shown(resource.name):<20} {response.shared_used.get(resource.name, 0)} of "
                  f"{resource.total} in use")


def _when(ms: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _status_table(status: api.StatusResponse) -> None:
    print(f"cluster {status.cluster_id}")
    print(f"{'ID':>3}  {'ROLE':<12}{'TERM':>6}{'COMMIT':>9}{'APPLIED':>9}{'PID':>8}  {'GRPC':<22}{'FMT':>4}  "
          "HEALTH")
    for r in status.replicas:
        print(f"{r.id:>3}  {r.role:<12}{r.term:>6}{r.commit_index:>9}{r.applied_index:>9}{r.pid:>8}  "
              f"{r.grpc_address:<22}{r.entry_format or '-':>4}  {r.health}")
    print(f"entry kinds in use past the baseline: {', '.join(status.enabled_entry_kinds) or 'none'}")
    recovery = status.recovery
    if recovery.waiting:
        wait = "the fence's wait is over" if recovery.wait_over else \
            f"the fence's wait until {_when(recovery.until_ms)}" if recovery.until_ms else "the fence's wait"
        print(f"recovering ({recovery.why}): nothing is dispatched until these hosts joined again or were "
              f"given up: {', '.join(recovery.hosts) or 'none left'}; and {wait}")
    if status.bootstrap:
        # The cluster file is only where a cluster starts: the committed membership wins.
        print("members (committed): " + ", ".join(
            f"{m.id} {api.MemberRole.Name(m.role).removeprefix('MEMBER_').lower()} {m.grpc_address}"
            for m in status.members))
        print("cluster file (bootstrap): " + ", ".join(f"{m.id} {m.grpc_address}" for m in status.bootstrap))
    # During a rolling upgrade: which replicas' code still lacks what others understand.
    known = [set(r.entry_kinds) for r in status.replicas if r.entry_kinds]
    every = set().union(*known) if known else set()
    for r in status.replicas:
        missing = sorted(every - set(r.entry_kinds)) if r.entry_kinds else []
        if missing:
            print(f"replica {r.id} does not understand: {', '.join(missing)}")


# Commands that only talk to the cluster and print: nothing of theirs is left to run once they return.
FAST_EXIT = frozenset({"submit", "jobs", "job", *ACTIONS, "run", "modify", "queues", "queue", "limits",
                       "fairshare", "history", "acct", "audit", "peek", "hosts", "host", "status", "whoami",
                       "token", "member", "launch"})


def entry() -> NoReturn:
    """The `xce` program. A client command (FAST_EXIT) ends with os._exit once its output is
    flushed: tearing the interpreter down (upb's descriptors, ssl, every module) costs ~20 ms of
    each command, and by then the answer is printed, the leader cache written and the connection
    closed. Daemons and commands that write files exit as usual (atexit, logging's flush)."""
    if command_word(sys.argv[1:]) not in FAST_EXIT:
        sys.exit(main())
    try:
        code: object = main()
    except SystemExit as exc:  # as the interpreter would: None is 0, a message goes to stderr with 1
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:  # `xce jobs | head`
        code = 141
    except (OSError, ValueError):  # a full disk, say: the interpreter's own code for it
        code = 120
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


if __name__ == "__main__":
    entry()
