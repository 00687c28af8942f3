"""xce/proto_load.py: the generated modules loaded straight through upb hold the same names, classes
and enums as protobuf's own builder makes (the pure-Python implementation takes that path), and
the command line's start no longer imports protobuf's pure-Python layers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

NAMESPACE = r"""
import json, sys
from google.protobuf.internal import enum_type_wrapper
from xce.v1 import api_pb2, log_pb2

out = {}
for module in (api_pb2, log_pb2):
    for name, value in vars(module).items():
        if name.startswith("__") or name in ("_runtime_version", "_proto_load", "_globals"):
            continue
        key = f"{module.__name__}.{name}"
        if isinstance(value, type):
            out[key] = ["class", value.__qualname__, value.__module__, value.DESCRIPTOR.full_name,
                        sorted(f.name for f in value.DESCRIPTOR.fields),
                        sorted((n, c.__qualname__, c.DESCRIPTOR.full_name) for n, c in vars(value).items()
                               if isinstance(c, type))]
        elif isinstance(value, enum_type_wrapper.EnumTypeWrapper):
            out[key] = ["enum", sorted(value.items())]
        elif isinstance(value, int):
            out[key] = value
        else:
            out[key] = [getattr(value, "full_name", getattr(value, "__name__", type(value).__name__))]
job = api_pb2.JobSpec(command=["true"], name="n", array=api_pb2.ArraySpec(
    ranges=[api_pb2.IndexRange(start=1, end=9, step=2)]))
job.env["A"] = "b"
out["wire"] = job.SerializeToString().hex()
out["back"] = str(api_pb2.JobSpec.FromString(bytes.fromhex(out["wire"])) == job)
print(json.dumps({"names": out, "modules": sorted(sys.modules)}, sort_keys=True))
"""


def namespace(implementation: str) -> dict[str, object]:
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": implementation}
    done = subprocess.run([sys.executable, "-c", NAMESPACE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_upb_loading_makes_what_protobufs_builder_makes() -> None:
    lean, builder = namespace("upb"), namespace("python")
    assert lean["names"] == builder["names"]
    names = lean["names"]
    assert names["xce.v1.api_pb2.JobSpec"][:4] == ["class", "JobSpec", "xce.v1.api_pb2", "xce.v1.JobSpec"]
    assert names["xce.v1.log_pb2.Entry"][2] == "xce.v1.log_pb2"
    assert names["back"] == "True"
    assert ["EnvEntry", "JobSpec.EnvEntry", "xce.v1.JobSpec.EnvEntry"] in names["xce.v1.api_pb2.JobSpec"][5]
    # The builder's path really was another one: it imports what the lean one avoids.
    assert "google.protobuf.internal.python_message" in builder["modules"]
    assert "google.protobuf.internal.python_message" not in lean["modules"]
    assert "google.protobuf.descriptor_pool" not in lean["modules"]
