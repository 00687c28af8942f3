"""Job groups (bsub -g, bgadd -L): paths of groups, and a group's limit as one of the limits.

A job group is a path, `/a/b`; a job of `/a/b` is also of `/a`. A group's
limit on running jobs (bgadd -L N) is a Limit named `group::a:b` whose
consumers are the jobs of `/a/b` and the groups under it (xce/rules/limits.py
counts and bounds it as any limit: the planner and the commit barrier refuse
a placement past it). Groups without a limit need no record: a job names its
group, and that is the group. Pure.
"""

from __future__ import annotations

import re

from xce.v1 import api_pb2 as api

PREFIX = "group:"
MAX_DEPTH = 16
MAX_PATH = 512
MAX_LIMIT = 1_000_000
_PATH = re.compile(r"(/[A-Za-z0-9_.\-]{1,64})+")


class JobGroupError(ValueError):
    pass


def check_path(path: str) -> None:
    if len(path) > MAX_PATH or not _PATH.fullmatch(path) or path.count("/") > MAX_DEPTH:
        raise JobGroupError(f"job group {path[:80]!r}: a path /name/name (letters, digits, _ . -), at most "
                            f"{MAX_DEPTH} deep")


def within(group: str, path: str) -> bool:
    """Whether a job of `group` is of the group `path` (itself or a group under it)."""
    return group == path or group.startswith(path + "/")


def limit_name(path: str) -> str:
    """The group's limit's name: `group:` and the path with `:` for `/` (a limit's counters are
    `limit/<name>/<key>/<metric>`: a name holds no `/`)."""
    return PREFIX + path.replace("/", ":")


def limit_of(path: str, limit: int, owner: str) -> api.Limit:
    return api.Limit(name=limit_name(path), groups=[path], jobs=limit, owner=owner)


def is_group_limit(limit: api.Limit) -> bool:
    return limit.name.startswith(PREFIX)
