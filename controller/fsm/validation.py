"""Validation shared by the leader's pre-check and by apply.

The leader checks a request against its applied state before proposing it
(bad input never reaches the log, so nothing changes); apply checks again,
since the state may have moved between the check and the commit. Both call
these functions, which raise ServiceError with a code and words.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.fsm import dependency_refs
from controller.fsm.records import (
    FINISHED,
    MAX_REQUEST_ID_BYTES,
    PENDING,
    read_host,
    read_queue,
)
from controller.fsm.versions import (
    ALLOCATION_FORMAT,
    ARG_FORMAT,
    CHECKPOINT_FORMAT,
    CHUNK_FORMAT,
    COMMENT_FORMAT,
    DEPEND_FORMAT,
    EXCLUSIVE_QUEUE_FORMAT,
    INTERACTIVE_FORMAT,
    JOB_GROUP_FORMAT,
    LIMITS_FORMAT,
    LSF_FORMAT,
    MAIL_FORMAT,
    PREEMPT_FORMAT,
    RESERVATION_FORMAT,
    RESOURCES_FORMAT,
    RESREQ_FORMAT,
    RUN_LIMIT_FORMAT,
    USAGE_FORMAT,
    USER_GROUP_FORMAT,
    WARNING_FORMAT,
)
from controller.tables import Tables
from xce import mail_address
from xce.errors import ServiceError, invalid
from xce.host_spec import check_text
from xce.rules import (
    dependency_conditions,
    fairshare,
    feasibility,
    job_groups,
    reservations,
    resreq,
    user_groups,
    warning_signal,
)
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

MAX_COMMAND_ARGS = 4096
MAX_CHUNK = 1000  # jobs in one chunk (LSF's CHUNK_JOB_SIZE)
# The kernel's bound on one argument or one NAME=VALUE of the environment (MAX_ARG_STRLEN, with its NUL):
# a job script given as an argument (bsub < script), or a submitter's environment copied as LSF does.
MAX_ARG_BYTES = 131071
MAX_QUEUE_NAME = 64
# datetime's range (years 1-9999), which readable ids need.
MIN_STAMP_MS, MAX_STAMP_MS = -62135596800000, 253402300799999
DEFAULT_QUEUE = "normal"
DEFAULT_MAX_SLOTS = 1024


def check_request_id(request_id: str) -> None:
    # LMDB keys are at most 511 bytes; the expiry key adds 8.
    if len(request_id.encode()) > MAX_REQUEST_ID_BYTES:
        raise invalid(f"request id longer than {MAX_REQUEST_ID_BYTES} bytes")


# 5: resource requirements are parsed (xce/rules/resreq.py) and a bad one refused; before, stored verbatim.
# 6: they are used (decisions.py: ALLOCATION_FORMAT): rusage[] amounts are whole, -n takes min,max.
MAX_ASKED = 1000  # names in one job's -m
CHECKPOINT_SIGNALS = (1, 2, 10, 12)  # what a job's shim outlives (worker/shim.py): HUP, INT, USR1, USR2
MAX_RUN_LIMIT_S = 10 * 366 * 86400


def check_nesting(resource_req: str = "", condition: str = "") -> None:
    """The leader's bound on how deep -R and -w expressions nest (xce.rules.resreq.MAX_NESTING), before
    anything else reads them: INVALID_ARGUMENT, never a RecursionError. Not apply's: an entry an
    older leader took is read as it was (its expressions were at most as deep as a stack allowed)."""
    try:
        if resource_req.strip():
            resreq.parse(resource_req, max_nesting=resreq.MAX_NESTING)
    except resreq.RequirementError as exc:
        raise invalid(f"resource requirement {resource_req[:200]!r}: {exc}") from None
    try:
        if condition.strip():
            dependency_conditions.parse(condition, max_nesting=dependency_conditions.MAX_NESTING)
    except dependency_conditions.DependencyError as exc:
        raise invalid(f"-w {condition[:200]!r}: {exc}") from None


def check_requirement(text: str, entry_format: int) -> None:
    check_text("resource requirement", text)
    if entry_format >= RESREQ_FORMAT:
        try:
            grammar = resreq.GRAMMAR if entry_format >= ALLOCATION_FORMAT else resreq.GRAMMAR_5
            parsed = resreq.parse(text, grammar)
        except resreq.RequirementError as exc:
            raise invalid(f"resource requirement {text[:200]!r}: {exc}") from None
        if entry_format >= ALLOCATION_FORMAT:
            for name, amount in parsed.rusage:
                if not 0 <= amount <= feasibility.MAX_AMOUNT or amount != int(amount):
                    raise invalid(f"resource requirement {text[:200]!r}: rusage[{name}={amount:g}]: amounts "
                                  "are whole numbers (mem in MB)")


def check_spec(tables: Tables, meta: log.Meta, spec: api.JobSpec, entry_format: int = 1) -> None:
    """A job's spec, at submit and modify: refused (ServiceError) with the first fault found."""
    _check_command_and_text(spec, entry_format)
    _check_slots(meta, spec, entry_format)
    check_queue_open(tables, spec.queue or meta.default_queue or DEFAULT_QUEUE)
    if spec.exclusive and entry_format >= EXCLUSIVE_QUEUE_FORMAT:
        name = spec.queue or meta.default_queue or DEFAULT_QUEUE
        queue = read_queue(tables, name)
        if queue is None or not queue.exclusive:
            # LSF: a queue takes exclusive jobs only if it says so; else any user could keep hosts whole.
            raise invalid(f"-x: queue {name} does not take exclusive jobs (its `exclusive = true` would)")
    if spec.hosts and entry_format >= RESOURCES_FORMAT:  # before, an unknown field, kept unread
        check_asked(tables, meta, spec.hosts)
    if entry_format >= DEPEND_FORMAT:
        dependency_refs.check(tables, spec)
    if spec.project and entry_format >= LIMITS_FORMAT:
        check_project(spec.project)
    _check_limits_and_checkpoint(spec, entry_format)
    if entry_format >= LSF_FORMAT:
        check_lsf_options(spec)
    if entry_format >= JOB_GROUP_FORMAT and spec.job_group:
        try:
            job_groups.check_path(spec.job_group)
        except job_groups.JobGroupError as exc:
            raise invalid(f"-g: {exc}") from None
    if entry_format >= USER_GROUP_FORMAT and spec.user_group:
        check_user_group(meta, spec)
    if entry_format >= RESERVATION_FORMAT and spec.reservation:
        check_reservation(tables, spec)
    if entry_format >= COMMENT_FORMAT and spec.comment:
        check_text("comment", spec.comment)
    if entry_format >= MAIL_FORMAT and spec.mail_user and not mail_address.valid(spec.mail_user):
        raise invalid(f"-u {spec.mail_user[:80]!r}: a mail address is a user name or user@domain (letters, "
                      "digits, . _ % + = -)")
    if entry_format >= WARNING_FORMAT and has_warning(spec):
        check_warning(spec)


