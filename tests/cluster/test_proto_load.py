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
    for name in dir(module):  # (a lean module makes each message class when it is first named)
        if name.startswith("__") or name in ("_runtime_version", "_proto_load", "_globals"):
            continue
        value = getattr(module, name)
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


FIRST_MADE_BY_UPB = r"""
import pickle, sys
from xce import proto_load
from xce.v1 import api_pb2
assert "JobSpec" not in vars(api_pb2)  # not made until named
request = api_pb2.SubmitJobsRequest()
made = type(request.jobs.add())  # upb makes JobSpec's class for the submessage, before the module names it
assert api_pb2.JobSpec is made and isinstance(request.jobs[0], api_pb2.JobSpec)
assert (made.__module__, made.__qualname__) == ("xce.v1.api_pb2", "JobSpec")
assert api_pb2.JobSpec.EnvEntry.__qualname__ == "JobSpec.EnvEntry"
request.jobs[0].command.append("true")
assert pickle.loads(pickle.dumps(request.jobs[0])) == request.jobs[0]  # found by its new names
try:
    api_pb2.NoSuchMessage
except AttributeError as exc:
    assert "NoSuchMessage" in str(exc)
else:
    raise AssertionError("a name the file does not have")
print("ok")
"""

LEFT_OUT = r"""
import sys
from xce import proto_load
proto_load.without_well_known_types()
from xce.v1 import api_pb2, log_pb2
entry = log_pb2.Entry(stamp_ms=1, audit_note=api_pb2.AuditRequest(), submit=log_pb2.SubmitBatch(
    requests=[api_pb2.SubmitJobsRequest(jobs=[api_pb2.JobSpec(command=["x"])])]))
assert log_pb2.Entry.FromString(entry.SerializeToString()) == entry
left_out = [m for m in ("calendar", "datetime", "google.protobuf.descriptor") if m in sys.modules]
from google.protobuf.internal import well_known_types
try:
    well_known_types.Timestamp
except AttributeError as exc:
    print("refused:", exc)
print("left out:", left_out)
"""


def run(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "upb"})


def test_a_class_upb_made_for_a_submessage_first_is_the_modules_own() -> None:
    done = run(FIRST_MADE_BY_UPB)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_command_leaves_the_well_known_types_out_and_a_reach_for_them_fails_loudly() -> None:
    done = run(LEFT_OUT)
    assert done.returncode == 0, done.stderr
    assert "refused: google.protobuf.internal.well_known_types.Timestamp" in done.stdout
    assert "left out: []" in done.stdout
    # Where the real module was imported first, it stays: the call changes nothing.
    done = run("import google.protobuf.internal.well_known_types\n" + LEFT_OUT)
    assert done.returncode == 0 and "refused" not in done.stdout, done.stderr


def test_a_daemon_makes_every_class_at_its_start_and_as_later_modules_load() -> None:
    done = run("from xce import proto_load\nfrom xce.v1 import api_pb2\nproto_load.make_all()\n"
               "from xce.v1 import log_pb2\n"
               "print(all(isinstance(vars(m).get(n), type) for m in (api_pb2, log_pb2) "
               "for n in m.DESCRIPTOR.message_types_by_name))\n"
               "print(type(log_pb2.Entry().submit.requests.add()).__module__)")
    assert done.returncode == 0 and done.stdout.split() == ["True", "xce.v1.api_pb2"], done.stderr


def test_no_proto_of_ours_uses_a_well_known_type() -> None:
    """What lets a command leave them out (scripts/gen_proto.py refuses such a proto)."""
    import importlib

    modules = sorted(p.stem for p in (ROOT / "xce" / "v1").glob("*_pb2.py"))
    assert "api_pb2" in modules and "log_pb2" in modules
    for name in modules:
        module = importlib.import_module(f"xce.v1.{name}")
        assert not [d.name for d in module.DESCRIPTOR.dependencies if d.name.startswith("google/")]
