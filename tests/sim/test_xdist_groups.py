"""The tests of a module sharing a cluster run on one pytest-xdist worker, as `make test` runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONFTEST = '''
import pytest
from xdist_groups import keep_groups_together, xdist_group

@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item):
    if group := xdist_group(item):
        item.add_marker(pytest.mark.xdist_group(group))

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    keep_groups_together(config, items)
'''

SHARED = '''
import os
from pathlib import Path
import pytest

RAN = Path(os.environ["RAN"])

@pytest.fixture(scope="module")
def cluster():
    (RAN / f"started-{os.environ['PYTEST_XDIST_WORKER']}").touch()
    yield

@pytest.mark.parametrize("n", range(12))
def test_shares(cluster, n):
    (RAN / f"{__name__}-{n}").write_text(os.environ["PYTEST_XDIST_WORKER"])
'''

ALONE = '''
import os
from pathlib import Path
import pytest

@pytest.mark.parametrize("n", range(12))
def test_alone(n):
    (Path(os.environ["RAN"]) / f"alone-{n}").write_text(os.environ["PYTEST_XDIST_WORKER"])
'''


def test_a_module_sharing_a_fixture_runs_on_one_worker(tmp_path: Path) -> None:
    suite, ran = tmp_path / "suite", tmp_path / "ran"
    suite.mkdir()
    ran.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_alone.py").write_text(ALONE)
    (suite / "test_shared.py").write_text(SHARED)
    tests = Path(__file__).resolve().parent.parent
    env = {**os.environ, "RAN": str(ran), "PYTHONPATH": str(tests)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    shared = {(ran / f"test_shared-{n}").read_text() for n in range(12)}
    assert len(shared) == 1, f"the module's tests ran on {sorted(shared)}"
    assert [p.name for p in ran.glob("started-*")] == [f"started-{shared.pop()}"]
    assert len(list(ran.glob("alone-*"))) == 12
