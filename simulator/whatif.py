"""What-ifs: `--set KEY=VALUE` changes to the policy a replay or a simulation runs with.

Theory of operation. A what-if names a setting by a dotted key and gives it
a value, checked here before anything runs: an unknown key is refused with
the list of the known ones, a bad value with what the key takes. Keys:
- `scheduler.picker`: the default job picker (fcfs, lifo, fairshare, or a
  registered plugin); `scheduler.max_dispatches`: dispatches per pass;
- `queue.NAME.picker` (the queue's job_pick_plugin), `queue.NAME.backfill`
  (any, none, easy, end_before, conservative), `queue.NAME.priority`,
  `queue.NAME.slot_limit` (0: none).
They apply to the queues a pass sees and to the scheduler's settings; the
recorded state is otherwise what it was. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from controller.config import BACKFILL
from scheduler import picker
from xce.v1 import api_pb2 as api

SCHEDULER_KEYS = ("picker", "max_dispatches")
QUEUE_KEYS = ("picker", "backfill", "priority", "slot_limit")
KNOWN = (*(f"scheduler.{k}" for k in SCHEDULER_KEYS), *(f"queue.NAME.{k}" for k in QUEUE_KEYS))


class WhatIfError(ValueError):
    pass


@dataclass(frozen=True)
class WhatIf:
    scheduler: dict[str, str | int] = field(default_factory=dict)
    queues: dict[str, dict[str, str | int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.scheduler or self.queues)

    def settings(self, settings: api.PlannerSettings) -> api.PlannerSettings:
        changed = api.PlannerSettings()
        changed.CopyFrom(settings)
        if "picker" in self.scheduler:
            changed.default_picker = str(self.scheduler["picker"])
        if "max_dispatches" in self.scheduler:
            changed.max_dispatches = int(self.scheduler["max_dispatches"])
        return changed

    def queue(self, queue: api.Queue) -> api.Queue:
        wanted = self.queues.get(queue.name)
        if not wanted:
            return queue
        changed = api.Queue()
        changed.CopyFrom(queue)
        if "picker" in wanted:
            changed.job_pick_plugin = str(wanted["picker"])
        if "backfill" in wanted:
            changed.backfill = "" if wanted["backfill"] == "any" else str(wanted["backfill"])
        if "priority" in wanted:
            changed.priority = int(wanted["priority"])
        if "slot_limit" in wanted:
            changed.slot_limit = int(wanted["slot_limit"])
        return changed

    def unknown_queues(self, names: Sequence[str]) -> list[str]:
        return sorted(set(self.queues) - set(names))


def parse(items: Sequence[str]) -> WhatIf:
    """`KEY=VALUE` items; WhatIfError naming the item and what is known or wanted."""
    what = WhatIf()
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise WhatIfError(f"--set {item!r}: KEY=VALUE wanted (known keys: {', '.join(KNOWN)})")
        parts = key.split(".")
        if len(parts) == 2 and parts[0] == "scheduler" and parts[1] in SCHEDULER_KEYS:
            what.scheduler[parts[1]] = _value(item, parts[1], value)
        elif len(parts) == 3 and parts[0] == "queue" and parts[1] and parts[2] in QUEUE_KEYS:
            what.queues.setdefault(parts[1], {})[parts[2]] = _value(item, parts[2], value)
        else:
            raise WhatIfError(f"--set {item!r}: unknown key {key!r} (known keys: {', '.join(KNOWN)})")
    return what


def _value(item: str, name: str, value: str) -> str | int:
    if name == "picker":
        try:
            picker.load(value)
        except picker.PickerError as exc:
            raise WhatIfError(f"--set {item!r}: {exc}") from None
        return value
    if name == "backfill":
        if value not in BACKFILL:
            raise WhatIfError(f"--set {item!r}: backfill is one of {', '.join(BACKFILL)}")
        return value
    try:
        number = int(value)
    except ValueError:
        raise WhatIfError(f"--set {item!r}: {name} is a whole number") from None
    if number < (1 if name == "max_dispatches" else 0 if name == "slot_limit" else -(2**31)) \
            or number >= 2**31:
        raise WhatIfError(f"--set {item!r}: {name} out of range")
    return number
