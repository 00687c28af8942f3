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

# Entry formats: from its number on, what each changes in apply. Every format gate of the state
# machine and of the leader's proposals is one of these; a replica applies formats up to ENTRY_FORMAT.
FENCE_FORMAT = 2  # apply reads JobFinished.fenced (reports.py)
HISTORY_FORMAT = 2  # finished jobs are cleaned into history; InitCluster's clean period and retention
RECOVERY_FORMAT = 3  # joins list the instances their worker runs; strays and the recovery wait
ARRAY_FORMAT = 4  # job arrays: a submit may carry an array, actions and modifies select its elements
RESREQ_FORMAT = 5  # resource requirements parsed at submit and modify, a bad one refused (not verbatim)
ALLOCATION_FORMAT = 6  # requirements, consumables, multi-host allocations at the barrier; whole rusage[]
RESOURCES_FORMAT = 7  # host groups, shared resources (InitCluster, joins), -m, licenses at the barrier
PART_FORMAT = 8  # reports of a parallel job's part on its other hosts: part_ended, started.part
USAGE_FORMAT = 9  # usage while running (usage_now), an end's exit reason (MEMLIMIT), -M
DEPEND_FORMAT = 10  # dependencies (-w): checked at submit, kept current by apply, at the barrier
ELEMENT_FORMAT = 10  # history keys finished array elements by array and index (history.py)
LIMITS_FORMAT = 11  # limits (InitCluster, the `limits` table, their counters at the barrier), -P
FAIRSHARE_FORMAT = 11  # fair-share usage credited at each end (shares.py)
PREEMPT_FORMAT = 12  # PREEMPT decisions, `suspended` reports, the resume of a suspended victim
ONE_AT_A_TIME_FORMAT = 13  # a preemptor waits for its victims; a victim being killed does not resume
EXCLUSIVE_QUEUE_FORMAT = 13  # -x only in a queue that takes exclusive jobs
CHARGE_FORMAT = 13  # fair share charges requeued attempts, not the time suspended for a preemption
RUN_LIMIT_FORMAT = 14  # -W run limits and -We estimates on job specs, checked at submit
PASS_RECORD_FORMAT = 15  # a decisions entry's event carries its batch, so a recording can re-run the pass
AUDIT_FORMAT = 16  # the audit trail: audit rows, `audit` entries (a dry run, a refusal), scoped tokens
CHECKPOINT_FORMAT = 17  # checkpoints: -k on job specs, the CHECKPOINT action
START_FORMAT = 18  # a dispatch stamps the job's start time, until its worker reports its own
REFUSALS_FORMAT = 19  # a worker's refusal counts against the job, its owner there or the host (refusals.py)
ARG_FORMAT = 20  # a command argument or environment value may be as long as exec takes one (128 KiB)
LSF_FORMAT = 21  # bsub -H (held at submit), -b (the barrier: no dispatch before), -t, -E/-Ep; PRE_EXEC_FAILED
INTERACTIVE_FORMAT = 22  # INTERACTIVE_LOST: an interactive job that could not reach its submitter ends
JOB_GROUP_FORMAT = 23  # job groups: -g on specs, their limits (the job_group kind) kept across an init
USER_GROUP_FORMAT = 24  # [user_groups] (InitCluster, meta), -G on specs, fair share charged per user group
RESERVATION_FORMAT = 24  # -U on specs: checked at submit, placed in its reservation's slots (the kind)
TIMELINE_FORMAT = 24  # a job's state changes kept in its record (controller/fsm/timeline.py): bhist -l
CHUNK_FORMAT = 24  # job chunks: a DISPATCH's `chunk` attached, a lead's slot passed on at its end
KILLED_FORMAT = 24  # a job killed while it ran ends with the exit reason OWNER (the kill's, kept)
ZERO_INDEX_FORMAT = 24  # an array's indices may start at 0 (Slurm's --array=0-9)
COMMENT_FORMAT = 24  # a job's comment (sbatch --comment), checked as text at submit
MAIL_FORMAT = 24  # -u (mail_user) on specs, checked at submit; -B and -N are the workers' alone
FOREIGN_AUDIT_FORMAT = 25  # `audit` rows of the gateway's other clusters (one named) may be CONFIRMED
WARNING_FORMAT = 26  # a warning signal before the run limit (--signal, -wa/-wt) on specs, checked at submit
KEYED_AUDIT_FORMAT = 27  # every write audited (Entry.audit_note: the rest), rows name the key (key_id)
ENTRY_FORMAT = 27  # the highest this code applies
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
