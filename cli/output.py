"""What every command prints with: JSON with --json, else its human form; times as UTC.

JSON costs imports (json, protobuf's json_format: 20-40 ms), so they are
made only when --json asks for them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import Any


def as_dict(message: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict  # 20-40 ms to import: only for --json

    return MessageToDict(message, preserving_proto_field_name=True)


def emit(args: argparse.Namespace, data: Callable[[], dict[str, Any]], human: Any) -> int:
    """Print `data()` as JSON with --json, else call `human` (the JSON costs an import: only then)."""
    if getattr(args, "json", False):
        import json

        print(json.dumps(data(), indent=2, sort_keys=True))
    else:
        human()
    return 0


def when(ms: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
