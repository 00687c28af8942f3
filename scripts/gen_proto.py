"""Regenerate xce/v1/*_pb2*.py from proto/xce/v1/*.proto (or into another root).

The *_pb2.py modules are protoc's, with the preamble rewritten to load through
xce/proto_load.py (upb directly, without protobuf's pure-Python layers: ~12 ms
of every command's start); the rest is as protoc wrote it.
"""

import re
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
_EXTEND = re.compile(r"^\s*extend\s", re.M)
_WELL_KNOWN = re.compile(r"""^\s*import\s+(?:public\s+|weak\s+)?["']google/protobuf/""", re.M)


def generate(out_root: Path) -> None:
    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    args = ["protoc", f"-I{ROOT / 'proto'}", f"-I{include}", f"--python_out={out_root}",
            f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", *protos]
    # Refused before protoc writes anything.
    texts = [(ROOT / "proto" / p).read_text() for p in protos]
    if any(_EXTEND.search(text) for text in texts):
        raise SystemExit("a proto with extensions: xce/proto_load.py does not load them")
    if any(_WELL_KNOWN.search(text) for text in texts):
        raise SystemExit("a proto using protobuf's well-known types: the command line leaves them out "
                         "(xce/proto_load.py without_well_known_types)")
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for module in sorted((out_root / "xce").rglob("*_pb2.py")):
        module.write_text(lean_preamble(module.read_text()))


_IMPORTS = """from google.protobuf import descriptor as _descriptor
from google.protobuf import descriptor_pool as _descriptor_pool
from google.protobuf import runtime_version as _runtime_version
from google.protobuf import symbol_database as _symbol_database
from google.protobuf.internal import builder as _builder
"""
_BUILD = re.compile(r"DESCRIPTOR = _descriptor_pool\.Default\(\)\.AddSerializedFile\((b'.*')\)\n\n"
                    r"_globals = globals\(\)\n"
                    r"_builder\.BuildMessageAndEnumDescriptors\(DESCRIPTOR, _globals\)\n"
                    r"_builder\.BuildTopDescriptorsAndMessages\(DESCRIPTOR, ('[\w.]+'), _globals\)\n")


def lean_preamble(source: str) -> str:
    """protoc's module, loading through xce.proto_load; SystemExit if protoc's layout changed."""
    parts = [_IMPORTS, "_sym_db = _symbol_database.Default()\n", "if not _descriptor._USE_C_DESCRIPTORS:"]
    if any(source.count(part) != 1 for part in parts) or len(_BUILD.findall(source)) != 1:
        raise SystemExit("protoc's generated code changed its layout: update scripts/gen_proto.py")
    source = source.replace(_IMPORTS, "from google.protobuf import runtime_version as _runtime_version\n"
                                      "from xce import proto_load as _proto_load\n")
    source = source.replace(parts[1], "")
    source = source.replace(parts[2], "if not _proto_load.UPB:")
    return _BUILD.sub(lambda m: f"DESCRIPTOR = _proto_load.load({m.group(1)}, {m.group(2)}, globals())\n\n"
                                "_globals = globals()\n", source)


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
