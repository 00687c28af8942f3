"""`xce snapshot save|status|restore`: backups (controller/backup.py, controller/restore.py).

`save` asks the leader for a consistent copy of its state (every write
acknowledged before the request is in it), checks it against the checksum
the leader sends last, and writes FILE (0600: it holds every job's
environment and the token hashes) with the checksum as its trailer. FILE
must not exist. `status` checks a backup and says what it holds. `restore`
builds one replica of a new cluster from it, offline (run it for each
replica of the new cluster's file, then start them): a new cluster id unless
`--keep-id`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path  # (the command table imports this module only for its command)

from cli import session
from client.channel import Client, XceError
from xce.private import open_private


def declare_snapshot(p: argparse.ArgumentParser) -> None:
    ssub = p.add_subparsers(dest="snapshot_command", required=True)
    q = ssub.add_parser("save", help="save a consistent snapshot of the cluster's state (cluster admins)")
    q.add_argument("file", help="the backup file")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q = ssub.add_parser("status", help="check a snapshot file and say what it holds")
    q.add_argument("file", help="the backup file")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")
    q = ssub.add_parser("restore", help="build a replica of a new cluster from a snapshot file (offline)")
    q.add_argument("file", help="the backup file")
    q.add_argument("--config", required=True, type=Path, help="the new cluster's file (its replicas, id)")
    q.add_argument("--id", required=True, type=int, help="which of its replicas to build")
    q.add_argument("--data", type=Path, help="the replica's data directory (default: from the file)")
    q.add_argument("--keep-id", action="store_true",
                   help="keep the backup's cluster id (the file's must match)")
    q.add_argument("--json", action="store_true", help="print the answer as JSON")


def run_snapshot(args: argparse.Namespace) -> int:
    """`save` talks to the leader; `status` and `restore` work on files here, with no cluster."""
    if args.snapshot_command == "status":
        return status(args)
    if args.snapshot_command == "restore":
        return restore(args)
    return session.connected(args, save)


def save(client: Client, args: argparse.Namespace) -> int:
    from controller import backup
    from controller.store import StoreError

    target = os.path.abspath(args.file)
    if os.path.lexists(target):
        print(f"xce: {target} exists; choose another name (a snapshot never replaces a file)",
              file=sys.stderr)
        return 2
    part = target + ".part"
    try:
        with os.fdopen(open_private(part), "wb") as out:
            header, sha256 = client.save_snapshot(out)
            out.write(backup.trailer(sha256))  # the leader's checksum, which what arrived matched
            out.flush()
            os.fsync(out.fileno())
        backup.verify(Path(part))  # read back: a disk that lost a write says so now, not at a restore
        os.rename(part, target)
    except XceError:
        os.unlink(part)
        raise
    except (OSError, StoreError) as exc:
        if os.path.exists(part):
            os.unlink(part)
        print(f"xce: cannot write {target}: {exc}", file=sys.stderr)
        return 1
    found = {"file": target, "cluster_id": header.cluster_id, "revision": header.revision,
             "bytes": os.path.getsize(target)}
    _print(args, found, f"saved {target}: cluster {header.cluster_id} at revision {header.revision}, "
                        f"{found['bytes']} bytes, SHA-256 checked")
    return 0


def status(args: argparse.Namespace) -> int:
    from controller import backup
    from controller.store import StoreError

    try:
        found = backup.verify(Path(args.file).resolve())
    except StoreError as exc:
        print(f"xce: {exc}", file=sys.stderr)
        return 1
    facts = {"file": str(found.path), "cluster_id": found.cluster_id, "revision": found.revision,
             "bytes": found.path.stat().st_size}
    _print(args, facts, f"{found.path}: a snapshot of cluster {found.cluster_id} at revision "
                        f"{found.revision}, {facts['bytes']} bytes; its SHA-256 checks out")
    return 0


def restore(args: argparse.Namespace) -> int:
    from controller.config import ConfigError, load
    from controller.restore import restore as restore_replica
    from controller.store import StoreError

    try:
        config = load(args.config)
        done = restore_replica(Path(args.file).resolve(), config, args.id, args.data, args.keep_id)
    except (ConfigError, StoreError) as exc:
        print(f"xce: {exc}", file=sys.stderr)
        return 1
    facts = {"cluster_id": done.cluster_id, "revision": done.revision, "replica": args.id,
             "directory": str(done.directory), "awaited": done.awaited}
    _print(args, facts, f"replica {args.id} of cluster {done.cluster_id} restored at revision "
                        f"{done.revision} in {done.directory}; once running, it dispatches nothing "
                        "until its hosts have joined again and the workers' fence has passed")
    return 0


def _print(args: argparse.Namespace, facts: dict[str, object], text: str) -> None:
    print(json.dumps(facts) if args.json else text)