def has_warning(spec: api.JobSpec) -> bool:
    return bool(spec.warning_signal or spec.warning_time_s or spec.warning_to)


def check_warning(spec: api.JobSpec) -> None:
    """sbatch --signal, bsub -wa/-wt: a signal (1-64; to processes under a shim, one it outlives), a time
    before the run limit (0-65535 s) and whom it goes to (xce/rules/warning_signal.py). Without a run
    limit it is never due (Slurm takes it all the same)."""
    wrong = warning_signal.problem(spec)
    if wrong:
        raise invalid(wrong)


def check_reservation(tables: Tables, spec: api.JobSpec) -> None:
    """-U names a reservation (brsvadd) its owner may use; not with -x (its slots are what it has)."""
    if spec.exclusive:
        raise invalid(f"-U {spec.reservation[:80]} with -x: a job of a reservation runs in its slots, not "
                      "on whole hosts")
    raw = tables.get("reservations", spec.reservation.encode())
    if raw is None:
        raise invalid(f"-U {spec.reservation[:80]}: Advance reservation does not exist")
    if not reservations.may_use(api.Reservation.FromString(raw), spec.user):
        raise invalid(f"-U {spec.reservation}: User not in the advance reservation's user list")


def check_user_group(meta: log.Meta, spec: api.JobSpec) -> None:
    """-G names a user group ([user_groups]) that has the job's owner (LSF's words)."""
    group = user_groups.find(meta.user_groups, spec.user_group)
    if group is None:
        raise invalid(f"-G {spec.user_group[:80]}: Bad user group name")
    if spec.user not in group.members:
        raise invalid(f"-G {group.name}: User not in the specified user group")


