"""The log entry schema is pinned: a field added to anything an entry carries is a decision.

A replica ignores a protobuf field its code does not know. So an entry
carrying a new field that changes what apply does would be applied without
it by an older replica, and the replicas would diverge: exactly what
fail-stop and versioned entries exist to prevent (controller/fsm/versions.py).
The rule: a field apply reads comes with a new ENTRY_FORMAT, and the leader
sets it only once every member announced that format; a field apply ignores
(for people, for replay) needs no new format. This test makes the choice
explicit: any change to the fields reachable from `log.Entry` fails here
until tests/unit/entry_schema.txt is rewritten (`python tests/unit/test_unit_entry_schema.py
--write`), which a reviewer sees in the diff, along with ENTRY_FORMAT.
"""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf.descriptor import Descriptor

from controller.fsm.versions import ENTRY_FORMAT
from xce.v1 import log_pb2 as log

GOLDEN = Path(__file__).resolve().parent / "entry_schema.txt"


def schema() -> str:
    """Every message reachable from Entry, with its fields by number, name and type."""
    lines = [f"format {ENTRY_FORMAT}"]
    seen: set[str] = set()
    todo: list[Descriptor] = [log.Entry.DESCRIPTOR]
    while todo:
        message = todo.pop()
        if message.full_name in seen:
            continue
        seen.add(message.full_name)
        for field in sorted(message.fields, key=lambda f: f.number):
            kind = field.message_type.full_name if field.message_type is not None else \
                field.enum_type.full_name if field.enum_type is not None else str(field.type)
            repeated = "repeated " if field.is_repeated else ""
            lines.append(f"{message.full_name}.{field.number} {field.name}: {repeated}{kind}")
            if field.message_type is not None:
                todo.append(field.message_type)
    return "\n".join([lines[0], *sorted(lines[1:])]) + "\n"


def test_the_entry_schema_is_the_pinned_one() -> None:
    assert GOLDEN.read_text() == schema(), (
        "the fields a log entry can carry changed. A field apply reads needs a new ENTRY_FORMAT "
        "(controller/fsm/versions.py) and must not be set before every member announced it; then "
        "rewrite the pin: python tests/unit/test_unit_entry_schema.py --write")


def test_the_pin_names_the_fields_apply_reads() -> None:
    text = schema()
    for needle in ("xce.v1.Entry.3 format: 13", "xce.v1.Queue.7 slot_limit: 5",
                   "xce.v1.JobSpec.12 rerunnable: 8"):
        assert needle in text, needle


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(schema())
    print(f"wrote {GOLDEN}")
