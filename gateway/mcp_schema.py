"""The MCP tools' contract as the SDK publishes it: every parameter's type, description and example
(its `inputSchema`), and every result's shape (its `outputSchema`, checked by the SDK on every call).

An agent reads nothing else before it calls a tool, so each parameter says what it is, its unit
(seconds, MB, bytes) and, where the set is closed (job states, templates, streams), the values it
takes. Results are TypedDicts: the tools build plain dicts and mypy checks them; the SDK validates
them against the same types before it answers. A result that relays the gateway's JSON declares
the fields an agent relies on and lets the rest through (`extra="allow"`): the gateway adds
fields as the cluster grows, and an agent should see them.

Pure: types only. The TypedDicts are typing_extensions' (pydantic reads the stdlib's below 3.12
only at the top level).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

# ------------------------------------------------------------------ parameters

JobState = Literal["PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "DONE", "EXIT", "UNKWN"]
TemplateName = Literal["general_serial", "multi_core", "parallel", "high_memory"]
StreamName = Literal["stdout", "stderr"]

MAX_TAIL_BYTES = 512 * 1024   # a worker sends at most the last 512 KiB of a job's output
MAX_WAIT_S = 3600.0           # one scheduler_wait_job call waits at most an hour
MAX_PAGE = 5000               # the gateway's largest page of jobs

JobId = Annotated[str, Field(
    description="The job: its number, its readable id, an array element (NUMBER[INDEX]), or another "
                "cluster's job by its qualified id (CLUSTER:ID, as readable_id shows it).",
    examples=["12", "12[3]", "hpc:17"], min_length=1, max_length=256)]
Cluster = Annotated[str, Field(
    description="Which of the gateway's clusters (scheduler_list_clusters names them); empty: XCE's own. "
                "A qualified job id (hpc:17) names its cluster itself.",
    examples=["hpc"], max_length=64)]
DryRun = Annotated[bool, Field(
    description="true: check everything and say what would happen, change nothing (the audit trail "
                "records the dry run). Try a write this way first.",
    examples=[True])]
UserName = Annotated[str, Field(description="Only jobs of this user (account name); empty: every user "
                                            "the key may see.", examples=["alice"], max_length=256)]
QueueFilter = Annotated[str, Field(description="Only jobs of this queue; empty: every queue.",
                                   examples=["normal"], max_length=256)]
StateFilter = Annotated[JobState | None, Field(
    description="Only jobs in this state: PEND waits, PSUSP held while pending, RUN runs, USUSP "
                "stopped by a user, SSUSP suspended by the system, DONE exited 0, EXIT failed or "
                "killed, UNKWN its host stopped answering.", examples=["PEND"])]
Filters = Annotated[list[str] | None, Field(
    description="Filters field:op:value that must all hold. Fields: id, state, queue, name, user, "
                "priority, slots, submit_time_ms, attempt; ops: eq ne lt le gt ge, and in (a comma "
                "list).", examples=[["priority:gt:10", "state:in:PEND,RUN"]])]
Limit = Annotated[int, Field(description="At most this many jobs (the answer says whether there are "
                                         "more).", examples=[50], ge=1, le=MAX_PAGE)]
Command = Annotated[list[str], Field(
    description="The command as an argv: the program, then each argument as its own string (no shell; "
                "use [\"sh\", \"-c\", \"...\"] for one).",
    examples=[["python3", "train.py", "--epochs", "3"]], min_length=1)]
Template = Annotated[TemplateName, Field(
    description="The kind of job: general_serial (one slot), multi_core (slots all on one host: "
                "threads, OpenMP), parallel (slots on as many hosts as it takes: MPI), high_memory (one "
                "slot with mem_mb reserved on its host; needs mem_mb).", examples=["multi_core"])]
Slots = Annotated[int | None, Field(description="How many slots (cores) it takes; unset: 1. "
                                                "general_serial takes only 1.", examples=[4], ge=1)]
MemoryMb = Annotated[int | None, Field(
    description="Its memory limit in MB (LSF -M): it is killed (exit reason MEMLIMIT) above it; "
                "high_memory also reserves it. Unset: no limit.", examples=[4096], ge=1)]
RunLimitS = Annotated[int | None, Field(
    description="Its run limit in seconds (LSF -W): it is killed (exit reason RUNLIMIT) after running "
                "this long. Unset: the queue's.", examples=[3600], ge=1)]
QueueName = Annotated[str, Field(description="The queue to submit to; empty: the cluster's default queue.",
                                 examples=["normal"], max_length=256)]
JobName = Annotated[str, Field(description="A name for the job, shown in lists; empty: none.",
                               examples=["nightly-build"], max_length=256)]
WorkingDir = Annotated[str, Field(
    description="Its working directory, an absolute path on the execution hosts; empty: its owner's "
                "home.", examples=["/home/alice/project"], max_length=4096)]
Priority = Annotated[int | None, Field(
    description="Its new priority inside its queue (higher runs first; a user's key may be capped by "
                "the queue). Unset: unchanged.", examples=[10])]
NewQueue = Annotated[str | None, Field(description="The queue to move it to (a pending job). Unset: "
                                                   "unchanged.", examples=["short"], max_length=256)]
ResourceReq = Annotated[str | None, Field(
    description="Its new resource requirement, LSF -R syntax (select[], rusage[], span[]). Unset: "
                "unchanged.", examples=["span[hosts=1] rusage[mem=2048]"], max_length=4096)]
Stream = Annotated[StreamName, Field(description="Which output: stdout or stderr.", examples=["stderr"])]
TailBytes = Annotated[int, Field(description=f"At most this many bytes from the end of the output (at "
                                             f"most {MAX_TAIL_BYTES}).", examples=[4096], ge=1,
                                 le=MAX_TAIL_BYTES)]
TimeoutS = Annotated[float, Field(description=f"Give up waiting after this many seconds (at most "
                                              f"{MAX_WAIT_S:.0f}); the answer says if it has not ended.",
                                  examples=[300], ge=0, le=MAX_WAIT_S)]
PendingJobId = Annotated[str, Field(
    description="One job to explain; empty: every pending job (of user and queue), grouped by reason.",
    examples=["12"], max_length=256)]
EstimateCommand = Annotated[list[str] | None, Field(
    description="The command it would run (only its resources matter); unset: a placeholder.",
    examples=[["python3", "train.py"]])]

# ------------------------------------------------------------------ results

_OPEN = ConfigDict(extra="allow")  # the gateway's JSON, with what it adds later


class JobRow(TypedDict):
    """A job in a list: who, where, what state and why."""

    id: Annotated[str, Field(description="Its number on its cluster.")]
    readable_id: Annotated[str, Field(description="Its readable id; another cluster's: CLUSTER:ID.")]
    name: str
    user: str
    queue: str
    slots: int
    state: Annotated[str, Field(description="PEND, PSUSP, RUN, USUSP, SSUSP, DONE, EXIT or UNKWN.")]
    pending_reason: NotRequired[str]
    host: NotRequired[Annotated[str, Field(description="Where it runs or ran.")]]
    exit_code: NotRequired[int]
    exit_reason: NotRequired[Annotated[str, Field(description="Why it ended: MEMLIMIT, RUNLIMIT, OWNER...")]]
    start_error: NotRequired[str]
    cluster: NotRequired[Annotated[str, Field(description="Its cluster, when not XCE's own.")]]


@with_config(_OPEN)
class JobRecord(TypedDict, total=False):
    """A job in full, as the gateway answers it (protobuf JSON: 64-bit numbers are strings, fields at
    their default are left out)."""

    id: str
    readable_id: str
    spec: Annotated[dict[str, Any], Field(description="What was asked: command, queue, slots, limits.")]
    state: str
    pending_reason: str
    pending_code: str
    host: str
    exit_code: int
    exit_reason: str
    submit_time_ms: str
    start_time_ms: str
    end_time_ms: str
    usage: dict[str, Any]
    cluster: str
    native: Annotated[dict[str, str], Field(description="Another cluster's own words for it.")]


@with_config(_OPEN)
class ClusterInfo(TypedDict):
    name: str
    backend: Annotated[str, Field(description="xce, slurm or lsf.")]
    local: bool
    healthy: bool
    health: str
    supports: list[str]
    cannot: list[str]
    in_scope: Annotated[bool, Field(description="Whether this key may use it.")]


class Clusters(TypedDict):
    clusters: list[ClusterInfo]
    default: Annotated[str, Field(description="The cluster a call without `cluster` uses.")]


class Replica(TypedDict):
    id: int | None
    role: Annotated[str | None, Field(description="leader, follower, candidate or unreachable.")]
    health: str | None


class HostCounts(TypedDict):
    total: int
    up: int
    slots: Annotated[int, Field(description="Slots of the hosts up.")]
    slots_used: int


class ClusterStatus(TypedDict):
    cluster: str | None
    backend: str
    replicas: list[Replica]
    scheduler: Annotated[str, Field(description="The scheduler holding the lease, or that none does.")]
    hosts: HostCounts
    queues: list[str]
    jobs_by_state: Annotated[dict[str, int], Field(description="Live jobs by state.")]
    jobs_counted: Annotated[int | str, Field(description="How many jobs were counted (\"first N\": some "
                                                         "were left out).")]


class JobList(TypedDict):
    jobs: list[JobRow]
    shown: int
    more: Annotated[bool, Field(description="More jobs match than were shown: filter, or raise limit.")]


class HostRow(TypedDict):
    name: str
    status: Annotated[str, Field(description="HOST_OK when up; else why not.")]
    slots: int
    slots_used: int
    memory_mb: Annotated[int, Field(description="Its memory, MB.")]
    closed: bool
    load: Annotated[dict[str, float], Field(description="Load indices by name (r1m, ut, mem...).")]


class HostList(TypedDict):
    hosts: list[HostRow]


@with_config(_OPEN)
class QueueInfo(TypedDict, total=False):
    name: str
    priority: int
    description: str
    closed: bool
    inactive: bool


@with_config(_OPEN)
class QueueList(TypedDict, total=False):
    queues: list[QueueInfo]
    default_queue: str
    cluster: str


class ReasonGroup(TypedDict):
    code: Annotated[str, Field(description="The reason's code, e.g. PEND_JOB_HELD, PEND_NO_FREE_SLOTS.")]
    jobs: int
    first: Annotated[list[str], Field(description="The first ten of its jobs' ids.")]
    reason: Annotated[str, Field(description="The reason in words, for the first of them.")]


class PendingReasons(TypedDict, total=False):
    """For one job: job, state, pending_code, pending_reason, depend_state. Else: pending,
    by_reason, partial."""

    job: str | None
    state: str | None
    pending_code: str
    pending_reason: str
    depend_state: str
    pending: int
    by_reason: list[ReasonGroup]
    partial: Annotated[bool, Field(description="Only the first jobs were read.")]


class JobOutput(TypedDict):
    job: str
    stream: StreamName
    host: Annotated[str, Field(description="The host whose worker read it.")]
    size: Annotated[int, Field(description="The whole output's size in bytes.")]
    text: str
    truncated: Annotated[bool, Field(description="Only the end was sent (size is larger).")]


class Submitted(TypedDict, total=False):
    """A submit: `submitted`; a dry run: `dry_run` (in words) and `job` (as it would be made)."""

    submitted: JobRow
    dry_run: str
    job: JobRecord


class Acted(TypedDict):
    """The job after the action; a dry run: the job as it is, and what would happen in words."""

    job: JobRow
    dry_run: NotRequired[str]


class Waited(TypedDict):
    ended: bool
    job: JobRow
    exit_code: NotRequired[int]
    note: NotRequired[Annotated[str, Field(description="Why it returned before the job ended.")]]


class Failure(TypedDict):
    job: str
    state: str
    exit_code: int
    signal: int
    exit_reason: str
    max_rss_mb: Annotated[int, Field(description="Its largest resident memory, MB.")]
    ran_s: Annotated[float, Field(description="How long it ran, seconds.")]
    causes: Annotated[list[str], Field(description="Why it ended so, in words.")]
    suggestions: Annotated[list[str], Field(description="What to change, as tool arguments where one fits.")]
    native: NotRequired[dict[str, str]]
    stderr_tail: NotRequired[Annotated[str, Field(description="The end of its stderr, or why not.")]]


class Suggestion(TypedDict):
    based_on: Annotated[int, Field(description="How many finished jobs of the program it read.")]
    program: str
    slots: int
    mem_mb: Annotated[int | None, Field(description="A memory limit for mem_mb, MB; null: no history.")]
    run_limit_s: Annotated[int | None, Field(description="A run limit for run_limit_s, seconds.")]
    failed: NotRequired[int]
    why: str


class WaitEstimate(TypedDict):
    start_in_s: Annotated[int | None, Field(description="Seconds until it would start; null: it "
                                                        "would not (why says).")]
    ahead: NotRequired[Annotated[int, Field(description="Jobs simulated before it.")]]
    hosts: NotRequired[Annotated[int, Field(description="Hosts up and open.")]]
    why: str
    assumed: Annotated[list[str], Field(description="What the estimate takes for granted.")]
