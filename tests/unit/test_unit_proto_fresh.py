"""The committed generated protobuf code (xce/v1/*_pb2*.py[i]) is what
scripts/gen_proto.py makes from proto/ today. Stale? Run `make proto`."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto" / "xce" / "v1"
GENERATED_DIR = ROOT / "xce" / "v1"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def load_gen_proto() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated_files(root: Path) -> dict[str, bytes]:
    """Generated files under root/xce/v1, by name."""
    folder = root / "xce" / "v1"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.is_file() and p.name.endswith(SUFFIXES)}


def stale_files(fresh: dict[str, bytes], committed: dict[str, bytes]) -> list[str]:
    names = sorted(set(fresh) | set(committed))
    return [name for name in names if fresh.get(name) != committed.get(name)]


@pytest.fixture(scope="module")
def gen_proto() -> ModuleType:
    return load_gen_proto()


def test_generated_code_is_byte_identical_to_a_fresh_generation(
        gen_proto: ModuleType, tmp_path: Path) -> None:
    gen_proto.generate(tmp_path)
    fresh = generated_files(tmp_path)
    assert fresh, "gen_proto generated nothing"
    stale = stale_files(fresh, generated_files(ROOT))
    assert stale == [], f"stale generated code: {stale}; run `make proto` and commit"


def test_every_proto_has_its_generated_files_and_nothing_else() -> None:
    protos = sorted(p.stem for p in PROTO_DIR.glob("*.proto"))
    assert protos, "no .proto files found"
    expected = {stem + suffix for stem in protos for suffix in SUFFIXES}
    present = set(generated_files(ROOT))
    assert sorted(expected - present) == [], "generated files missing"
    assert sorted(present - expected) == [], "generated files without a .proto"


def test_freshness_check_catches_an_edited_proto(
        gen_proto: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check above has teeth: one new message in a copy of proto/ changes
    # the generated code of that file only.
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "proto", copy / "proto")
    log_proto = copy / "proto" / "xce" / "v1" / "log.proto"
    log_proto.write_text(log_proto.read_text() + "\nmessage AddedByTheTest {\n  string x = 1;\n}\n")
    monkeypatch.setattr(gen_proto, "ROOT", copy)
    out = tmp_path / "out"
    out.mkdir()
    gen_proto.generate(out)
    assert stale_files(generated_files(out), generated_files(ROOT)) == ["log_pb2.py", "log_pb2.pyi"]
