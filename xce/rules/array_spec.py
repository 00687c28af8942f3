"""Job array indices, as LSF writes them: `name[1-1000:2,2000]%50`, and `17[200-400]` for elements.

An array's indices are a list of ranges start[-end[:step]], in the order
written; each element has a position 0..size-1 in that order (the first
range's indices, then the next range's). Positions are what the array's
record keeps (controller/fsm/arrays.py); indices are what users and jobs
see (`XCE_ARRAY_INDEX`, `%I`). Pure: the CLI and apply parse alike, and a
spec that does not parse is refused with words that say why.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence

from xce.v1 import api_pb2 as api

MAX_INDEX = (1 << 31) - 1   # LSF's indices are positive 32-bit numbers
MAX_RANGES = 100            # comma-separated parts of one spec
MAX_SELECTED_SPANS = 100_000  # separate elements a stepped selection (17[1-1000000:3]) may reach
DEFAULT_MAX_SIZE = 1_000_000  # elements of one array ([auth] max_array_size; LSF's MAX_JOB_ARRAY_SIZE)

_PART = re.compile(r"^(\d{1,10})(?:-(\d{1,10})(?::(\d{1,10}))?)?$")  # 10 digits: past 2^31 is refused
# name[indices]%limit (LSF) or name[indices%limit]
_NAMED = re.compile(r"^(?P<name>[^\[\]]*)\[(?P<indices>[^\[\]%]*)(?:%(?P<inner>[^\[\]]*))?\]"
                    r"(?:%(?P<outer>.*))?$")


class ArraySpecError(ValueError):
    """A spec that does not parse, in words for the person who wrote it."""


def parse_name(text: str, lowest: int = 1) -> tuple[str, api.ArraySpec | None]:
    """`-J` as bsub takes it: a plain name, or a name with indices (and a limit). `lowest`: the first
    index there may be (LSF's are from 1; Slurm's from 0, entry format 24)."""
    if "[" not in text and "]" not in text:
        return text, None
    found = _NAMED.match(text)
    if found is None:
        raise ArraySpecError(f"bad job array {text[:80]!r}: write name[1-100], name[1-100:2] or "
                             "name[1-100]%10")
    if found["inner"] is not None and found["outer"] is not None:
        raise ArraySpecError(f"bad job array {text[:80]!r}: the %limit is given twice")
    limit_text = found["inner"] if found["inner"] is not None else found["outer"]
    spec = api.ArraySpec(ranges=parse_indices(found["indices"], text, lowest))
    if limit_text is not None:
        digits = limit_text.isascii() and limit_text.isdecimal() and len(limit_text) <= 10
        if not digits or int(limit_text) < 1 or int(limit_text) > MAX_INDEX:
            raise ArraySpecError(f"bad job array {text[:80]!r}: the %limit must be a positive number, "
                                 f"not {limit_text[:20]!r}")
        spec.limit = int(limit_text)
    return found["name"], spec


def parse_indices(text: str, whole: str = "", lowest: int = 1) -> list[api.IndexRange]:
    """`1-1000:2,2000` -> ranges; every index from `lowest`, each range non-empty, the step positive."""
    whole = whole or f"[{text}]"
    parts = text.split(",")
    if len(parts) > MAX_RANGES:
        raise ArraySpecError(f"bad job array {whole[:80]!r}: more than {MAX_RANGES} ranges")
    ranges = []
    for part in parts:
        found = _PART.match(part.strip()) if part.isascii() else None
        if found is None:
            raise ArraySpecError(f"bad job array {whole[:80]!r}: {part[:40]!r} is not start, start-end "
                                 "or start-end:step")
        start = int(found[1])
        end = int(found[2]) if found[2] is not None else start
        step = int(found[3]) if found[3] is not None else 1
        if start < lowest or end > MAX_INDEX:
            raise ArraySpecError(f"bad job array {whole[:80]!r}: indices go from {lowest} to {MAX_INDEX}")
        if end < start:
            raise ArraySpecError(f"bad job array {whole[:80]!r}: {part!r} ends before it starts")
        if step < 1:
            raise ArraySpecError(f"bad job array {whole[:80]!r}: the step in {part!r} must be at least 1")
        ranges.append(api.IndexRange(start=start, end=end, step=step))
    return ranges


def check(spec: api.ArraySpec, max_size: int, lowest: int = 1) -> int:
    """The spec's size, if it is one apply accepts (ranges well formed, indices from `lowest`, no
    index twice, at most `max_size` elements); else ArraySpecError."""
    if not spec.ranges:
        raise ArraySpecError("a job array needs at least one index")
    if len(spec.ranges) > MAX_RANGES:
        raise ArraySpecError(f"a job array has at most {MAX_RANGES} ranges")
    if spec.limit < 0:
        raise ArraySpecError("the running limit of a job array must be positive")
    size = 0
    spans: list[tuple[int, int, int]] = []
    for r in spec.ranges:
        step = r.step or 1
        if r.start < lowest or r.end > MAX_INDEX or r.end < r.start or step < 1:
            raise ArraySpecError(f"bad range {r.start}-{r.end}:{r.step} in a job array")
        spans.append((r.start, r.end, step))
        size += range_size(r)
    if size > max_size:
        raise ArraySpecError(f"a job array of {size} elements; at most {max_size} ([auth] max_array_size)")
    _check_disjoint(spans)
    return size


def _check_disjoint(spans: list[tuple[int, int, int]]) -> None:
    for i, (s1, e1, p1) in enumerate(spans):
        for s2, e2, p2 in spans[i + 1:]:
            common = _first_common(s1, p1, s2, p2, max(s1, s2), min(e1, e2))
            if common is not None:
                raise ArraySpecError(f"index {common} is in a job array twice")


def _first_common(a: int, p: int, b: int, q: int, lo: int, hi: int) -> int | None:
    """The least x in [lo, hi] with x = a (mod p) and x = b (mod q), by the Chinese remainder theorem
    (constant work per pair of ranges, whatever their steps)."""
    if lo > hi:
        return None
    g = math.gcd(p, q)
    if (b - a) % g:
        return None
    m = q // g
    t = ((b - a) // g) * pow(p // g, -1, m) % m if m > 1 else 0
    x0, period = a + p * t, p // g * q
    x = x0 + -(-(lo - x0) // period) * period
    return x if x <= hi else None


def range_size(r: api.IndexRange) -> int:
    return (r.end - r.start) // (r.step or 1) + 1


def size_of(spec: api.ArraySpec) -> int:
    return sum(range_size(r) for r in spec.ranges)


def index_at(spec: api.ArraySpec, position: int) -> int:
    """The index of the element at `position`."""
    for r in spec.ranges:
        n = range_size(r)
        if position < n:
            return r.start + position * (r.step or 1)
        position -= n
    raise IndexError(position)


def positions_of(spec: api.ArraySpec, wanted: Sequence[api.IndexRange]) -> list[tuple[int, int]]:
    """The positions whose index is in `wanted` (ranges of indices), as sorted, merged (first, last)
    spans of positions: what an action on `17[200-400]` reaches."""
    spans: list[tuple[int, int]] = []
    base = 0
    for r in spec.ranges:
        step, n = r.step or 1, range_size(r)
        for w in wanted:
            wstep = w.step or 1
            if wstep == 1:
                lo = max(0, -(-(w.start - r.start) // step))
                hi = min(n - 1, (w.end - r.start) // step) if w.end >= r.start else -1
                if lo <= hi:
                    spans.append((base + lo, base + hi))
                continue
            spans += [(base + a, base + b) for a, b in _stepped(r.start, step, n, w.start, w.end, wstep)]
            if len(spans) > MAX_SELECTED_SPANS:
                raise ArraySpecError(f"a stepped selection may reach at most {MAX_SELECTED_SPANS} separate "
                                     "elements; select ranges, or fewer at a time")
        base += n
    return merge(spans)


def _stepped(s: int, p: int, n: int, a: int, b: int, q: int) -> list[tuple[int, int]]:
    """Positions k (0 <= k < n) with s + k*p in {a, a+q, ..., <= b}, as spans, by arithmetic (never
    by walking the indices: 1-2147483647:2 is a billion of them)."""
    g = math.gcd(p, q)
    if (a - s) % g:
        return []
    m = q // g  # the k that match repeat every m positions
    k0 = ((a - s) // g) * pow(p // g, -1, m) % m if m > 1 else 0
    lo = max(0, -(-(a - s) // p))
    hi = min(n - 1, (b - s) // p) if b >= s else -1
    first = lo + (k0 - lo) % m
    if first > hi:
        return []
    if m == 1:
        return [(first, hi)]
    count = (hi - first) // m + 1
    if count > MAX_SELECTED_SPANS:
        raise ArraySpecError(f"a stepped selection may reach at most {MAX_SELECTED_SPANS} separate elements; "
                             "select ranges, or fewer at a time")
    return [(k, k) for k in range(first, hi + 1, m)]


def merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def describe(spec: api.ArraySpec) -> str:
    """`1-1000:2,2000%50`, as the user wrote it (normalized)."""
    parts = []
    for r in spec.ranges:
        text = str(r.start) if r.end == r.start else f"{r.start}-{r.end}"
        parts.append(text + (f":{r.step}" if (r.step or 1) != 1 else ""))
    return ",".join(parts) + (f"%{spec.limit}" if spec.limit else "")


def parse_job_ref(text: str, lowest: int = 1) -> tuple[str, list[api.IndexRange] | None]:
    """`17`, `17[42]` or `17[1-100,200]` -> (the job id text, the selected indices or None)."""
    text = text.strip()
    if "[" not in text and "]" not in text:
        return text, None
    head, _, inside = text.removesuffix("]").partition("[")
    if not text.endswith("]") or not head or "[" in inside or "]" in inside:
        raise ArraySpecError(f"bad job reference {text[:80]!r}: write 17, 17[42] or 17[1-100]")
    return head, parse_indices(inside, text, lowest)


def iter_indices(spec: api.ArraySpec) -> Iterator[int]:
    for r in spec.ranges:
        yield from range(r.start, r.end + 1, r.step or 1)
