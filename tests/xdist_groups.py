"""Which tests pytest-xdist keeps on one worker (`--dist loadgroup`), and the node ids that make it so.

A module whose tests share a cluster (a module- or class-scoped fixture) must run on one worker: on
two, the cluster would start twice and each worker would see only part of the module's story.
"""

from __future__ import annotations

import pytest


def xdist_group(item: pytest.Item) -> str:
    """The group of a test whose module shares a fixture across tests (its module path), else ""."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    if any(d.scope in ("module", "class") for defs in definitions for d in defs):
        return item.nodeid.split("::", 1)[0]
    return ""


def keep_groups_together(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each grouped test the `@group` suffix that `--dist loadgroup` schedules by. pytest-xdist 3.8
    writes it to `item._nodeid`, which pytest 9 no longer reads (a node's id is `item._id`, a NodeId),
    so without this every test would be scheduled alone, wherever a worker is free."""
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        return
    from _pytest.nodeid import NodeId  # pytest 9's id type (pytest is pinned in pyproject.toml)

    for item in items:
        group = xdist_group(item)
        if group and not item.nodeid.endswith(f"@{group}"):
            item._id = NodeId.parse(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]
