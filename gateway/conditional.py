"""Conditional and blocking reads, as HTTP and Nomad have them. Pure: answers in, decisions out.

- An ETag is a digest of the answer's JSON (keys sorted), so it changes exactly when what a client
  sees changes; a list's `revision` is left out of it (it moves with every commit anywhere).
- `If-None-Match` on a read: 304 when the answer has not changed. `If-Match` on a write: the write is
  made only if the job is as the client last saw it, else 412 with the job's ETag now.
- A blocking read (`?index=REV&wait=30s`): the answer waits until something it covers changes after
  revision REV, or the wait is over, as Nomad's blocking queries; `X-XCE-Index` names the revision to
  give next.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from gateway.problems import Problem

DEFAULT_WAIT_S = 60.0
MAX_WAIT_S = 300.0         # a proxy between client and gateway would cut a longer one anyway
MAX_HEADER = 1024          # an If-Match or If-None-Match longer than this is refused, not searched
_DURATION = re.compile(r"^([0-9]{1,9})(ms|s|m)?$")


def etag(answer: Any) -> str:
    """A strong ETag of a JSON answer (a list's revision aside)."""
    if isinstance(answer, dict) and "revision" in answer:
        answer = {k: v for k, v in answer.items() if k != "revision"}
    text = json.dumps(answer, sort_keys=True, separators=(",", ":"), default=str)
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def tags(header: str) -> list[str]:
    """The entity tags of an If-Match or If-None-Match header (`*` is itself; W/ prefixes kept)."""
    if len(header) > MAX_HEADER:
        raise Problem(400, f"an If-Match or If-None-Match header is at most {MAX_HEADER} characters")
    return [part.strip() for part in header.split(",") if part.strip()]


def none_match(header: str | None, current: str) -> bool:
    """Whether If-None-Match holds for `current` (so the read is 304). Weak comparison, as RFC 9110
    has it for If-None-Match."""
    if header is None:
        return False
    found = tags(header)
    return "*" in found or current in {t.removeprefix("W/") for t in found}


def match(header: str | None, current: str) -> bool:
    """Whether If-Match holds for `current` (strong comparison: a weak tag never matches)."""
    if header is None:
        return True
    found = tags(header)
    if not found:
        raise Problem(400, "If-Match is empty: give the ETag of the job as you last read it")
    return "*" in found or current in found


def wait_of(wait: str | None, index: int | None, most: float = MAX_WAIT_S) -> float | None:
    """How long a blocking read may wait (None: it does not block). `wait` is 30s, 500ms, 5m or a
    number of seconds, cut to `most` (the gateway's --max-wait) as Nomad cuts it; it needs `index`."""
    if wait is None and index is None:
        return None
    if index is None:
        raise Problem(400, "wait needs index: the revision to wait past (X-XCE-Index of an earlier answer)")
    if index < 0 or index >= 1 << 63:
        raise Problem(400, "index is a revision: a non-negative 64-bit integer")
    if wait is None:
        return min(DEFAULT_WAIT_S, most)
    found = _DURATION.match(wait.strip())
    if found is None:
        raise Problem(400, f"wait is a duration such as 30s, 500ms or 5m, not {wait[:30]!r}")
    number, unit = int(found.group(1)), found.group(2) or "s"
    seconds = number / 1000 if unit == "ms" else number * 60 if unit == "m" else float(number)
    return min(seconds, most)
