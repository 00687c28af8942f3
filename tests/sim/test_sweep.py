"""`xce sim --sweep`: each configuration of a sweep file run in a process of its own, its figures those
`xce sim` gives it alone, in one table and one plot. (`--on-cluster`: tests/cluster/test_recording.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "traces" / "lublin_256.swf"
SWEEP = """# name   what-ifs
easy+32     --set queue.normal.backfill=easy --add-hosts 32x1
lifo        --set scheduler.picker=lifo --scale-arrivals 1.5
"""


def xce_sim(*words: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "cli", "sim", "--swf", str(TRACE), "--window", "1981:100",
                           *words], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert (done.returncode == 0) == ok, done.stderr
    return done


def test_a_sweep_s_figures_are_each_configuration_s_alone_in_one_table_and_plot(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.txt"
    sweep.write_text(SWEEP)
    answer = json.loads(xce_sim("--sweep", str(sweep), "--parallel", "2", "--json", "--plot",
                                str(tmp_path / "plots")).stdout)
    configs = answer["configurations"]
    assert [c["name"] for c in configs] == ["as given", "easy+32", "lifo"] and answer["failed"] == []
    assert configs[2]["report"]["simulation"]["path"] == "faithful"  # (another picker: every event applied)
    for config in configs[1:]:  # (and the first, the workload as given, is each one's as_given)
        each = json.loads(xce_sim(*config["options"], "--json").stdout)
        assert (config["report"], configs[0]["report"]) == (each["what_if"], each["as_given"]), config["name"]
    assert (tmp_path / "plots" / "sweep.png").stat().st_size > 10_000
    lines = xce_sim("--sweep", str(sweep), "--parallel", "1").stdout.splitlines()
    assert lines[0].startswith("configuration") and [line.split()[0] for line in lines[1:]] == \
        ["as", "easy+32", "lifo"]


def test_a_bad_sweep_changes_nothing_and_says_where(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.txt"
    sweep.write_text("fine --set queue.normal.backfill=easy\nodd --set queue.nosuch.backfill=easy\n")
    refused = xce_sim("--sweep", str(sweep), ok=False)
    assert refused.returncode == 2 and "odd: --set names queues the workload does not have: nosuch" in \
        refused.stderr, refused.stderr
    sweep.write_text("x --add-hosts\n")
    assert f"{sweep}:1:" in xce_sim("--sweep", str(sweep), ok=False).stderr
    both = xce_sim("--sweep", str(sweep), "--set", "queue.normal.backfill=easy", ok=False)
    assert "the what-ifs are the sweep file's" in both.stderr
    assert "are for --sweep" in xce_sim("--on-cluster", ok=False).stderr