# The fields of LSF's scheduling options (entry format 21): apply before it would keep them unread.
LSF_OPTIONS = ("hold", "begin_time_ms", "term_time_ms", "pre_exec", "post_exec")


def check_lsf_options_known(spec: api.JobSpec, entry_format: int) -> None:
    """The leader's check: options an older replica's apply would ignore are refused, not dropped."""
    if entry_format < LSF_FORMAT and any(getattr(spec, name) for name in LSF_OPTIONS):
        raise invalid(f"-H, -b, -t, -E and -Ep need entry format {LSF_FORMAT}: every replica must run "
                      "a newer XCE first")
    if entry_format < JOB_GROUP_FORMAT and spec.job_group:
        raise invalid(f"-g (job groups) needs entry format {JOB_GROUP_FORMAT}: every replica must run a "
                      "newer XCE first")
    if entry_format < USER_GROUP_FORMAT and spec.user_group:
        raise invalid(f"-G (user groups) needs entry format {USER_GROUP_FORMAT}: every replica must run a "
                      "newer XCE first")
    if entry_format < COMMENT_FORMAT and spec.comment:
        raise invalid(f"--comment needs entry format {COMMENT_FORMAT}: every replica must run a newer XCE "
                      "first")
    if entry_format < MAIL_FORMAT and (spec.mail_user or spec.mail_begin or spec.mail_end):
        raise invalid(f"-u, -B and -N (job mail) need entry format {MAIL_FORMAT}: every replica must run a "
                      "newer XCE first")
    if entry_format < WARNING_FORMAT and has_warning(spec):
        raise invalid(f"--signal and -wa/-wt (a warning signal before the run limit) need entry format "
                      f"{WARNING_FORMAT}: every replica must run a newer XCE first")
    if entry_format < RESERVATION_FORMAT and spec.reservation:
        raise invalid(f"-U (advance reservations) needs entry format {RESERVATION_FORMAT}: every replica "
                      "must run a newer XCE first")
    if entry_format < INTERACTIVE_FORMAT and "XCE_INTERACTIVE" in spec.env:
        raise invalid(f"an interactive job (bsub -I) needs entry format {INTERACTIVE_FORMAT}: every replica "
                      "must run a newer XCE first")


def check_lsf_options(spec: api.JobSpec) -> None:
    """-b and -t: times a datetime can hold, the end after the begin; -E and -Ep: text."""
    for flag, stamp in (("-b", spec.begin_time_ms), ("-t", spec.term_time_ms)):
        if stamp and not 0 < stamp <= MAX_STAMP_MS:
            raise invalid(f"{flag}: a time from 1970 to 9999")
    if spec.begin_time_ms and spec.term_time_ms and spec.term_time_ms <= spec.begin_time_ms:
        raise invalid("-t: the termination time must come after the begin time (-b)")
    for flag, command in (("-E", spec.pre_exec), ("-Ep", spec.post_exec)):
        check_text(f"{flag} command", command)
        if command and not command.strip():
            raise invalid(f"{flag}: an empty command")


def _check_command_and_text(spec: api.JobSpec, entry_format: int) -> None:
    if not spec.command or not spec.command[0].strip():
        raise invalid("empty command")
    if len(spec.command) > MAX_COMMAND_ARGS:
        raise invalid(f"more than {MAX_COMMAND_ARGS} command arguments")
    for arg in spec.command:
        _check_arg("command argument", arg, entry_format)
    for what, value in (("name", spec.name), ("queue", spec.queue), ("stdout path", spec.stdout_path),
                        ("stderr path", spec.stderr_path), ("cwd", spec.cwd), ("user", spec.user)):
        check_text(what, value)
    check_requirement(spec.resource_req, entry_format)
    for key, value in spec.env.items():
        check_text("environment name", key)
        if not key or "=" in key:
            raise invalid(f"bad environment name {key[:80]!r}")
        if entry_format < ARG_FORMAT:
            check_text("environment value", value)
        else:
            _check_arg(f"environment variable {key}", f"{key}={value}", entry_format)


