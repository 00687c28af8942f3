"""One command's session with the cluster, and the one place its errors become exit statuses.

The client tries the leader the last command found first (a wrong guess
costs one redirect) and remembers the one that answered. While it waits for
a quorum, the quorum watch says so on stderr. Errors print the gRPC status
and the server's message and exit 1; a command that ran out of time exits
EX_TEMPFAIL (75), interrupted 130, a reader that went away 141 (a shell's
128 + SIGPIPE), a bad argument found past the parser 2. A write that got no
answer may still take effect: it is said so, and a command with a request id
(a submit) is told how to ask again under it without doing it twice.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Sequence

from cli.locate import controllers, credentials
from cli.parser import UsageError
from client.channel import Client, XceError, new_request_id
from client.cluster_file import cached_leader, remember_leader
from client.http2 import Http2Transport
from client.quorum_watch import EX_TEMPFAIL, QuorumWatch, gave_up
from xce.printable import shown


def connected(args: argparse.Namespace, run: Callable[[Client, argparse.Namespace], int],
              words: Sequence[str] = (), writes: bool = False,
              refused: Callable[[XceError], int] | None = None) -> int:
    """`run(client, args)` against the cluster; `words`, the command line, for a retry's. `refused`
    says a refusal in its own words (LSF's commands) and gives the exit status."""
    if hasattr(args, "request_id"):  # known before the call: printed if it cannot be answered
        args.request_id = args.request_id or new_request_id()
    try:
        addresses = controllers(args)
        creds = credentials(args)
        creds.client = "cli"  # for the audit trail's `via`: a claim, which decides nothing
        with Client(addresses, creds, deadline_s=wait_s(), transport=Http2Transport(creds)) as client:
            # The leader the last command found goes first; a wrong guess costs one redirect.
            client.prefer(cached_leader(addresses) or addresses[0])
            waiting = f"Waiting up to {client.deadline_s:.0f} s for it (Ctrl-C stops waiting)"
            if hasattr(args, "request_id"):
                waiting += f"; the {args.command}'s request id is {args.request_id}"
            try:
                with QuorumWatch(addresses, creds, _say, waiting):
                    return run(client, args)
            finally:
                if client.redirects or client.retries:
                    remember_leader(addresses, client.target)
    except XceError as exc:
        # It ran out of time: it may be taken.
        unanswered = exc.code_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
        if refused is not None and not unanswered:
            return refused(exc)
        print(f"xce: {exc.code_name}: {shown(exc.message)}", file=sys.stderr)
        if unanswered:
            _said_unanswered(args, words, writes)
            return EX_TEMPFAIL
        return 1
    except KeyboardInterrupt:
        print("xce: interrupted", file=sys.stderr)
        _said_unanswered(args, words, writes)
        return 130
    except UsageError as exc:
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


def _said_unanswered(args: argparse.Namespace, words: Sequence[str], writes: bool) -> None:
    """What a command that got no answer may have done, and how to ask again safely."""
    if hasattr(args, "request_id"):
        rest = list(words[words.index(args.command) + 1:])
        if "--request-id" in rest:
            del rest[rest.index("--request-id"):rest.index("--request-id") + 2]
        retry = shlex.join(["xce", args.command, "--request-id", args.request_id, *rest])
        _say(gave_up(f"the {args.command}", args.request_id, retry))
    elif writes:
        _say(gave_up(f"`xce {args.command}`", "", ""))
