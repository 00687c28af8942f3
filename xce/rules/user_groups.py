"""User groups (LSF's UserGroup section of lsb.users): names for sets of users.

`[user_groups]` in the cluster file maps a group's name to its members,
user names or the names of other groups (expanded here, as LSF expands a
group inside a group), so every record holds users only. A job names one
of its owner's groups with `bsub -G`; a queue's fair share may give groups
shares (xce/rules/fairshare.py), a level between the project and the user.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from xce.v1 import api_pb2 as api

MAX_GROUPS = 10_000
MAX_MEMBERS = 100_000
MAX_NAME = 128


class UserGroupError(ValueError):
    pass


def check_name(name: str) -> None:
    if not name or len(name) > MAX_NAME or not all(c.isascii() and (c.isalnum() or c in "_-.") for c in name):
        raise UserGroupError(f"user group {name[:80]!r}: a name is letters, digits, _ - . (1-{MAX_NAME})")
    if name in ("all", "default", "others"):
        raise UserGroupError(f"user group {name!r}: the name is reserved")


def expand(raw: Mapping[str, Sequence[str]]) -> tuple[api.UserGroup, ...]:
    """The groups with groups named inside them expanded to their users, sorted by name; a cycle, a
    bad name or too many members is refused (UserGroupError naming the group)."""
    if len(raw) > MAX_GROUPS:
        raise UserGroupError(f"at most {MAX_GROUPS} user groups")
    for name in raw:
        check_name(name)
    done: dict[str, frozenset[str]] = {}

    def users_of(name: str, path: tuple[str, ...]) -> frozenset[str]:
        if name in done:
            return done[name]
        if name in path:
            raise UserGroupError(f"user group {name!r}: contains itself ({' > '.join((*path, name))})")
        found: set[str] = set()
        for member in raw[name]:
            if member in raw:
                found |= users_of(member, (*path, name))
            elif not member or len(member) > 256 or any(c in member for c in "\0/@ "):
                raise UserGroupError(f"user group {name!r}: bad member {member[:80]!r}")
            else:
                found.add(member)
        if len(found) > MAX_MEMBERS:
            raise UserGroupError(f"user group {name!r}: more than {MAX_MEMBERS} users")
        done[name] = frozenset(found)
        return done[name]

    return tuple(api.UserGroup(name=name, members=sorted(users_of(name, ())))
                 for name in sorted(raw))


def check(groups: Iterable[api.UserGroup]) -> None:
    """What apply checks of a pushed set: names, sizes, no name twice (UserGroupError)."""
    seen: set[str] = set()
    for group in groups:
        check_name(group.name)
        if group.name in seen:
            raise UserGroupError(f"user group {group.name!r}: defined twice")
        seen.add(group.name)
        if len(group.members) > MAX_MEMBERS:
            raise UserGroupError(f"user group {group.name!r}: more than {MAX_MEMBERS} users")
    if len(seen) > MAX_GROUPS:
        raise UserGroupError(f"at most {MAX_GROUPS} user groups")


def find(groups: Iterable[api.UserGroup], name: str) -> api.UserGroup | None:
    return next((group for group in groups if group.name == name), None)
