"""Whether a shim starts a job's command itself (posix_spawn) or through a child that becomes the owner
first (worker/shim.py `_is_self`): only when the owner's uid, gid and groups are the shim's already."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


def test_a_shim_whose_real_effective_and_saved_ids_differ_is_no_one_yet(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its command would start with the ids the shim holds, whichever: all three must be the owner's."""
    uid, gid, groups = os.getuid(), os.getgid(), os.getgroups()
    for ids in ((uid, uid + 1, uid), (uid + 1, uid, uid), (uid, uid, uid + 1)):
        monkeypatch.setattr(shim.os, "getresuid", lambda ids=ids: ids)
        assert not shim._is_self((uid, gid, groups))
    monkeypatch.setattr(shim.os, "getresuid", lambda: (uid, uid, uid))
    monkeypatch.setattr(shim.os, "getresgid", lambda: (gid, gid + 1, gid))
    assert not shim._is_self((uid, gid, groups))


def test_the_path_search_spawns_only_where_a_file_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Directories of the PATH without the command are passed over by a stat (a failed spawn costs a
    vfork and a child): one spawn, at the first that has it; none, and ENOENT, when none has."""
    spawned: list[str] = []

    def spawn(path: str, *args: object, **kwargs: object) -> int:
        spawned.append(path)
        return 42

    monkeypatch.setattr(shim.os, "posix_spawn", spawn)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "job").write_text("#!/bin/sh\n")
    (tmp_path / "file").write_text("")
    path = f"{tmp_path}/none:{tmp_path}/file:{tmp_path}/bin:/bin"  # (file: ENOTDIR as a directory)
    assert shim._spawn_on_path(["job"], {"PATH": path}, []) == 42 and spawned == [f"{tmp_path}/bin/job"]
    spawned.clear()
    with pytest.raises(FileNotFoundError):
        shim._spawn_on_path(["job"], {"PATH": f"{tmp_path}/file:{tmp_path}/none"}, [])  # (the last's error)
    assert spawned == []