def _check_arg(what: str, value: str, entry_format: int) -> None:
    """One argument of the command, or one NAME=VALUE of its environment: no NUL, and no longer than
    exec takes one (before ARG_FORMAT: MAX_STRING characters, as every other text)."""
    if entry_format < ARG_FORMAT:
        check_text(what, value)
        return
    if "\x00" in value:
        raise invalid(f"{what} contains a NUL character")
    if len(value) * 4 > MAX_ARG_BYTES and len(value.encode()) > MAX_ARG_BYTES:
        raise invalid(f"{what} longer than {MAX_ARG_BYTES} bytes (what exec takes as one)")


def _check_slots(meta: log.Meta, spec: api.JobSpec, entry_format: int) -> None:
    """-n (slots, and their minimum) and -M."""
    max_slots = meta.max_slots_per_job or DEFAULT_MAX_SLOTS
    if spec.HasField("slots") and not 1 <= spec.slots <= max_slots:
        raise invalid(f"slots must be between 1 and {max_slots}, got {spec.slots}")
    if spec.mem_limit_mb and entry_format >= USAGE_FORMAT and not 0 < spec.mem_limit_mb <= 1 << 40:
        raise invalid(f"-M {spec.mem_limit_mb}: a memory limit is a number of MB from 1 to 2^40")
    # Before format 6 the field is unknown to apply (an older replica keeps it unread): so here.
    # The leader refuses it then (check_min_slots_known).
    if spec.HasField("min_slots") and entry_format >= ALLOCATION_FORMAT:
        most = spec.slots if spec.HasField("slots") else 1
        if not 1 <= spec.min_slots <= most:
            raise invalid(f"-n {spec.min_slots},{most}: the minimum must be between 1 and the maximum")


def _check_limits_and_checkpoint(spec: api.JobSpec, entry_format: int) -> None:
    """-W, -We and -k."""
    if entry_format >= RUN_LIMIT_FORMAT:
        for flag, seconds in (("-W", spec.run_limit_s), ("-We", spec.estimate_s)):
            if not 0 <= seconds <= MAX_RUN_LIMIT_S:
                raise invalid(f"{flag} {seconds} s: from 0 (none) to ten years ({MAX_RUN_LIMIT_S} s)")
    if entry_format >= CHECKPOINT_FORMAT and spec.checkpoint_signal and \
            spec.checkpoint_signal not in CHECKPOINT_SIGNALS:
        raise invalid(f"-k {spec.checkpoint_signal}: the checkpoint signal is HUP (1), INT (2), USR1 (10) "
                      "or USR2 (12)")


MAX_PROJECT = 256


def check_project(project: str) -> None:
    """-P: names joined by "/" (research/genomics), each of letters, digits, _ - . and +."""
    parts = project.split("/")
    if len(project) > MAX_PROJECT or not all(part and all(c.isascii() and (c.isalnum() or c in "_-.+")
                                                          for c in part) for part in parts):
        raise invalid(f"-P {project[:80]!r}: a project is names joined by / (research/genomics), each of "
                      f"letters, digits, _ - . +; at most {MAX_PROJECT} characters")


def check_asked(tables: Tables, meta: log.Meta, names: Iterable[str]) -> None:
    """-m names hosts that have joined, or host groups; anything else is refused at submit."""
    names = list(names)
    if len(names) > MAX_ASKED:
        raise invalid(f"-m names at most {MAX_ASKED} hosts and groups")
    groups = {g.name for g in meta.host_groups}
    for name in names:
        if name not in groups and read_host(tables, name) is None:
            raise invalid(f"-m: unknown host or host group {name[:80]!r}")



