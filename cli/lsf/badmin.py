"""badmin: LSF's administration command, as far as XCE carries it.

`badmin showconf mbd` prints the batch configuration as LSF does (a header,
then `NAME = value` lines) and makes the files LSF's tools read beside it:
LSF_CONFDIR/lsbatch/CLUSTER/configdir/lsb.params (DEFAULT_QUEUE) under a
directory of the caller's own (~/.xce/lsf), LSB_SHAREDIR/CLUSTER/logdir.
`badmin reconfig` (and `mbdrestart`) makes every replica re-read its
cluster file, the leader committing what changed (`xce reconfig`).
`badmin hclose|hopen HOST...` closes and opens hosts; `qclose|qopen|qact|
qinact QUEUE...` closes, opens, activates and inactivates queues.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from cli.lsf.lsclusters import cluster_name
from client.channel import Client, XceError
from xce import lsf_bin
from xce.printable import shown

SUBCOMMANDS = ("showconf", "hclose", "hopen", "qclose", "qopen", "qact", "qinact", "reconfig", "mbdrestart")


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("subcommand", choices=SUBCOMMANDS, metavar="subcommand",
                   help=f"one of {', '.join(SUBCOMMANDS)}")
    p.add_argument("-C", dest="comment", metavar="comment", help="why (hclose: the host's closed reason)")
    p.add_argument("names", nargs="*", metavar="name", help="mbd (showconf), hosts or queues")


def prepare(args: argparse.Namespace) -> bool:
    if args.subcommand == "showconf" and args.names not in (["mbd"], ["lim"]):
        raise ValueError("showconf mbd | lim")
    if args.subcommand not in ("showconf", "reconfig", "mbdrestart") and not args.names:
        raise ValueError(f"{args.subcommand}: name a host or queue")
    return True


def user_conf_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".xce", "lsf")


def _showconf(client: Client) -> int:
    status = client.status()
    queues = client.list_queues()
    cluster = cluster_name(status.cluster_id)
    base = user_conf_dir()
    confdir, sharedir = os.path.join(base, "conf"), os.path.join(base, "work")
    params = os.path.join(confdir, "lsbatch", cluster, "configdir")
    os.makedirs(params, mode=0o700, exist_ok=True)
    os.makedirs(os.path.join(sharedir, cluster, "logdir"), mode=0o700, exist_ok=True)
    with open(os.path.join(params, "lsb.params"), "w", encoding="utf-8") as out:
        out.write("# written by XCE's badmin showconf (cli/lsf/badmin.py) from the cluster's queues\n"
                  "Begin Parameters\n"
                  f"DEFAULT_QUEUE = {queues.default_queue or 'normal'}\n"
                  "CLEAN_PERIOD = 3600\nEnd Parameters\n")
    with open(os.path.join(confdir, "lsf.conf"), "w", encoding="utf-8") as out:
        out.write(lsf_bin.LSF_CONF)
    print(f"MBD configuration at {time.strftime('%a %b %e %H:%M:%S %Y')}")
    for key, value in (("LSB_SHAREDIR", sharedir), ("LSF_CONFDIR", confdir), ("LSF_ENVDIR", confdir),
                       ("LSF_BINDIR", lsf_bin.bin_dir()), ("LSF_UNIT_FOR_LIMITS", "MB"),
                       ("LSF_VERSION", "10.1"), ("LSB_DEFAULTQUEUE", queues.default_queue or "normal")):
        print(f"    {key} = {value}")
    return 0


def _reconfig(client: Client) -> int:
    """LSF's words around `xce reconfig` (cli/admin.py): every replica re-reads its file."""
    from cli.admin import reconfigure_all

    print("\nChecking configuration files ...\n", flush=True)
    try:
        answers = reconfigure_all(client)
    except XceError as exc:
        if exc.code_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            raise
        print("There are fatal errors.\n", file=sys.stderr)
        print(shown(exc.message), file=sys.stderr)
        return 255
    unreached = [address for address, answer in answers if isinstance(answer, str)]
    uncommitted = [a for _, a in answers if not isinstance(a, str) and a.leader and not a.committed]
    notes = sorted({a.message for _, a in answers if not isinstance(a, str) and a.message})
    print("No errors found.\n")
    for note in notes:
        print(f"Warning: {shown(note)}")
    for address in unreached:
        print(f"Warning: the replica at {shown(address)} did not answer: it reads its file when it starts")
    if uncommitted:
        print("Reconfiguration initiated; the leader has not committed it yet", file=sys.stderr)
        return 255
    print("Reconfiguration initiated")
    return 0


def run(client: Client, args: argparse.Namespace) -> int:
    if args.subcommand == "showconf":
        return _showconf(client)
    if args.subcommand in ("reconfig", "mbdrestart"):
        return _reconfig(client)
    failed = False
    for name in args.names:
        try:
            if args.subcommand in ("hclose", "hopen"):
                client.control_host(name, args.subcommand == "hclose", args.comment or "")
                print(f"{'Close' if args.subcommand == 'hclose' else 'Open'} <{shown(name)}> ...... done")
            else:
                _queue(client, name, args.subcommand)
                print(f"Queue <{shown(name)}> is {_QUEUE_DONE[args.subcommand]}")
        except XceError as exc:
            if exc.code_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                raise
            failed = True
            print(f"{shown(name)}: {shown(exc.message)}", file=sys.stderr)
    return 255 if failed else 0


_QUEUE_DONE = {"qclose": "closed", "qopen": "opened", "qact": "activated", "qinact": "inactivated"}


def _queue(client: Client, name: str, subcommand: str) -> None:
    found = [q for q in client.list_queues().queues if q.name == name]
    if not found:
        raise XceError("NOT_FOUND", "No such queue")
    queue = found[0]
    if subcommand in ("qclose", "qopen"):
        queue.closed = subcommand == "qclose"
    else:
        queue.inactive = subcommand == "qinact"
    client.put_queue(queue, create=False)


def refused(args: argparse.Namespace, exc: XceError) -> str:
    return f"badmin: {shown(exc.message)}"
