"""Loading the generated protobuf modules (xce/v1/*_pb2.py) straight through upb.

Why: protoc's generated code imports protobuf's pure-Python layers
(descriptor_pool, builder, python_message, text_format, ...), which cost
about 12 ms of every command's start, though the upb extension that does
the work needs none of them. scripts/gen_proto.py rewrites the generated
preamble to call `load`, which does what protobuf's builder does for upb
(the same descriptors in the same default pool, the same message classes,
enum wrappers and module names) and falls back to the builder itself when
upb is not the implementation (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python).
"""

from __future__ import annotations

import os
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
        return _UPB.MessageMeta(d.name, (message.Message,), body)

    for name, d in fd.message_types_by_name.items():
        descriptors(d, "_" + name.upper())
    for name, enum in fd.enum_types_by_name.items():
        module["_" + name.upper()] = enum
        module[name] = EnumTypeWrapper(enum)
        for value in enum.values:
            module[value.name] = value.number
    for name, service in fd.services_by_name.items():
        module["_" + name.upper()] = service
    for name, d in fd.message_types_by_name.items():
        module[name] = message_class(d, "")
    return fd
