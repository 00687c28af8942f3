"""What a host may say of itself when it joins: its name, slots, memory, resources and tags.

One set of rules for both sides: a worker refuses its own configuration
with them before it ever joins (worker/config.py), and the leader and apply
refuse a join that breaks them (controller/fsm). Text fields are bounded as
every field of a request is (MAX_STRING characters, no NUL: a NUL would cut
a name short in C code that reads it).
"""

from __future__ import annotations

from xce.errors import invalid
from xce.v1 import api_pb2 as api

MAX_HOST_NAME = 64
MAX_HOST_SLOTS = 100_000
MAX_STRING = 4096
MAX_RUNNING_LISTED = 50_000  # with the rest of a join, well under an entry's bound


def check_text(what: str, value: str) -> None:
    if len(value) > MAX_STRING:
        raise invalid(f"{what} longer than {MAX_STRING} characters")
    if "\x00" in value:
        raise invalid(f"{what} contains a NUL character")


def check_host_spec(spec: api.HostSpec) -> None:
    name = spec.name
    if not name or len(name) > MAX_HOST_NAME or not all(c.isascii() and (c.isalnum() or c in "_-.")
                                                         for c in name):
        raise invalid(f"bad host name {name[:80]!r} (letters, digits, _ - . ; 1-64)")
    if not 0 <= spec.slots <= MAX_HOST_SLOTS:
        raise invalid(f"host slots must be between 0 and {MAX_HOST_SLOTS}, got {spec.slots}")
    if spec.memory_mb < 0:
        raise invalid("host memory must not be negative")
    for key, value in spec.resources.items():
        check_text("resource name", key)
        if not key or not value >= 0 or value == float("inf"):
            raise invalid(f"resource {key!r} must be a finite number >= 0")
    for tag in spec.tags:
        check_text("tag", tag)
    most = min(MAX_RUNNING_LISTED, max(1024, 2 * spec.slots))
    if len(spec.running) > most:
        raise invalid(f"a join of a host of {spec.slots} slots lists at most {most} running instances")