def check_min_slots_known(spec: api.JobSpec, entry_format: int) -> None:
    """The leader's own check: -n min,max and -m are refused until every replica reads them."""
    if spec.HasField("min_slots") and entry_format < ALLOCATION_FORMAT:
        raise ServiceError(log.FAILED_PRECONDITION, "-n min,max needs every replica at entry format "
                           f"{ALLOCATION_FORMAT} (xce status shows each one's)")
    if spec.mem_limit_mb and entry_format < USAGE_FORMAT:
        raise ServiceError(log.FAILED_PRECONDITION, "-M needs every replica at entry format "
                           f"{USAGE_FORMAT} (xce status shows each one's)")
    if spec.hosts and entry_format < RESOURCES_FORMAT:
        raise ServiceError(log.FAILED_PRECONDITION, f"-m needs every replica at entry format "
                           f"{RESOURCES_FORMAT} (xce status shows each one's)")
    if spec.exclusive and entry_format < PREEMPT_FORMAT:
        raise ServiceError(log.FAILED_PRECONDITION, "-x needs every replica at entry format "
                           f"{PREEMPT_FORMAT} (xce status shows each one's)")
    if spec.checkpoint_signal and entry_format < CHECKPOINT_FORMAT:
        raise ServiceError(log.FAILED_PRECONDITION, "-k needs every replica at entry format "
                           f"{CHECKPOINT_FORMAT} (xce status shows each one's)")
    if (spec.run_limit_s or spec.estimate_s) and entry_format < RUN_LIMIT_FORMAT:
        raise ServiceError(log.FAILED_PRECONDITION, "-W and -We need every replica at entry format "
                           f"{RUN_LIMIT_FORMAT} (xce status shows each one's)")
    if spec.project and entry_format < LIMITS_FORMAT:
        raise ServiceError(log.FAILED_PRECONDITION, "-P needs every replica at entry format "
                           f"{LIMITS_FORMAT} (xce status shows each one's)")
    if (spec.depend or spec.kill_on_invalid_dep) and entry_format < DEPEND_FORMAT:
        raise ServiceError(log.FAILED_PRECONDITION, "-w needs every replica at entry format "
                           f"{DEPEND_FORMAT} (xce status shows each one's)")


def check_queue_open(tables: Tables, name: str) -> None:
    if not name or len(name.encode()) > MAX_QUEUE_NAME:
        raise invalid(f"unknown queue {name[:80]!r}")
    queue = read_queue(tables, name)
    if queue is None:
        known = ", ".join(k.decode() for k, _ in tables.scan("queues"))
        raise invalid(f"unknown queue {name!r} (queues: {known or 'none'})")
    if queue.closed:
        raise ServiceError(log.FAILED_PRECONDITION, f"queue {name!r} is closed")


def check_modify(tables: Tables, job: api.Job, request: api.ModifyJobRequest, entry_format: int = 1) -> None:
    if not (request.HasField("priority") or request.HasField("queue") or request.HasField("resource_req")):
        raise invalid("nothing to modify")
    if job.state in FINISHED:
        raise ServiceError(log.FAILED_PRECONDITION, f"job {job.id} has finished")
    if request.HasField("queue"):
        if job.state not in PENDING:
            raise ServiceError(log.FAILED_PRECONDITION, "the queue can change only while the job is pending")
        check_text("queue", request.queue)
        check_queue_open(tables, request.queue)
    if request.HasField("resource_req"):
        if job.state not in PENDING:
            raise ServiceError(log.FAILED_PRECONDITION,
                               "the resource requirement can change only while the job is pending")
        check_requirement(request.resource_req, entry_format)


def check_queue(queue: api.Queue, entry_format: int = ALLOCATION_FORMAT) -> None:
    name = queue.name
    if not name or len(name) > MAX_QUEUE_NAME or not all(c.isalnum() or c in "_-." for c in name):
        raise invalid(f"bad queue name {name!r} (letters, digits, _ - . ; 1-64)")
    check_text("description", queue.description)
    plugin = queue.job_pick_plugin
    if plugin and (len(plugin) > 64 or not all(c.isalnum() or c in "_-." for c in plugin)):
        raise invalid(f"bad job_pick_plugin {plugin[:80]!r}")
    if queue.slot_limit < 0:
        raise invalid(f"slot_limit must not be negative, got {queue.slot_limit}")
    if entry_format >= CHUNK_FORMAT and not (0 <= queue.chunk_job_size <= MAX_CHUNK
                                             and 0 <= queue.chunk_job_duration_s <= 10 * 365 * 86400):
        raise invalid(f"queue {name!r}: chunk_job_size is from 0 (none) to {MAX_CHUNK}, chunk_job_duration_s "
                      "whole seconds >= 0")
    if entry_format >= ALLOCATION_FORMAT:  # before, an unknown field, kept unread
        check_requirement(queue.res_req, entry_format)
    if entry_format >= PREEMPT_FORMAT and (queue.preempt_min_run_s < 0 or queue.max_preemptions < 0):
        raise invalid(f"queue {name!r}: preempt_min_run_s and max_preemptions are never negative")
    if queue.HasField("fairshare") and entry_format >= LIMITS_FORMAT:
        try:
            fairshare.check(queue.fairshare, f"queue {name!r}: fairshare")
        except ValueError as exc:
            raise invalid(str(exc)) from None
