"""pysyncobj's internals that the Raft adapter uses are where it expects them.

controller/pysyncobj_internals.py names every private attribute, method, module-level name and
protocol word of pysyncobj that XCE reaches or patches. A pysyncobj release that moves or renames
one fails here, naming it, rather than in a cluster at run time. And no other product module
reaches in: a new reach must be named there first.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import tomllib
from pathlib import Path

import pysyncobj.syncobj
import pytest
from pysyncobj import SyncObj
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

from controller import pysyncobj_internals as internals

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("controller", "scheduler", "worker", "xce", "gateway", "simulator")
# How code reaches past pysyncobj's public API: a mangled private, or one of the single-underscore
# members the adapter overrides or reads.
REACH = re.compile(r"_SyncObj__|_TcpConnection__|\._syncObj\b|_onMessageReceived|_onDisconnected|"
                   r"_connToNode|_onUtilityMessageCallbacks|\._isLeader\(|\._getLeader\(|recvRandKey|"
                   r"\.createJournal\b|\.TcpConnection\s*=")
REACH_NEAR_PYSYNCOBJ = re.compile(r"\._connections\b")  # a common name: only where pysyncobj is in reach


def _label(internal: internals.Internal) -> str:
    owner = internal.owner
    return f"{getattr(owner, '__name__', owner)}.{internal.name}"


def test_the_installed_pysyncobj_is_the_pinned_release() -> None:
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"pysyncobj=={internals.PYSYNCOBJ_VERSION}" in pinned, "pyproject.toml must pin pysyncobj exactly"
    assert importlib.metadata.version("pysyncobj") == internals.PYSYNCOBJ_VERSION


@pytest.mark.parametrize("internal", internals.INTERNALS, ids=_label)
def test_each_internal_is_where_the_adapter_expects_it(internal: internals.Internal) -> None:
    label = _label(internal)
    if internal.parameters is not None:
        method = getattr(internal.owner, internal.name, None)
        assert callable(method), f"pysyncobj has no method {label}: it moved or was renamed"
        parameters = tuple(p for p in inspect.signature(method).parameters if p != "self")
        assert parameters == internal.parameters, f"{label} takes {parameters}, not {internal.parameters}"
        return
    if inspect.ismodule(internal.owner):
        assert hasattr(internal.owner, internal.name), f"pysyncobj has no module-level {label}"
        return
    assert isinstance(internal.owner, type)
    if hasattr(internal.owner, internal.name):
        return
    # An instance attribute: set in the code of the class (or a pysyncobj base) under its own name.
    private = internal.name.removeprefix(f"_{internal.owner.__name__}")
    sources = [inspect.getsource(c) for c in internal.owner.__mro__ if c.__module__.startswith("pysyncobj")]
    assert any(re.search(rf"self\.{re.escape(private)}\s*=", source) for source in sources), \
        f"pysyncobj's {internal.owner.__name__} no longer sets {private} ({label}): it moved or was renamed"


def test_the_patched_module_names_are_the_ones_pysyncobj_calls() -> None:
    """A patch of a module-level name works only while pysyncobj looks it up there at each use."""
    assert re.search(r"=\s*createJournal\(", inspect.getsource(SyncObj.__init__)), \
        "SyncObj.__init__ no longer creates its journal by pysyncobj.syncobj.createJournal"
    for module in (pysyncobj.tcp_server, pysyncobj.transport):
        assert "TcpConnection(" in inspect.getsource(module), \
            f"{module.__name__} no longer makes its connections by its module-level TcpConnection"


def test_the_protocol_words_and_command_bytes_are_pysyncobjs() -> None:
    source = inspect.getsource(pysyncobj.syncobj)
    for word in internals.MESSAGE_WORDS:
        assert f"'{word}'" in source or f'"{word}"' in source, f"pysyncobj's messages no longer use {word!r}"
    command_type = pysyncobj.syncobj._COMMAND_TYPE
    assert command_type.NO_OP == internals.NO_OP_COMMAND
    assert command_type.MEMBERSHIP == internals.MEMBERSHIP_COMMAND
    raft_state = pysyncobj.syncobj._RAFT_STATE
    assert internals.ROLES == {raft_state.FOLLOWER: "follower", raft_state.CANDIDATE: "candidate",
                               raft_state.LEADER: "leader"}


def test_the_hooks_override_what_pysyncobj_calls() -> None:
    """The subclasses' hooks sit on the names pysyncobj's own code invokes."""
    hooks = ((TcpConnection, "_TcpConnection__processRead", internals.Connection),
             (TcpConnection, "_TcpConnection__processParseMessage", internals.Connection),
             (TCPTransport, "_onMessageReceived", internals.Transport),
             (TCPTransport, "_onDisconnected", internals.Transport))
    for owner, name, hook_class in hooks:
        assert name in vars(hook_class), f"{hook_class.__name__} does not override {name}"
        caller = name.removeprefix(f"_{owner.__name__}")
        assert f"self.{caller}" in inspect.getsource(owner), f"{owner.__name__} no longer calls {caller}"


def test_every_reach_into_pysyncobj_in_the_internals_module_is_listed() -> None:
    source = (ROOT / "controller" / "pysyncobj_internals.py").read_text()
    used = set(re.findall(r"\b(_SyncObj__\w+|_TcpConnection__\w+)", source))
    listed = {i.name for i in internals.INTERNALS}
    assert used <= listed, f"not in INTERNALS: {sorted(used - listed)}"


def test_no_other_product_module_reaches_into_pysyncobj() -> None:
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "controller" / "pysyncobj_internals.py":
                continue
            text = path.read_text()
            near = "pysyncobj" in text
            for number, line in enumerate(text.splitlines(), 1):
                code = line.split("#", 1)[0]
                if REACH.search(code) or (near and REACH_NEAR_PYSYNCOBJ.search(code)):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "reach pysyncobj's internals through controller/pysyncobj_internals.py:\n" + \
        "\n".join(found)
