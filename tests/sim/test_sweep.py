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
fcfs        --set queue.normal.backfill=none
easy+32     --set queue.normal.backfill=easy --add-hosts 32x1
careful     --set queue.normal.backfill=conservative
busier      --scale-arrivals 1.5
"""


def xce_sim(*words: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "cli", "sim", "--swf", str(TRACE), "--window", "1981:200",
                           *words], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert (done.returncode == 0) == ok, done.stderr
    return done


def test_a_sweep_s_figures_are_each_configuration_s_alone_in_one_table_and_plot(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.txt"
    sweep.write_text(SWEEP)
    answer = json.loads(xce_sim("--sweep", str(sweep), "--parallel", "2", "--json").stdout)
    configs = answer["configurations"]
    assert [c["name"] for c in configs] == ["as given", "fcfs", "easy+32", "careful", "busier"]
    assert configs[3]["report"]["simulation"]["path"] == "faithful"  # (conservative: every event applied)
    alone = json.loads(xce_sim("--json").stdout)
    assert configs[0]["report"] == alone
    for config in configs[1:]:
        each = json.loads(xce_sim(*config["options"], "--json").stdout)
        assert config["report"] == each["what_if"], config["name"]
    table = xce_sim("--sweep", str(sweep), "--plot", str(tmp_path / "plots"))
    lines = table.stdout.splitlines()
    assert lines[0].startswith("configuration") and [line.split()[0] for line in lines[1:]] == \
        ["as", "fcfs", "easy+32", "careful", "busier"]
    assert (tmp_path / "plots" / "sweep.png").stat().st_size > 10_000


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
