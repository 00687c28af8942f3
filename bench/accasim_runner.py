"""AccaSim 1.1.3, unmodified, on an SWF file: one line `job start end` (seconds) per job, on stdout.

`python bench/accasim_runner.py TRACE.swf NODES fifo|ebf WORKDIR`: NODES nodes of one core, AccaSim's
FirstInFirstOut or EASYBackfilling with its FirstFit allocator, its own SWF reader (processors: the
requested ones, else the allocated ones; estimate: the requested time). Run as a process of its own:
AccaSim 1.1.3 imports `Mapping` from `collections`, which Python 3.10 removed, so the name is put back
there (the one thing done to make it run) before AccaSim is imported.
"""

from __future__ import annotations

import collections
import collections.abc
import json
import logging
import sys
from pathlib import Path

collections.Mapping = collections.abc.Mapping  # type: ignore[attr-defined]

from accasim.base.allocator_class import FirstFit  # noqa: E402
from accasim.base.scheduler_class import EASYBackfilling, FirstInFirstOut  # noqa: E402
from accasim.base.simulator_class import Simulator  # noqa: E402

SCHEDULE = {"format": "{job_id} {start_time} {end_time}",
            "attributes": {"job_id": ("id", "str"), "start_time": ("start_time", "int"),
                           "end_time": ("end_time", "int")}}


def main(trace: str, nodes: int, policy: str, workdir: str) -> None:
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    config = work / "system.json"
    config.write_text(json.dumps({"groups": {"g": {"core": 1}}, "resources": {"g": nodes},
                                  "equivalence": {"processor": {"core": 1}}, "start_time": 0}))
    allocator = FirstFit()
    dispatcher = FirstInFirstOut(allocator) if policy == "fifo" else EASYBackfilling(allocator)
    logging.disable(logging.INFO)
    simulator = Simulator(trace, str(config), dispatcher, RESULTS_FOLDER_PATH=str(work),
                          SCHEDULE_OUTPUT=SCHEDULE, show_statistics=False, statistics_output=False,
                          scheduling_output=True, pprint_output=False)
    simulator.start_simulation(system_status=False)
    sys.stdout.write((work / f"sched-{Path(trace).name}").read_text())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
