"""The canonical dump: every table in key order, one length-prefixed record per item.

Two replicas that applied the same entries yield the same bytes; the
simulation and the HA tests compare replicas with it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from controller.tables import TABLES, Tables


def canonical_dump(tables: Tables) -> Iterator[bytes]:
    for table in TABLES:
        for key, value in tables.scan(table):
            yield struct.pack(">HI", len(table), len(key)) + table.encode() + key
            yield struct.pack(">I", len(value)) + value
