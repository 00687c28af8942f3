"""LSF's commands over an XCE cluster: bsub, bjobs, bkill, ... as LSF 10.1 documents them.

Each command is a module here with `declare(parser)` and `run(client, args)`;
cli/lsf/entry.py runs it the way `xce` runs its own commands (the same
session, credentials and leader cache), in LSF's words. The scripts that
start them live in a bin directory of their own (xce/lsf_bin.py).
"""
