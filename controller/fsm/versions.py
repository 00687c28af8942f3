"""Which entries a replica understands, and which the leader may propose.

Theory of operation (etcd's cluster version). A replica applies the entry
kinds of its handler table and entry formats up to ENTRY_FORMAT; an entry of
any other kind or a higher format stops it (fail-stop: it never guesses).
So a new kind must not be proposed while any replica would not understand
it: each replica reports what its code understands in its Status (kinds and
format), the leader commits that as an `announce` entry per replica, and
proposes a kind past BASELINE_KINDS only once every member of the
committed membership has announced it (`enabled`). During a rolling
upgrade the old replicas keep the new kinds off; once the last replica runs
the new code, the leader turns them on.

The baseline is what every replica of this format understood from the start
(the kinds before versioning, and `announce` itself); it is never gated.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError

from xce.v1 import log_pb2 as log

# 2: finished jobs are cleaned into history (history.py), InitCluster's clean period and retention.
# 3: joins list the instances their worker runs; strays and the recovery wait (recovery.py).
# 4: job arrays: a submit may carry an array, actions and modifies may select its elements (arrays.py).
# 5: resource requirements are parsed at submit and modify, and a bad one refused (validation.py).
# 6: allocations: requirements, consumables and several hosts checked at the barrier (decisions.py).
# 7: host groups and shared resources (InitCluster, joins), -m, licenses at the barrier (resources.py).
# 8: reports of a parallel job's part on its other hosts (reports.py: PART_FORMAT).
# 9: usage while running, an end's exit reason (MEMLIMIT), -M (reports.py: USAGE_FORMAT).
# 10: dependencies (-w): checked at submit, kept current by apply, at the barrier (depends.py).
# 11: limits (InitCluster, the `limits` table, their counters at the barrier; limit_config.py), -P,
#     fair-share usage credited at each end (shares.py).
# 12: preemption: PREEMPT decisions, `suspended` reports, the resume of a suspended victim (preempt.py).
# 13: a PREEMPT for a job whose earlier victims still hold their slots is refused, and the resume of a
#     suspended victim being killed (preempt.py); -x only in a queue with `exclusive` (validation.py);
#     fair share charges requeued attempts, not the time suspended for a preemption (shares.py).
# 14: -W run limits and -We estimates on job specs, checked at submit (validation.py).
# 15: a decisions entry's event carries its batch, so a recording can re-run the pass (applier.py).
# 16: the audit trail: audited submits, actions and modifications write a row; `audit` entries (a dry
#     run, a refusal); scoped tokens (audit.py).
# 17: checkpoints: -k on job specs, the CHECKPOINT action (jobs.py, validation.py).
# 18: a dispatch stamps the job's start time, until its worker reports its own (holdings.py).
# 19: a worker's refusal counts against the job, its owner on that host, or the host, by its code: the
#     job's own ends it (EXIT 127, 126, 2) or is retried with a backoff a bounded number of times; the
#     owner's keeps the job off that host generation; only the host's cools the host (refusals.py).
ENTRY_FORMAT = 19
BASELINE_KINDS = frozenset({
    "submit", "control", "modify", "put_queue", "init", "join_host", "host_status", "dispatch", "report",
    "resolve_host", "lease", "decisions", "reports", "joins", "announce",
})


def enabled(meta: log.Meta, members: Iterable[int]) -> frozenset[str]:
    """The kinds past the baseline that every member has announced."""
    common: set[str] | None = None
    for member in members:
        capabilities = meta.members.get(member)
        if capabilities is None:
            return frozenset()
        kinds = set(capabilities.kinds) - BASELINE_KINDS
        common = kinds if common is None else common & kinds
    return frozenset(common or ())


def proposal_format(meta: log.Meta, members: Iterable[int]) -> int:
    """The highest format every member understands (at least the first)."""
    formats = [meta.members[m].format if m in meta.members else 1 for m in members]
    return max(1, min(formats, default=1))


class EntryNotUnderstood(Exception):
    """This replica's code cannot apply the entry: stop rather than guess."""

    def __init__(self, index: int, kind: str, format_: int, why: str) -> None:
        super().__init__(f"entry {index} (kind {kind}, format {format_}): {why}")
        self.index = index
        self.kind = kind
        self.format = format_


def describe(data: bytes) -> tuple[str, int]:
    """(kind, format) of an entry for a log line: 'undecodable', or 'unknown (field N)'."""
    entry = log.Entry()
    try:
        entry.ParseFromString(data)
    except DecodeError:
        return "undecodable", 0
    kind = entry.WhichOneof("body")
    if kind is None:
        fields = _unknown_field_numbers(entry)
        kind = f"unknown (field {', '.join(map(str, fields))})" if fields else "none"
    return kind, entry.format or 1


def _unknown_field_numbers(entry: log.Entry) -> list[int]:
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet

        unknown = UnknownFieldSet(entry)
        return sorted({unknown[i].field_number for i in range(len(unknown))})
    except (ImportError, TypeError):  # older protobuf: the number is not known
        return []
