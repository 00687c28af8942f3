"""Whether a shim starts a job's command itself (posix_spawn) or through a child that becomes the owner
first (worker/shim.py `_is_self`): only when the owner's uid, gid and groups are the shim's already."""

from __future__ import annotations

import os

from worker import shim


def test_a_shim_starts_the_command_itself_only_for_an_owner_it_is_already() -> None:
    uid, gid, groups = os.getuid(), os.getgid(), os.getgroups()
    assert os.getresuid() == (uid,) * 3 and os.getresgid() == (gid,) * 3  # a plain process, as a shim is
    assert shim._is_self((uid, gid, groups))
    assert shim._is_self((uid, gid, [*groups, gid]))  # the gid among the groups or not: the same access
    assert not shim._is_self((uid + 1, gid, groups))
    assert not shim._is_self((uid, gid + 1, groups))
    assert not shim._is_self((uid, gid, [*groups, max([gid, *groups]) + 1]))  # one group more
    if set(groups) - {gid}:
        assert not shim._is_self((uid, gid, []))  # one group fewer
