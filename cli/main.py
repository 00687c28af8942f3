"""The `xce` command line: daemons, the local cluster, and job commands.

`main` parses the line with the parser of the command it names, looks the
command up in the table (cli/table.py) and runs it: on the cluster, inside
the session's boundary (cli/session.py), or here. Where the cluster is and
who the caller is: cli/locate.py. Every read command takes --json. Errors
print the gRPC status and the server's message and exit 1 (2 for usage and
configuration errors).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from cli import session
from cli.parser import build_parser, command_word
from cli.table import BY_NAME
from xce import proto_load

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import NoReturn

# Commands that only talk to the cluster and print: nothing of theirs is left to run once they return.
FAST_EXIT = frozenset(command.name for command in BY_NAME.values() if command.fast_exit)


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
    command = BY_NAME[args.command]
    if not command.connects:
        return command.run_local(args)
    return session.connected(args, command.run_on, words, command.writes)


def entry() -> NoReturn:
    """The `xce` program. A client command (FAST_EXIT) ends with os._exit once its output is
    flushed: tearing the interpreter down (upb's descriptors, ssl, every module) costs ~20 ms of
    each command, and by then the answer is printed, the leader cache written and the connection
    closed. Daemons and commands that write files exit as usual (atexit, logging's flush). A client
    command also leaves protobuf's well-known types out (xce/proto_load.py)."""
    if command_word(sys.argv[1:]) not in FAST_EXIT:
        proto_load.make_all()  # a daemon, or a command that writes files: no class made by chance
        sys.exit(main())
    proto_load.without_well_known_types()
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
