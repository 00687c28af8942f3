"""Loading the generated protobuf modules (xce/v1/*_pb2.py) straight through upb.

Why: protoc's generated code imports protobuf's pure-Python layers
(descriptor_pool, builder, python_message, text_format, ...), which cost
about 12 ms of every command's start, though the upb extension that does
the work needs none of them. scripts/gen_proto.py rewrites the generated
preamble to call `load`, which does what protobuf's builder does for upb
(the same descriptors in the same default pool, the same message classes,
enum wrappers and module names) and falls back to the builder itself when
upb is not the implementation (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python).

Through upb, a module makes each message class when it is first named (a
command uses a dozen of the 150); a daemon makes them all at its start
(`make_all`). A client command also leaves protobuf's well-known types out
(`without_well_known_types`).
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterable

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import Any


def _upb() -> Any:
    if os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "upb") != "upb":
        return None
    try:
        from google._upb import _message
    except ImportError:
        return None
    return _message


_UPB = _upb()
UPB = _UPB is not None
_WELL_KNOWN = "google.protobuf.internal.well_known_types"


class _NoWellKnownTypes(types.ModuleType):
    """What a short-lived command gives upb in place of protobuf's well-known types' module."""

    WKTBASES: dict[str, type] = {}

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{_WELL_KNOWN}.{name}: this command left protobuf's well-known types out "
                             "(xce.proto_load.without_well_known_types)")


def without_well_known_types() -> None:
    """Spare a short-lived command the import of protobuf's well-known types (~7 ms: calendar,
    datetime, locale, typing, protobuf's descriptor layer). upb imports that module when it makes
    its first message class, only to find the helpers of Timestamp, Any, Struct... by full name,
    and keeps the table it read for the life of the process. xce's own files use none of those
    types (scripts/gen_proto.py refuses a proto that imports one), so a client command hands upb
    an empty table; a well-known type made later in the same process would lack its helpers, and
    anything reaching for the module's other names fails loudly. Daemons do not call this. Does
    nothing when upb is not the implementation or the module is already imported."""
    if _UPB is not None and _WELL_KNOWN not in sys.modules:
        sys.modules[_WELL_KNOWN] = _NoWellKnownTypes(_WELL_KNOWN)


def load(serialized: bytes, module_name: str, module: dict[str, Any]) -> Any:
    """Add the file's descriptor to the default pool and its classes to `module`; its descriptor."""
    if _UPB is None:
        from google.protobuf import descriptor_pool
        from google.protobuf.internal import builder

        fd = descriptor_pool.Default().AddSerializedFile(serialized)
        builder.BuildMessageAndEnumDescriptors(fd, module)
        builder.BuildTopDescriptorsAndMessages(fd, module_name, module)
        return fd
    from google.protobuf import message
    from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

    fd = _UPB.default_pool.AddSerializedFile(serialized)

    def descriptors(d: Any, prefix: str) -> None:  # builder.BuildMessageAndEnumDescriptors
        module[prefix] = d
        for name, nested in d.nested_types_by_name.items():
            descriptors(nested, f"{prefix}_{name.upper()}")
        for enum in d.enum_types:
            module[f"{prefix}_{enum.name.upper()}"] = enum

    def message_class(d: Any, prefix: str) -> Any:  # builder._BuildMessage
        body: dict[str, Any] = {name: message_class(nested, f"{prefix}{d.name}.")
                                for name, nested in d.nested_types_by_name.items()}
        body.update(DESCRIPTOR=d, __module__=module_name, __qualname__=prefix + d.name)
        made = _UPB.MessageMeta(d.name, (message.Message,), body)
        # upb keeps one class per descriptor: one it made for a submessage before the module
        # named it comes back as it is, without our names.
        made.__module__, made.__qualname__ = module_name, prefix + d.name
        return made

    classes = dict(fd.message_types_by_name)

    def __getattr__(name: str) -> Any:  # PEP 562's hook
        d = classes.get(name)
        if d is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        made = module[name] = message_class(d, "")
        return made

    for name, d in fd.message_types_by_name.items():
        descriptors(d, "_" + name.upper())
    for name, enum in fd.enum_types_by_name.items():
        module["_" + name.upper()] = enum
        module[name] = EnumTypeWrapper(enum)
        for value in enum.values:
            module[value.name] = value.number
    for name, service in fd.services_by_name.items():
        module["_" + name.upper()] = service
    # A message class is made when first named (PEP 562): making one costs ~0.1 ms, and a
    # command uses a dozen of the files' 150.
    module["__getattr__"] = __getattr__
    module["__dir__"] = lambda: sorted({*module, *classes})
    _LOADED.append((module, tuple(classes)))
    if _EAGER:
        _make(module, classes)
    return fd


_LOADED: list[tuple[dict[str, Any], tuple[str, ...]]] = []  # each module loaded, its message names
_EAGER = False  # make_all was called: modules loaded later make their classes at once


def _make(module: dict[str, Any], names: Iterable[str]) -> None:
    for name in names:
        if name not in module:
            module["__getattr__"](name)


def make_all() -> None:
    """Make every message class now, and those of modules loaded later as they load: a daemon's
    start (cli/main.py). A class upb makes by itself for a submessage the module has not named yet
    takes its module name from whatever code runs then (pickling it fails until the module names
    it), and two threads making a process's first class at once could race inside upb; a
    long-lived process pays the ~15 ms once instead."""
    global _EAGER
    _EAGER = True
    for module, names in _LOADED:
        _make(module, names)
