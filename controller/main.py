"""`xce controller --config FILE --id N [--join]`: run one replica until SIGTERM/SIGINT.

A learner that is promoted (replica.py) returns from `serve` with `restart`
set; the process then re-executes itself with the same arguments, and comes
back as a standby voter on the same files with the same PID (what systemd and
the tests that started it watch).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import sys
from pathlib import Path

from controller import faults
from controller.config import ConfigError, load
from controller.store import StoreError
from xce import daemon_logging
from xce.metrics import split as split_metrics


def run(config_path: Path, replica_id: int, join: bool = False, force_new_cluster: bool = False,
        metrics: str = "") -> int:
    """`metrics`: serve Prometheus metrics there, whatever the cluster file says (the unit's default)."""
    daemon_logging.setup(f"replica-{replica_id}")
    try:
        handlers = faults.handlers(os.environ.get("XCE_FAULT", ""))
        config = load(config_path)
        config.replica(replica_id)
        if metrics:
            split_metrics(metrics)  # (a ValueError: a usage error, as the file's would be)
            replicas = tuple(dataclasses.replace(r, metrics=metrics) if r.id == replica_id else r
                             for r in config.replicas)
            config = dataclasses.replace(config, replicas=replicas)
        if force_new_cluster:
            from controller.restore import force_new_cluster as force

            forced = force(config, replica_id)  # refused while a replica runs on the directory
            logging.getLogger(__name__).warning(
                "replica %d: forced into a one-member cluster at revision %d; entries it had not applied "
                "are gone. Add members back with `xce member add`, and drop --force-new-cluster",
                replica_id, forced.revision)
        from controller.replica import Replica
        from xce.rules import resreq

        resreq.warm()  # here, not inside the first apply that parses a requirement

        if not force_new_cluster:
            from controller.restore import forced_note_done

            forced_note_done(config.replica_dir(replica_id))
        broken = faults.flags(os.environ.get("XCE_FAULT", ""))
        if "ack-before-sync" in broken:
            from controller import raft_wal

            raft_wal.SYNC = False  # (the state store syncs only at snapshots and its close anyway)
        if "lease-reads" in broken:  # it never steps down for want of a majority
            raft = dataclasses.replace(config.raft, leader_fallback_s=3600.0)
            config = dataclasses.replace(config, raft=raft)
        replica = Replica(config, replica_id, handlers, join=join,
                          member_pause_s=faults.member_pause_s(os.environ.get("XCE_FAULT", "")),
                          read_faults=broken & {"stale-reads", "lease-reads"})
    except (ConfigError, StoreError, ValueError) as exc:
        print(f"xce controller: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await replica.serve(stop)

    asyncio.run(main())
    if replica.restart:
        logging.shutdown()
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    return 0
