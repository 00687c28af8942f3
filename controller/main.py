"""`xce controller --config FILE --id N`: run one replica until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from controller import faults
from controller.config import ConfigError, load
from controller.store import StoreError
from xce import daemon_logging


def run(config_path: Path, replica_id: int) -> int:
    daemon_logging.setup(f"replica-{replica_id}")
    try:
        handlers = faults.handlers(os.environ.get("XCE_FAULT", ""))
        config = load(config_path)
        config.replica(replica_id)
        from controller.replica import Replica

        replica = Replica(config, replica_id, handlers)
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
    return 0
