"""bpeek: the output of a running (or recently finished) job so far, read on its host.

`bpeek [-f] job_ID`: LSF's header line (`<< output from stdout >>`), then
the last of its stdout (stderr goes with it when -o named one file for
both). `-f` follows until the job ends.
"""

from __future__ import annotations

import argparse
import sys
import time

from client.channel import Client, XceError
from xce.printable import shown

MAX_BYTES = 512 * 1024


def declare(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("-f", dest="follow", action="store_true", help="follow the output as it grows")
    p.add_argument("id", metavar="job_ID", help='a job id, or "17[3]"')


def run(client: Client, args: argparse.Namespace) -> int:
    got = client.job_output(args.id, False, MAX_BYTES)
    print("<< output from stdout >>", flush=True)
    sys.stdout.buffer.write(got.data)
    sys.stdout.flush()
    size = got.size
    while args.follow:
        job = client.get_job(args.id)
        time.sleep(1.0)
        got = client.job_output(args.id, False, MAX_BYTES)
        if got.size > size:
            sys.stdout.buffer.write(got.data[-(got.size - size):])
            sys.stdout.flush()
            size = got.size
        if job.state not in (1, 2, 3, 4, 5):  # ended: nothing more will come
            break
    return 0


def refused(args: argparse.Namespace, exc: XceError) -> str:
    if exc.code_name == "NOT_FOUND":
        return f"Job <{shown(args.id)}>: No matching job found"
    return f"Job <{shown(args.id)}>: {shown(exc.message)}"
