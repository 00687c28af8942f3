"""The cluster CA (xce/pki.py): what it issues, and what it refuses."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from xce import pki


def test_certificates_name_role_and_holder_and_keys_are_private(tmp_path: Path) -> None:
    pki.init_ca(tmp_path, "c1")
    cert, key = pki.issue(tmp_path, "worker", "node7")
    assert pki.identity(cert.read_bytes()) == pki.Identity("worker", "node7")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(cert.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600


@pytest.mark.parametrize(("role", "name", "words"), [
    ("root", "x", "role must be one of"), ("worker", "", "1-64 characters"), ("worker", "a/b", "without '/'"),
    ("worker", "n" * 65, "1-64 characters")])
def test_a_bad_request_is_refused_and_writes_nothing(tmp_path: Path, role: str, name: str,
                                                     words: str) -> None:
    pki.init_ca(tmp_path, "c1")
    before = sorted(tmp_path.iterdir())
    with pytest.raises(pki.PkiError, match=words):
        pki.issue(tmp_path, role, name)
    assert sorted(tmp_path.iterdir()) == before


def test_issuing_without_a_ca_says_so(tmp_path: Path) -> None:
    with pytest.raises(pki.PkiError, match="no usable CA"):
        pki.issue(tmp_path, "worker", "n1")
    assert list(tmp_path.iterdir()) == []
