from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    PEND: _ClassVar[JobState]
    PSUSP: _ClassVar[JobState]
    RUN: _ClassVar[JobState]
    USUSP: _ClassVar[JobState]
    SSUSP: _ClassVar[JobState]
    DONE: _ClassVar[JobState]
    EXIT: _ClassVar[JobState]
    UNKWN: _ClassVar[JobState]

class WarningTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WARNING_TO_JOB: _ClassVar[WarningTarget]
    WARNING_TO_SHELL: _ClassVar[WarningTarget]
    WARNING_TO_TASKS: _ClassVar[WarningTarget]

class DependState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPEND_NONE: _ClassVar[DependState]
    DEPEND_PENDING: _ClassVar[DependState]
    DEPEND_SATISFIED: _ClassVar[DependState]
    DEPEND_NEVER: _ClassVar[DependState]

class PendingReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PENDING_REASON_UNSPECIFIED: _ClassVar[PendingReason]
    PEND_QUEUE_INACTIVE: _ClassVar[PendingReason]
    PEND_JOB_HELD: _ClassVar[PendingReason]
    PEND_NO_FREE_SLOTS: _ClassVar[PendingReason]
    PEND_NO_HOST_MATCHES: _ClassVar[PendingReason]
    PEND_HOSTS_UNAVAILABLE: _ClassVar[PendingReason]
    PEND_NO_HOSTS: _ClassVar[PendingReason]
    PEND_WAITING_FOR_SCHEDULER: _ClassVar[PendingReason]
    PEND_DISPATCH_REFUSED: _ClassVar[PendingReason]
    PEND_REQUEUED: _ClassVar[PendingReason]
    PEND_LIMIT_REACHED: _ClassVar[PendingReason]
    PEND_RECOVERING: _ClassVar[PendingReason]
    PEND_STRAY_INSTANCE: _ClassVar[PendingReason]
    PEND_NO_FREE_RESOURCES: _ClassVar[PendingReason]
    PEND_HOST_CLOSED: _ClassVar[PendingReason]
    PEND_DISPATCH_LIMIT: _ClassVar[PendingReason]
    PEND_DEPENDENCY: _ClassVar[PendingReason]
    PEND_DEPENDENCY_NEVER: _ClassVar[PendingReason]
    PEND_PREEMPTION_PENDING: _ClassVar[PendingReason]
    PEND_RESERVATION: _ClassVar[PendingReason]
    PEND_START_RETRY: _ClassVar[PendingReason]
    PEND_OWNER_REFUSED: _ClassVar[PendingReason]
    PEND_BEGIN_TIME: _ClassVar[PendingReason]
    PEND_TERM_TIME_PASSED: _ClassVar[PendingReason]
    PEND_CHUNK_WAIT: _ClassVar[PendingReason]

class AuditOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIT_OUTCOME_UNSPECIFIED: _ClassVar[AuditOutcome]
    CONFIRMED: _ClassVar[AuditOutcome]
    DRY_RUN: _ClassVar[AuditOutcome]
    REFUSED: _ClassVar[AuditOutcome]

class ControlAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTROL_ACTION_UNSPECIFIED: _ClassVar[ControlAction]
    KILL: _ClassVar[ControlAction]
    STOP: _ClassVar[ControlAction]
    RESUME: _ClassVar[ControlAction]
    HOLD: _ClassVar[ControlAction]
    RELEASE: _ClassVar[ControlAction]
    REQUEUE: _ClassVar[ControlAction]
    CHECKPOINT: _ClassVar[ControlAction]

class MemberRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_VOTER: _ClassVar[MemberRole]
    MEMBER_LEARNER: _ClassVar[MemberRole]
    MEMBER_PROMOTING: _ClassVar[MemberRole]
    MEMBER_REMOVING: _ClassVar[MemberRole]

class HostStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOST_STATUS_UNSPECIFIED: _ClassVar[HostStatus]
    HOST_OK: _ClassVar[HostStatus]
    HOST_UNAVAIL: _ClassVar[HostStatus]

class DecisionRejection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_ACCEPTED: _ClassVar[DecisionRejection]
    REJECT_STALE_LEASE: _ClassVar[DecisionRejection]
    REJECT_NO_JOB: _ClassVar[DecisionRejection]
    REJECT_NOT_PENDING: _ClassVar[DecisionRejection]
    REJECT_WRONG_ATTEMPT: _ClassVar[DecisionRejection]
    REJECT_INFEASIBLE: _ClassVar[DecisionRejection]
    REJECT_MALFORMED: _ClassVar[DecisionRejection]

class TaskPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_PHASE_UNSPECIFIED: _ClassVar[TaskPhase]
    TASK_STARTED: _ClassVar[TaskPhase]
    TASK_ENDED: _ClassVar[TaskPhase]
    TASK_REFUSED: _ClassVar[TaskPhase]

class SignalKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SIGNAL_KIND_UNSPECIFIED: _ClassVar[SignalKind]
    SIGNAL_STOP: _ClassVar[SignalKind]
    SIGNAL_CONT: _ClassVar[SignalKind]
    SIGNAL_KILL: _ClassVar[SignalKind]
    SIGNAL_CHECKPOINT: _ClassVar[SignalKind]

class PreemptAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PREEMPT_SUSPEND: _ClassVar[PreemptAction]
    PREEMPT_REQUEUE: _ClassVar[PreemptAction]
JOB_STATE_UNSPECIFIED: JobState
PEND: JobState
PSUSP: JobState
RUN: JobState
USUSP: JobState
SSUSP: JobState
DONE: JobState
EXIT: JobState
UNKWN: JobState
WARNING_TO_JOB: WarningTarget
WARNING_TO_SHELL: WarningTarget
WARNING_TO_TASKS: WarningTarget
DEPEND_NONE: DependState
DEPEND_PENDING: DependState
DEPEND_SATISFIED: DependState
DEPEND_NEVER: DependState
PENDING_REASON_UNSPECIFIED: PendingReason
PEND_QUEUE_INACTIVE: PendingReason
PEND_JOB_HELD: PendingReason
PEND_NO_FREE_SLOTS: PendingReason
PEND_NO_HOST_MATCHES: PendingReason
PEND_HOSTS_UNAVAILABLE: PendingReason
PEND_NO_HOSTS: PendingReason
PEND_WAITING_FOR_SCHEDULER: PendingReason
PEND_DISPATCH_REFUSED: PendingReason
PEND_REQUEUED: PendingReason
PEND_LIMIT_REACHED: PendingReason
PEND_RECOVERING: PendingReason
PEND_STRAY_INSTANCE: PendingReason
PEND_NO_FREE_RESOURCES: PendingReason
PEND_HOST_CLOSED: PendingReason
PEND_DISPATCH_LIMIT: PendingReason
PEND_DEPENDENCY: PendingReason
PEND_DEPENDENCY_NEVER: PendingReason
PEND_PREEMPTION_PENDING: PendingReason
PEND_RESERVATION: PendingReason
PEND_START_RETRY: PendingReason
PEND_OWNER_REFUSED: PendingReason
PEND_BEGIN_TIME: PendingReason
PEND_TERM_TIME_PASSED: PendingReason
PEND_CHUNK_WAIT: PendingReason
AUDIT_OUTCOME_UNSPECIFIED: AuditOutcome
CONFIRMED: AuditOutcome
DRY_RUN: AuditOutcome
REFUSED: AuditOutcome
CONTROL_ACTION_UNSPECIFIED: ControlAction
KILL: ControlAction
STOP: ControlAction
RESUME: ControlAction
HOLD: ControlAction
RELEASE: ControlAction
REQUEUE: ControlAction
CHECKPOINT: ControlAction
MEMBER_VOTER: MemberRole
MEMBER_LEARNER: MemberRole
MEMBER_PROMOTING: MemberRole
MEMBER_REMOVING: MemberRole
HOST_STATUS_UNSPECIFIED: HostStatus
HOST_OK: HostStatus
HOST_UNAVAIL: HostStatus
DECISION_ACCEPTED: DecisionRejection
REJECT_STALE_LEASE: DecisionRejection
REJECT_NO_JOB: DecisionRejection
REJECT_NOT_PENDING: DecisionRejection
REJECT_WRONG_ATTEMPT: DecisionRejection
REJECT_INFEASIBLE: DecisionRejection
REJECT_MALFORMED: DecisionRejection
TASK_PHASE_UNSPECIFIED: TaskPhase
TASK_STARTED: TaskPhase
TASK_ENDED: TaskPhase
TASK_REFUSED: TaskPhase
SIGNAL_KIND_UNSPECIFIED: SignalKind
SIGNAL_STOP: SignalKind
SIGNAL_CONT: SignalKind
SIGNAL_KILL: SignalKind
SIGNAL_CHECKPOINT: SignalKind
PREEMPT_SUSPEND: PreemptAction
PREEMPT_REQUEUE: PreemptAction

class JobSpec(_message.Message):
    __slots__ = ("command", "name", "queue", "slots", "priority", "stdout_path", "stderr_path", "cwd", "user", "env", "resource_req", "rerunnable", "array", "min_slots", "hosts", "mem_limit_mb", "depend", "kill_on_invalid_dep", "project", "exclusive", "run_limit_s", "estimate_s", "checkpoint_signal", "hold", "begin_time_ms", "term_time_ms", "pre_exec", "post_exec", "job_group", "stdout_overwrite", "stderr_overwrite", "user_group", "reservation", "mail_user", "mail_begin", "mail_end", "comment", "warning_signal", "warning_time_s", "warning_to")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    STDOUT_PATH_FIELD_NUMBER: _ClassVar[int]
    STDERR_PATH_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_REQ_FIELD_NUMBER: _ClassVar[int]
    RERUNNABLE_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    MIN_SLOTS_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    MEM_LIMIT_MB_FIELD_NUMBER: _ClassVar[int]
    DEPEND_FIELD_NUMBER: _ClassVar[int]
    KILL_ON_INVALID_DEP_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    RUN_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_S_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TERM_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PRE_EXEC_FIELD_NUMBER: _ClassVar[int]
    POST_EXEC_FIELD_NUMBER: _ClassVar[int]
    JOB_GROUP_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    STDERR_OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    USER_GROUP_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    MAIL_USER_FIELD_NUMBER: _ClassVar[int]
    MAIL_BEGIN_FIELD_NUMBER: _ClassVar[int]
    MAIL_END_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    WARNING_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    WARNING_TIME_S_FIELD_NUMBER: _ClassVar[int]
    WARNING_TO_FIELD_NUMBER: _ClassVar[int]
    command: _containers.RepeatedScalarFieldContainer[str]
    name: str
    queue: str
    slots: int
    priority: int
    stdout_path: str
    stderr_path: str
    cwd: str
    user: str
    env: _containers.ScalarMap[str, str]
    resource_req: str
    rerunnable: bool
    array: ArraySpec
    min_slots: int
    hosts: _containers.RepeatedScalarFieldContainer[str]
    mem_limit_mb: int
    depend: str
    kill_on_invalid_dep: bool
    project: str
    exclusive: bool
    run_limit_s: int
    estimate_s: int
    checkpoint_signal: int
    hold: bool
    begin_time_ms: int
    term_time_ms: int
    pre_exec: str
    post_exec: str
    job_group: str
    stdout_overwrite: bool
    stderr_overwrite: bool
    user_group: str
    reservation: str
    mail_user: str
    mail_begin: bool
    mail_end: bool
    comment: str
    warning_signal: int
    warning_time_s: int
    warning_to: WarningTarget
    def __init__(self, command: _Optional[_Iterable[str]] = ..., name: _Optional[str] = ..., queue: _Optional[str] = ..., slots: _Optional[int] = ..., priority: _Optional[int] = ..., stdout_path: _Optional[str] = ..., stderr_path: _Optional[str] = ..., cwd: _Optional[str] = ..., user: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., resource_req: _Optional[str] = ..., rerunnable: _Optional[bool] = ..., array: _Optional[_Union[ArraySpec, _Mapping]] = ..., min_slots: _Optional[int] = ..., hosts: _Optional[_Iterable[str]] = ..., mem_limit_mb: _Optional[int] = ..., depend: _Optional[str] = ..., kill_on_invalid_dep: _Optional[bool] = ..., project: _Optional[str] = ..., exclusive: _Optional[bool] = ..., run_limit_s: _Optional[int] = ..., estimate_s: _Optional[int] = ..., checkpoint_signal: _Optional[int] = ..., hold: _Optional[bool] = ..., begin_time_ms: _Optional[int] = ..., term_time_ms: _Optional[int] = ..., pre_exec: _Optional[str] = ..., post_exec: _Optional[str] = ..., job_group: _Optional[str] = ..., stdout_overwrite: _Optional[bool] = ..., stderr_overwrite: _Optional[bool] = ..., user_group: _Optional[str] = ..., reservation: _Optional[str] = ..., mail_user: _Optional[str] = ..., mail_begin: _Optional[bool] = ..., mail_end: _Optional[bool] = ..., comment: _Optional[str] = ..., warning_signal: _Optional[int] = ..., warning_time_s: _Optional[int] = ..., warning_to: _Optional[_Union[WarningTarget, str]] = ...) -> None: ...

class ArraySpec(_message.Message):
    __slots__ = ("ranges", "limit")
    RANGES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[IndexRange]
    limit: int
    def __init__(self, ranges: _Optional[_Iterable[_Union[IndexRange, _Mapping]]] = ..., limit: _Optional[int] = ...) -> None: ...

class IndexRange(_message.Message):
    __slots__ = ("start", "end", "step")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    step: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class ArrayState(_message.Message):
    __slots__ = ("size", "runs", "counts", "materialized", "window")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    MATERIALIZED_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    size: int
    runs: _containers.RepeatedCompositeFieldContainer[ElementRun]
    counts: _containers.RepeatedScalarFieldContainer[int]
    materialized: int
    window: int
    def __init__(self, size: _Optional[int] = ..., runs: _Optional[_Iterable[_Union[ElementRun, _Mapping]]] = ..., counts: _Optional[_Iterable[int]] = ..., materialized: _Optional[int] = ..., window: _Optional[int] = ...) -> None: ...

class ElementRun(_message.Message):
    __slots__ = ("first", "last", "state")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    state: JobState
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ..., state: _Optional[_Union[JobState, str]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "readable_id", "spec", "state", "submit_time_ms", "modify_time_ms", "attempt", "pending_reason", "exit_code", "start_time_ms", "end_time_ms", "kill_requested", "request_id", "host", "pid", "term_signal", "usage", "exit_status_unknown", "state_before_unknown", "pending_code", "requeue_requested", "refused_host", "holds", "stray_hosts", "next_attempt", "array_id", "array_index", "array_limit", "array", "allocation", "parts_ended", "exit_reason", "usage_now", "usage_time_ms", "depend_state", "preemptions", "preempted_by", "released", "preempting", "suspended_ms", "stopped_at_ms", "checkpoints", "checkpoint_time_ms", "start_failures", "start_error", "not_before_ms", "refused_owner", "timeline", "reservation_serial", "chunk_lead", "chunk")
    class HoldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class RefusedOwnerEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    READABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    MODIFY_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PENDING_REASON_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    KILL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TERM_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    EXIT_STATUS_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    STATE_BEFORE_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    PENDING_CODE_FIELD_NUMBER: _ClassVar[int]
    REQUEUE_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_HOST_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    STRAY_HOSTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ARRAY_ID_FIELD_NUMBER: _ClassVar[int]
    ARRAY_INDEX_FIELD_NUMBER: _ClassVar[int]
    ARRAY_LIMIT_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    PARTS_ENDED_FIELD_NUMBER: _ClassVar[int]
    EXIT_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_NOW_FIELD_NUMBER: _ClassVar[int]
    USAGE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    DEPEND_STATE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_BY_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    PREEMPTING_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_MS_FIELD_NUMBER: _ClassVar[int]
    STOPPED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    START_FAILURES_FIELD_NUMBER: _ClassVar[int]
    START_ERROR_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_MS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_OWNER_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_SERIAL_FIELD_NUMBER: _ClassVar[int]
    CHUNK_LEAD_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    id: int
    readable_id: str
    spec: JobSpec
    state: JobState
    submit_time_ms: int
    modify_time_ms: int
    attempt: int
    pending_reason: str
    exit_code: int
    start_time_ms: int
    end_time_ms: int
    kill_requested: bool
    request_id: str
    host: str
    pid: int
    term_signal: int
    usage: Usage
    exit_status_unknown: bool
    state_before_unknown: JobState
    pending_code: PendingReason
    requeue_requested: bool
    refused_host: str
    holds: _containers.ScalarMap[str, int]
    stray_hosts: _containers.RepeatedScalarFieldContainer[str]
    next_attempt: int
    array_id: int
    array_index: int
    array_limit: int
    array: ArrayState
    allocation: _containers.RepeatedCompositeFieldContainer[HostAllocation]
    parts_ended: _containers.RepeatedScalarFieldContainer[str]
    exit_reason: str
    usage_now: Usage
    usage_time_ms: int
    depend_state: DependState
    preemptions: int
    preempted_by: int
    released: _containers.RepeatedCompositeFieldContainer[HostAllocation]
    preempting: _containers.RepeatedScalarFieldContainer[int]
    suspended_ms: int
    stopped_at_ms: int
    checkpoints: int
    checkpoint_time_ms: int
    start_failures: int
    start_error: str
    not_before_ms: int
    refused_owner: _containers.ScalarMap[str, int]
    timeline: _containers.RepeatedCompositeFieldContainer[JobEvent]
    reservation_serial: int
    chunk_lead: int
    chunk: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, id: _Optional[int] = ..., readable_id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., submit_time_ms: _Optional[int] = ..., modify_time_ms: _Optional[int] = ..., attempt: _Optional[int] = ..., pending_reason: _Optional[str] = ..., exit_code: _Optional[int] = ..., start_time_ms: _Optional[int] = ..., end_time_ms: _Optional[int] = ..., kill_requested: _Optional[bool] = ..., request_id: _Optional[str] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., term_signal: _Optional[int] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., exit_status_unknown: _Optional[bool] = ..., state_before_unknown: _Optional[_Union[JobState, str]] = ..., pending_code: _Optional[_Union[PendingReason, str]] = ..., requeue_requested: _Optional[bool] = ..., refused_host: _Optional[str] = ..., holds: _Optional[_Mapping[str, int]] = ..., stray_hosts: _Optional[_Iterable[str]] = ..., next_attempt: _Optional[int] = ..., array_id: _Optional[int] = ..., array_index: _Optional[int] = ..., array_limit: _Optional[int] = ..., array: _Optional[_Union[ArrayState, _Mapping]] = ..., allocation: _Optional[_Iterable[_Union[HostAllocation, _Mapping]]] = ..., parts_ended: _Optional[_Iterable[str]] = ..., exit_reason: _Optional[str] = ..., usage_now: _Optional[_Union[Usage, _Mapping]] = ..., usage_time_ms: _Optional[int] = ..., depend_state: _Optional[_Union[DependState, str]] = ..., preemptions: _Optional[int] = ..., preempted_by: _Optional[int] = ..., released: _Optional[_Iterable[_Union[HostAllocation, _Mapping]]] = ..., preempting: _Optional[_Iterable[int]] = ..., suspended_ms: _Optional[int] = ..., stopped_at_ms: _Optional[int] = ..., checkpoints: _Optional[int] = ..., checkpoint_time_ms: _Optional[int] = ..., start_failures: _Optional[int] = ..., start_error: _Optional[str] = ..., not_before_ms: _Optional[int] = ..., refused_owner: _Optional[_Mapping[str, int]] = ..., timeline: _Optional[_Iterable[_Union[JobEvent, _Mapping]]] = ..., reservation_serial: _Optional[int] = ..., chunk_lead: _Optional[int] = ..., chunk: _Optional[_Iterable[int]] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("time_ms", "state", "host", "attempt")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    state: JobState
    host: str
    attempt: int
    def __init__(self, time_ms: _Optional[int] = ..., state: _Optional[_Union[JobState, str]] = ..., host: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class HostAllocation(_message.Message):
    __slots__ = ("host", "slots", "resources")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HOST_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    host: str
    slots: int
    resources: _containers.ScalarMap[str, int]
    def __init__(self, host: _Optional[str] = ..., slots: _Optional[int] = ..., resources: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("user_cpu_s", "system_cpu_s", "max_rss_kb", "wall_s")
    USER_CPU_S_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_CPU_S_FIELD_NUMBER: _ClassVar[int]
    MAX_RSS_KB_FIELD_NUMBER: _ClassVar[int]
    WALL_S_FIELD_NUMBER: _ClassVar[int]
    user_cpu_s: float
    system_cpu_s: float
    max_rss_kb: int
    wall_s: float
    def __init__(self, user_cpu_s: _Optional[float] = ..., system_cpu_s: _Optional[float] = ..., max_rss_kb: _Optional[int] = ..., wall_s: _Optional[float] = ...) -> None: ...

class RunJobRequest(_message.Message):
    __slots__ = ("job_id", "host", "request_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    host: str
    request_id: str
    def __init__(self, job_id: _Optional[str] = ..., host: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SubmitJobsRequest(_message.Message):
    __slots__ = ("request_id", "jobs", "audit")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    jobs: _containers.RepeatedCompositeFieldContainer[JobSpec]
    audit: AuditRequest
    def __init__(self, request_id: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[JobSpec, _Mapping]]] = ..., audit: _Optional[_Union[AuditRequest, _Mapping]] = ...) -> None: ...

class AuditRequest(_message.Message):
    __slots__ = ("via", "dry_run", "action", "params", "key_id", "key_description")
    VIA_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    via: str
    dry_run: bool
    action: str
    params: str
    key_id: str
    key_description: str
    def __init__(self, via: _Optional[str] = ..., dry_run: _Optional[bool] = ..., action: _Optional[str] = ..., params: _Optional[str] = ..., key_id: _Optional[str] = ..., key_description: _Optional[str] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("revision", "time_ms", "principal", "role", "via", "action", "params", "outcome", "result", "cluster", "key_id", "key_description")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    time_ms: int
    principal: str
    role: str
    via: str
    action: str
    params: str
    outcome: AuditOutcome
    result: str
    cluster: str
    key_id: str
    key_description: str
    def __init__(self, revision: _Optional[int] = ..., time_ms: _Optional[int] = ..., principal: _Optional[str] = ..., role: _Optional[str] = ..., via: _Optional[str] = ..., action: _Optional[str] = ..., params: _Optional[str] = ..., outcome: _Optional[_Union[AuditOutcome, str]] = ..., result: _Optional[str] = ..., cluster: _Optional[str] = ..., key_id: _Optional[str] = ..., key_description: _Optional[str] = ...) -> None: ...

class RecordAuditRequest(_message.Message):
    __slots__ = ("cluster", "action", "params", "outcome", "result")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    action: str
    params: str
    outcome: AuditOutcome
    result: str
    def __init__(self, cluster: _Optional[str] = ..., action: _Optional[str] = ..., params: _Optional[str] = ..., outcome: _Optional[_Union[AuditOutcome, str]] = ..., result: _Optional[str] = ...) -> None: ...

class RecordAuditResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("principal", "since_ms", "page_size", "page_token")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    principal: str
    since_ms: int
    page_size: int
    page_token: str
    def __init__(self, principal: _Optional[str] = ..., since_ms: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ("records", "next_page_token", "revision")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    next_page_token: str
    revision: int
    def __init__(self, records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class TokenScope(_message.Message):
    __slots__ = ("queues", "users", "actions", "max_jobs", "max_slots", "clusters")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedScalarFieldContainer[str]
    users: _containers.RepeatedScalarFieldContainer[str]
    actions: _containers.RepeatedScalarFieldContainer[str]
    max_jobs: int
    max_slots: int
    clusters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queues: _Optional[_Iterable[str]] = ..., users: _Optional[_Iterable[str]] = ..., actions: _Optional[_Iterable[str]] = ..., max_jobs: _Optional[int] = ..., max_slots: _Optional[int] = ..., clusters: _Optional[_Iterable[str]] = ...) -> None: ...

class SubmitJobsResponse(_message.Message):
    __slots__ = ("jobs", "revision", "dry_run")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    revision: int
    dry_run: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., revision: _Optional[int] = ..., dry_run: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id", "stale")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    stale: bool
    def __init__(self, job_id: _Optional[str] = ..., stale: _Optional[bool] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("filters", "page_size", "page_token", "stale")
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedScalarFieldContainer[str]
    page_size: int
    page_token: str
    stale: bool
    def __init__(self, filters: _Optional[_Iterable[str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., stale: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "revision")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    revision: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class ControlJobRequest(_message.Message):
    __slots__ = ("job_id", "action", "request_id", "audit")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    action: ControlAction
    request_id: str
    audit: AuditRequest
    def __init__(self, job_id: _Optional[str] = ..., action: _Optional[_Union[ControlAction, str]] = ..., request_id: _Optional[str] = ..., audit: _Optional[_Union[AuditRequest, _Mapping]] = ...) -> None: ...

class ModifyJobRequest(_message.Message):
    __slots__ = ("job_id", "priority", "queue", "resource_req", "request_id", "audit")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_REQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    priority: int
    queue: str
    resource_req: str
    request_id: str
    audit: AuditRequest
    def __init__(self, job_id: _Optional[str] = ..., priority: _Optional[int] = ..., queue: _Optional[str] = ..., resource_req: _Optional[str] = ..., request_id: _Optional[str] = ..., audit: _Optional[_Union[AuditRequest, _Mapping]] = ...) -> None: ...

class JobResponse(_message.Message):
    __slots__ = ("job", "revision", "dry_run")
    JOB_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    job: Job
    revision: int
    dry_run: str
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., revision: _Optional[int] = ..., dry_run: _Optional[str] = ...) -> None: ...

class HistoryRequest(_message.Message):
    __slots__ = ("user", "queue", "states", "since_ms", "until_ms", "exit_code", "page_size", "page_token", "stale")
    USER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    user: str
    queue: str
    states: _containers.RepeatedScalarFieldContainer[JobState]
    since_ms: int
    until_ms: int
    exit_code: int
    page_size: int
    page_token: str
    stale: bool
    def __init__(self, user: _Optional[str] = ..., queue: _Optional[str] = ..., states: _Optional[_Iterable[_Union[JobState, str]]] = ..., since_ms: _Optional[int] = ..., until_ms: _Optional[int] = ..., exit_code: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., stale: _Optional[bool] = ...) -> None: ...

class HistoryResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "revision")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    revision: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class AccountingRequest(_message.Message):
    __slots__ = ("user", "queue", "since_ms", "until_ms", "stale")
    USER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    user: str
    queue: str
    since_ms: int
    until_ms: int
    stale: bool
    def __init__(self, user: _Optional[str] = ..., queue: _Optional[str] = ..., since_ms: _Optional[int] = ..., until_ms: _Optional[int] = ..., stale: _Optional[bool] = ...) -> None: ...

class UsageTotals(_message.Message):
    __slots__ = ("user", "queue", "jobs", "done", "exited", "started", "slot_ms", "cpu_ms", "wait_ms", "run_ms")
    USER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    SLOT_MS_FIELD_NUMBER: _ClassVar[int]
    CPU_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_MS_FIELD_NUMBER: _ClassVar[int]
    user: str
    queue: str
    jobs: int
    done: int
    exited: int
    started: int
    slot_ms: int
    cpu_ms: int
    wait_ms: int
    run_ms: int
    def __init__(self, user: _Optional[str] = ..., queue: _Optional[str] = ..., jobs: _Optional[int] = ..., done: _Optional[int] = ..., exited: _Optional[int] = ..., started: _Optional[int] = ..., slot_ms: _Optional[int] = ..., cpu_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ..., run_ms: _Optional[int] = ...) -> None: ...

class AccountingResponse(_message.Message):
    __slots__ = ("totals", "revision")
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    totals: _containers.RepeatedCompositeFieldContainer[UsageTotals]
    revision: int
    def __init__(self, totals: _Optional[_Iterable[_Union[UsageTotals, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class Reservation(_message.Message):
    __slots__ = ("name", "owner", "users", "hosts", "begin_ms", "end_ms", "active", "serial")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    BEGIN_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    users: _containers.RepeatedScalarFieldContainer[str]
    hosts: _containers.RepeatedCompositeFieldContainer[HostSlots]
    begin_ms: int
    end_ms: int
    active: bool
    serial: int
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., users: _Optional[_Iterable[str]] = ..., hosts: _Optional[_Iterable[_Union[HostSlots, _Mapping]]] = ..., begin_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., active: _Optional[bool] = ..., serial: _Optional[int] = ...) -> None: ...

class PutReservationRequest(_message.Message):
    __slots__ = ("reservation", "delete", "request_id", "tick", "slots")
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TICK_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    reservation: Reservation
    delete: bool
    request_id: str
    tick: bool
    slots: int
    def __init__(self, reservation: _Optional[_Union[Reservation, _Mapping]] = ..., delete: _Optional[bool] = ..., request_id: _Optional[str] = ..., tick: _Optional[bool] = ..., slots: _Optional[int] = ...) -> None: ...

class ReservationResponse(_message.Message):
    __slots__ = ("reservation", "revision")
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    reservation: Reservation
    revision: int
    def __init__(self, reservation: _Optional[_Union[Reservation, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("id", "grpc_address", "raft_address", "role", "term", "commit_index", "applied_index", "revision", "pid", "health", "leader_grpc_address", "log_length", "entry_kinds", "entry_format", "metrics_address")
    ID_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    LEADER_GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LOG_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ENTRY_KINDS_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FORMAT_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: int
    grpc_address: str
    raft_address: str
    role: str
    term: int
    commit_index: int
    applied_index: int
    revision: int
    pid: int
    health: str
    leader_grpc_address: str
    log_length: int
    entry_kinds: _containers.RepeatedScalarFieldContainer[str]
    entry_format: int
    metrics_address: str
    def __init__(self, id: _Optional[int] = ..., grpc_address: _Optional[str] = ..., raft_address: _Optional[str] = ..., role: _Optional[str] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., revision: _Optional[int] = ..., pid: _Optional[int] = ..., health: _Optional[str] = ..., leader_grpc_address: _Optional[str] = ..., log_length: _Optional[int] = ..., entry_kinds: _Optional[_Iterable[str]] = ..., entry_format: _Optional[int] = ..., metrics_address: _Optional[str] = ...) -> None: ...

class Daemon(_message.Message):
    __slots__ = ("kind", "name", "metrics_address", "replica")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    metrics_address: str
    replica: int
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., metrics_address: _Optional[str] = ..., replica: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("local_only", "daemons")
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    DAEMONS_FIELD_NUMBER: _ClassVar[int]
    local_only: bool
    daemons: bool
    def __init__(self, local_only: _Optional[bool] = ..., daemons: _Optional[bool] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "grpc_address", "raft_address", "role")
    ID_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    id: int
    grpc_address: str
    raft_address: str
    role: MemberRole
    def __init__(self, id: _Optional[int] = ..., grpc_address: _Optional[str] = ..., raft_address: _Optional[str] = ..., role: _Optional[_Union[MemberRole, str]] = ...) -> None: ...

class AddMemberRequest(_message.Message):
    __slots__ = ("id", "grpc_address", "raft_address", "request_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    grpc_address: str
    raft_address: str
    request_id: str
    def __init__(self, id: _Optional[int] = ..., grpc_address: _Optional[str] = ..., raft_address: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RemoveMemberRequest(_message.Message):
    __slots__ = ("id", "request_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    request_id: str
    def __init__(self, id: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class ListMembersRequest(_message.Message):
    __slots__ = ("stale",)
    STALE_FIELD_NUMBER: _ClassVar[int]
    stale: bool
    def __init__(self, stale: _Optional[bool] = ...) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ("members", "bootstrap", "revision", "replicas")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    bootstrap: _containers.RepeatedCompositeFieldContainer[Member]
    revision: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., bootstrap: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., revision: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("cluster_id", "replicas", "scheduler_lease_holder", "scheduler_lease_epoch", "scheduler_lease_expires_ms", "enabled_entry_kinds", "announced_members", "config_current", "members", "bootstrap", "recovery", "daemons")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_LEASE_EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    ENABLED_ENTRY_KINDS_FIELD_NUMBER: _ClassVar[int]
    ANNOUNCED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_CURRENT_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    DAEMONS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    scheduler_lease_holder: str
    scheduler_lease_epoch: int
    scheduler_lease_expires_ms: int
    enabled_entry_kinds: _containers.RepeatedScalarFieldContainer[str]
    announced_members: _containers.RepeatedScalarFieldContainer[int]
    config_current: bool
    members: _containers.RepeatedCompositeFieldContainer[Member]
    bootstrap: _containers.RepeatedCompositeFieldContainer[Member]
    recovery: RecoveryStatus
    daemons: _containers.RepeatedCompositeFieldContainer[Daemon]
    def __init__(self, cluster_id: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., scheduler_lease_holder: _Optional[str] = ..., scheduler_lease_epoch: _Optional[int] = ..., scheduler_lease_expires_ms: _Optional[int] = ..., enabled_entry_kinds: _Optional[_Iterable[str]] = ..., announced_members: _Optional[_Iterable[int]] = ..., config_current: _Optional[bool] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., bootstrap: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., recovery: _Optional[_Union[RecoveryStatus, _Mapping]] = ..., daemons: _Optional[_Iterable[_Union[Daemon, _Mapping]]] = ...) -> None: ...

class RecoveryStatus(_message.Message):
    __slots__ = ("waiting", "hosts", "until_ms", "wait_over", "why")
    WAITING_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_OVER_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    waiting: bool
    hosts: _containers.RepeatedScalarFieldContainer[str]
    until_ms: int
    wait_over: bool
    why: str
    def __init__(self, waiting: _Optional[bool] = ..., hosts: _Optional[_Iterable[str]] = ..., until_ms: _Optional[int] = ..., wait_over: _Optional[bool] = ..., why: _Optional[str] = ...) -> None: ...

class HostSpec(_message.Message):
    __slots__ = ("name", "slots", "memory_mb", "resources", "tags", "running", "ncpus", "capabilities", "metrics_address")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    NCPUS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    slots: int
    memory_mb: int
    resources: _containers.ScalarMap[str, float]
    tags: _containers.RepeatedScalarFieldContainer[str]
    running: _containers.RepeatedCompositeFieldContainer[InstanceKey]
    ncpus: int
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    metrics_address: str
    def __init__(self, name: _Optional[str] = ..., slots: _Optional[int] = ..., memory_mb: _Optional[int] = ..., resources: _Optional[_Mapping[str, float]] = ..., tags: _Optional[_Iterable[str]] = ..., running: _Optional[_Iterable[_Union[InstanceKey, _Mapping]]] = ..., ncpus: _Optional[int] = ..., capabilities: _Optional[_Iterable[str]] = ..., metrics_address: _Optional[str] = ...) -> None: ...

class InstanceKey(_message.Message):
    __slots__ = ("job_id", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class Host(_message.Message):
    __slots__ = ("spec", "status", "generation", "status_time_ms", "slots_used", "running_jobs", "reserved", "closed", "closed_reason", "closed_time_ms", "closed_by", "groups", "load", "load_time_ms", "exclusive_job", "rsv_free")
    class ReservedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class LoadEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class RsvFreeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATUS_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_USED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    CLOSED_REASON_FIELD_NUMBER: _ClassVar[int]
    CLOSED_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CLOSED_BY_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    LOAD_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_JOB_FIELD_NUMBER: _ClassVar[int]
    RSV_FREE_FIELD_NUMBER: _ClassVar[int]
    spec: HostSpec
    status: HostStatus
    generation: int
    status_time_ms: int
    slots_used: int
    running_jobs: int
    reserved: _containers.ScalarMap[str, int]
    closed: bool
    closed_reason: str
    closed_time_ms: int
    closed_by: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    load: _containers.ScalarMap[str, float]
    load_time_ms: int
    exclusive_job: int
    rsv_free: _containers.ScalarMap[str, int]
    def __init__(self, spec: _Optional[_Union[HostSpec, _Mapping]] = ..., status: _Optional[_Union[HostStatus, str]] = ..., generation: _Optional[int] = ..., status_time_ms: _Optional[int] = ..., slots_used: _Optional[int] = ..., running_jobs: _Optional[int] = ..., reserved: _Optional[_Mapping[str, int]] = ..., closed: _Optional[bool] = ..., closed_reason: _Optional[str] = ..., closed_time_ms: _Optional[int] = ..., closed_by: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ..., load: _Optional[_Mapping[str, float]] = ..., load_time_ms: _Optional[int] = ..., exclusive_job: _Optional[int] = ..., rsv_free: _Optional[_Mapping[str, int]] = ...) -> None: ...

class HostGroup(_message.Message):
    __slots__ = ("name", "members")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ...) -> None: ...

class SharedResource(_message.Message):
    __slots__ = ("name", "total")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    total: int
    def __init__(self, name: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class Limit(_message.Message):
    __slots__ = ("name", "users", "per_user", "queues", "per_queue", "projects", "per_project", "slots", "jobs", "resources", "groups", "owner")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    PER_USER_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    PER_QUEUE_FIELD_NUMBER: _ClassVar[int]
    PROJECTS_FIELD_NUMBER: _ClassVar[int]
    PER_PROJECT_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    name: str
    users: _containers.RepeatedScalarFieldContainer[str]
    per_user: bool
    queues: _containers.RepeatedScalarFieldContainer[str]
    per_queue: bool
    projects: _containers.RepeatedScalarFieldContainer[str]
    per_project: bool
    slots: int
    jobs: int
    resources: _containers.ScalarMap[str, int]
    groups: _containers.RepeatedScalarFieldContainer[str]
    owner: str
    def __init__(self, name: _Optional[str] = ..., users: _Optional[_Iterable[str]] = ..., per_user: _Optional[bool] = ..., queues: _Optional[_Iterable[str]] = ..., per_queue: _Optional[bool] = ..., projects: _Optional[_Iterable[str]] = ..., per_project: _Optional[bool] = ..., slots: _Optional[int] = ..., jobs: _Optional[int] = ..., resources: _Optional[_Mapping[str, int]] = ..., groups: _Optional[_Iterable[str]] = ..., owner: _Optional[str] = ...) -> None: ...

class PutJobGroupRequest(_message.Message):
    __slots__ = ("path", "limit", "create", "delete", "request_id")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    limit: int
    create: bool
    delete: bool
    request_id: str
    def __init__(self, path: _Optional[str] = ..., limit: _Optional[int] = ..., create: _Optional[bool] = ..., delete: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class JobGroupResponse(_message.Message):
    __slots__ = ("group", "revision")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    group: Limit
    revision: int
    def __init__(self, group: _Optional[_Union[Limit, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class ControlHostRequest(_message.Message):
    __slots__ = ("name", "close", "reason", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    close: bool
    reason: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., close: _Optional[bool] = ..., reason: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class HostResponse(_message.Message):
    __slots__ = ("host", "revision")
    HOST_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    host: Host
    revision: int
    def __init__(self, host: _Optional[_Union[Host, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class ListHostsRequest(_message.Message):
    __slots__ = ("stale",)
    STALE_FIELD_NUMBER: _ClassVar[int]
    stale: bool
    def __init__(self, stale: _Optional[bool] = ...) -> None: ...

class ListHostsResponse(_message.Message):
    __slots__ = ("hosts", "revision", "groups", "shared", "shared_used", "reservations")
    class SharedUsedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    SHARED_USED_FIELD_NUMBER: _ClassVar[int]
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    hosts: _containers.RepeatedCompositeFieldContainer[Host]
    revision: int
    groups: _containers.RepeatedCompositeFieldContainer[HostGroup]
    shared: _containers.RepeatedCompositeFieldContainer[SharedResource]
    shared_used: _containers.ScalarMap[str, int]
    reservations: _containers.RepeatedCompositeFieldContainer[Reservation]
    def __init__(self, hosts: _Optional[_Iterable[_Union[Host, _Mapping]]] = ..., revision: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[HostGroup, _Mapping]]] = ..., shared: _Optional[_Iterable[_Union[SharedResource, _Mapping]]] = ..., shared_used: _Optional[_Mapping[str, int]] = ..., reservations: _Optional[_Iterable[_Union[Reservation, _Mapping]]] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("scheduler_id", "duration_s")
    SCHEDULER_ID_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    scheduler_id: str
    duration_s: float
    def __init__(self, scheduler_id: _Optional[str] = ..., duration_s: _Optional[float] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("granted", "epoch", "holder", "expires_ms", "revision")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    epoch: int
    holder: str
    expires_ms: int
    revision: int
    def __init__(self, granted: _Optional[bool] = ..., epoch: _Optional[int] = ..., holder: _Optional[str] = ..., expires_ms: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class DispatchDecision(_message.Message):
    __slots__ = ("job_id", "attempt", "host", "hosts", "chunk")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    host: str
    hosts: _containers.RepeatedCompositeFieldContainer[HostSlots]
    chunk: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., host: _Optional[str] = ..., hosts: _Optional[_Iterable[_Union[HostSlots, _Mapping]]] = ..., chunk: _Optional[_Iterable[int]] = ...) -> None: ...

class HostSlots(_message.Message):
    __slots__ = ("host", "slots")
    HOST_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    host: str
    slots: int
    def __init__(self, host: _Optional[str] = ..., slots: _Optional[int] = ...) -> None: ...

class PendDecision(_message.Message):
    __slots__ = ("job_id", "reason", "code")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    reason: str
    code: PendingReason
    def __init__(self, job_id: _Optional[int] = ..., reason: _Optional[str] = ..., code: _Optional[_Union[PendingReason, str]] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("dispatch", "pend", "preempt")
    DISPATCH_FIELD_NUMBER: _ClassVar[int]
    PEND_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_FIELD_NUMBER: _ClassVar[int]
    dispatch: DispatchDecision
    pend: PendDecision
    preempt: PreemptDecision
    def __init__(self, dispatch: _Optional[_Union[DispatchDecision, _Mapping]] = ..., pend: _Optional[_Union[PendDecision, _Mapping]] = ..., preempt: _Optional[_Union[PreemptDecision, _Mapping]] = ...) -> None: ...

class PreemptDecision(_message.Message):
    __slots__ = ("job_id", "attempt", "victims")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    VICTIMS_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    victims: _containers.RepeatedCompositeFieldContainer[Victim]
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., victims: _Optional[_Iterable[_Union[Victim, _Mapping]]] = ...) -> None: ...

class Victim(_message.Message):
    __slots__ = ("job_id", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class DecisionBatch(_message.Message):
    __slots__ = ("lease_epoch", "base_revision", "decisions", "scheduler_id", "now_ms", "planner_digest", "clock_ms", "planner_state", "planner")
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_REVISION_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_ID_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    PLANNER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    PLANNER_STATE_FIELD_NUMBER: _ClassVar[int]
    PLANNER_FIELD_NUMBER: _ClassVar[int]
    lease_epoch: int
    base_revision: int
    decisions: _containers.RepeatedCompositeFieldContainer[Decision]
    scheduler_id: str
    now_ms: int
    planner_digest: str
    clock_ms: int
    planner_state: PlannerState
    planner: PlannerSettings
    def __init__(self, lease_epoch: _Optional[int] = ..., base_revision: _Optional[int] = ..., decisions: _Optional[_Iterable[_Union[Decision, _Mapping]]] = ..., scheduler_id: _Optional[str] = ..., now_ms: _Optional[int] = ..., planner_digest: _Optional[str] = ..., clock_ms: _Optional[int] = ..., planner_state: _Optional[_Union[PlannerState, _Mapping]] = ..., planner: _Optional[_Union[PlannerSettings, _Mapping]] = ...) -> None: ...

class PlannerState(_message.Message):
    __slots__ = ("in_flight", "cooldown", "refusals_seen", "await_revision", "await_until_ms", "recounted", "recounted_ms", "reservations")
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    COOLDOWN_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_SEEN_FIELD_NUMBER: _ClassVar[int]
    AWAIT_REVISION_FIELD_NUMBER: _ClassVar[int]
    AWAIT_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    RECOUNTED_FIELD_NUMBER: _ClassVar[int]
    RECOUNTED_MS_FIELD_NUMBER: _ClassVar[int]
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    in_flight: _containers.RepeatedCompositeFieldContainer[InFlight]
    cooldown: _containers.RepeatedCompositeFieldContainer[Cooldown]
    refusals_seen: _containers.RepeatedCompositeFieldContainer[JobAttempt]
    await_revision: int
    await_until_ms: int
    recounted: bool
    recounted_ms: int
    reservations: _containers.RepeatedCompositeFieldContainer[HeadReservation]
    def __init__(self, in_flight: _Optional[_Iterable[_Union[InFlight, _Mapping]]] = ..., cooldown: _Optional[_Iterable[_Union[Cooldown, _Mapping]]] = ..., refusals_seen: _Optional[_Iterable[_Union[JobAttempt, _Mapping]]] = ..., await_revision: _Optional[int] = ..., await_until_ms: _Optional[int] = ..., recounted: _Optional[bool] = ..., recounted_ms: _Optional[int] = ..., reservations: _Optional[_Iterable[_Union[HeadReservation, _Mapping]]] = ...) -> None: ...

class HeadReservation(_message.Message):
    __slots__ = ("job_id", "at_ms", "attempt", "queue", "capacity")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    at_ms: int
    attempt: int
    queue: str
    capacity: int
    def __init__(self, job_id: _Optional[int] = ..., at_ms: _Optional[int] = ..., attempt: _Optional[int] = ..., queue: _Optional[str] = ..., capacity: _Optional[int] = ...) -> None: ...

class InFlight(_message.Message):
    __slots__ = ("job_id", "attempt", "sent_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SENT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    sent_ms: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., sent_ms: _Optional[int] = ...) -> None: ...

class JobAttempt(_message.Message):
    __slots__ = ("job_id", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class Cooldown(_message.Message):
    __slots__ = ("host", "until_ms")
    HOST_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    host: str
    until_ms: int
    def __init__(self, host: _Optional[str] = ..., until_ms: _Optional[int] = ...) -> None: ...

class PlannerSettings(_message.Message):
    __slots__ = ("default_picker", "max_dispatches", "in_flight_ms", "refusal_cooldown_ms", "await_view_ms", "max_batch_bytes", "max_decisions", "max_pends", "recount_ms", "max_explains", "max_preemptions")
    DEFAULT_PICKER_FIELD_NUMBER: _ClassVar[int]
    MAX_DISPATCHES_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_MS_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_COOLDOWN_MS_FIELD_NUMBER: _ClassVar[int]
    AWAIT_VIEW_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_DECISIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDS_FIELD_NUMBER: _ClassVar[int]
    RECOUNT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_EXPLAINS_FIELD_NUMBER: _ClassVar[int]
    MAX_PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    default_picker: str
    max_dispatches: int
    in_flight_ms: int
    refusal_cooldown_ms: int
    await_view_ms: int
    max_batch_bytes: int
    max_decisions: int
    max_pends: int
    recount_ms: int
    max_explains: int
    max_preemptions: int
    def __init__(self, default_picker: _Optional[str] = ..., max_dispatches: _Optional[int] = ..., in_flight_ms: _Optional[int] = ..., refusal_cooldown_ms: _Optional[int] = ..., await_view_ms: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ..., max_decisions: _Optional[int] = ..., max_pends: _Optional[int] = ..., recount_ms: _Optional[int] = ..., max_explains: _Optional[int] = ..., max_preemptions: _Optional[int] = ...) -> None: ...

class DecisionOutcome(_message.Message):
    __slots__ = ("code", "reason", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: DecisionRejection
    reason: PendingReason
    message: str
    def __init__(self, code: _Optional[_Union[DecisionRejection, str]] = ..., reason: _Optional[_Union[PendingReason, str]] = ..., message: _Optional[str] = ...) -> None: ...

class DecisionBatchResponse(_message.Message):
    __slots__ = ("rejections", "revision", "outcomes")
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    rejections: _containers.RepeatedScalarFieldContainer[str]
    revision: int
    outcomes: _containers.RepeatedCompositeFieldContainer[DecisionOutcome]
    def __init__(self, rejections: _Optional[_Iterable[str]] = ..., revision: _Optional[int] = ..., outcomes: _Optional[_Iterable[_Union[DecisionOutcome, _Mapping]]] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("join", "heartbeat", "report", "reports", "launch", "task", "output")
    JOIN_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    join: HostSpec
    heartbeat: Heartbeat
    report: JobReport
    reports: Reports
    launch: LaunchTask
    task: TaskState
    output: OutputAnswer
    def __init__(self, join: _Optional[_Union[HostSpec, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., report: _Optional[_Union[JobReport, _Mapping]] = ..., reports: _Optional[_Union[Reports, _Mapping]] = ..., launch: _Optional[_Union[LaunchTask, _Mapping]] = ..., task: _Optional[_Union[TaskState, _Mapping]] = ..., output: _Optional[_Union[OutputAnswer, _Mapping]] = ...) -> None: ...

class Reports(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[JobReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[JobReport, _Mapping]]] = ...) -> None: ...

class JobReport(_message.Message):
    __slots__ = ("job_id", "attempt", "started", "finished", "dispatch_failed", "part_ended", "usage_now", "suspended")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_FAILED_FIELD_NUMBER: _ClassVar[int]
    PART_ENDED_FIELD_NUMBER: _ClassVar[int]
    USAGE_NOW_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    started: JobStarted
    finished: JobFinished
    dispatch_failed: DispatchFailed
    part_ended: PartEnded
    usage_now: UsageNow
    suspended: JobSuspended
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., started: _Optional[_Union[JobStarted, _Mapping]] = ..., finished: _Optional[_Union[JobFinished, _Mapping]] = ..., dispatch_failed: _Optional[_Union[DispatchFailed, _Mapping]] = ..., part_ended: _Optional[_Union[PartEnded, _Mapping]] = ..., usage_now: _Optional[_Union[UsageNow, _Mapping]] = ..., suspended: _Optional[_Union[JobSuspended, _Mapping]] = ...) -> None: ...

class JobSuspended(_message.Message):
    __slots__ = ("time_ms",)
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    def __init__(self, time_ms: _Optional[int] = ...) -> None: ...

class UsageNow(_message.Message):
    __slots__ = ("usage", "time_ms")
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    usage: Usage
    time_ms: int
    def __init__(self, usage: _Optional[_Union[Usage, _Mapping]] = ..., time_ms: _Optional[int] = ...) -> None: ...

class PartEnded(_message.Message):
    __slots__ = ("usage", "tasks", "time_ms")
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    usage: Usage
    tasks: int
    time_ms: int
    def __init__(self, usage: _Optional[_Union[Usage, _Mapping]] = ..., tasks: _Optional[int] = ..., time_ms: _Optional[int] = ...) -> None: ...

class LaunchTask(_message.Message):
    __slots__ = ("job_id", "attempt", "task_id", "host", "command", "env", "cwd", "credential", "origin")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    task_id: str
    host: str
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cwd: str
    credential: str
    origin: str
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., task_id: _Optional[str] = ..., host: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., credential: _Optional[str] = ..., origin: _Optional[str] = ...) -> None: ...

class TaskState(_message.Message):
    __slots__ = ("job_id", "attempt", "task_id", "host", "phase", "pid", "exit_code", "term_signal", "reason", "retry", "origin")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TERM_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    task_id: str
    host: str
    phase: TaskPhase
    pid: int
    exit_code: int
    term_signal: int
    reason: str
    retry: bool
    origin: str
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., task_id: _Optional[str] = ..., host: _Optional[str] = ..., phase: _Optional[_Union[TaskPhase, str]] = ..., pid: _Optional[int] = ..., exit_code: _Optional[int] = ..., term_signal: _Optional[int] = ..., reason: _Optional[str] = ..., retry: _Optional[bool] = ..., origin: _Optional[str] = ...) -> None: ...

class JobStarted(_message.Message):
    __slots__ = ("pid", "time_ms", "part", "again")
    PID_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    AGAIN_FIELD_NUMBER: _ClassVar[int]
    pid: int
    time_ms: int
    part: bool
    again: bool
    def __init__(self, pid: _Optional[int] = ..., time_ms: _Optional[int] = ..., part: _Optional[bool] = ..., again: _Optional[bool] = ...) -> None: ...

class JobFinished(_message.Message):
    __slots__ = ("exit_code", "term_signal", "status_unknown", "usage", "time_ms", "fenced", "exit_reason")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TERM_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STATUS_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    EXIT_REASON_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    term_signal: int
    status_unknown: bool
    usage: Usage
    time_ms: int
    fenced: bool
    exit_reason: str
    def __init__(self, exit_code: _Optional[int] = ..., term_signal: _Optional[int] = ..., status_unknown: _Optional[bool] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., time_ms: _Optional[int] = ..., fenced: _Optional[bool] = ..., exit_reason: _Optional[str] = ...) -> None: ...

class DispatchFailed(_message.Message):
    __slots__ = ("code", "reason")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("generation", "fence_s", "unknown_timeout_s", "load")
    class LoadEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    FENCE_S_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    generation: int
    fence_s: float
    unknown_timeout_s: float
    load: _containers.ScalarMap[str, float]
    def __init__(self, generation: _Optional[int] = ..., fence_s: _Optional[float] = ..., unknown_timeout_s: _Optional[float] = ..., load: _Optional[_Mapping[str, float]] = ...) -> None: ...

class JobOutputRequest(_message.Message):
    __slots__ = ("job_id", "stderr", "tail_bytes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    TAIL_BYTES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    stderr: bool
    tail_bytes: int
    def __init__(self, job_id: _Optional[str] = ..., stderr: _Optional[bool] = ..., tail_bytes: _Optional[int] = ...) -> None: ...

class JobOutputResponse(_message.Message):
    __slots__ = ("data", "size", "host", "path")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    size: int
    host: str
    path: str
    def __init__(self, data: _Optional[bytes] = ..., size: _Optional[int] = ..., host: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class OutputRequest(_message.Message):
    __slots__ = ("request", "job", "stderr", "tail_bytes")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    TAIL_BYTES_FIELD_NUMBER: _ClassVar[int]
    request: int
    job: Job
    stderr: bool
    tail_bytes: int
    def __init__(self, request: _Optional[int] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., stderr: _Optional[bool] = ..., tail_bytes: _Optional[int] = ...) -> None: ...

class OutputAnswer(_message.Message):
    __slots__ = ("request", "data", "size", "path", "error")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request: int
    data: bytes
    size: int
    path: str
    error: str
    def __init__(self, request: _Optional[int] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ..., path: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ControllerMessage(_message.Message):
    __slots__ = ("joined", "run", "signal", "ack", "commands", "heartbeat", "launch", "task", "output")
    JOINED_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    joined: Joined
    run: RunJob
    signal: SignalJob
    ack: ReportAck
    commands: Commands
    heartbeat: Heartbeat
    launch: LaunchTask
    task: TaskState
    output: OutputRequest
    def __init__(self, joined: _Optional[_Union[Joined, _Mapping]] = ..., run: _Optional[_Union[RunJob, _Mapping]] = ..., signal: _Optional[_Union[SignalJob, _Mapping]] = ..., ack: _Optional[_Union[ReportAck, _Mapping]] = ..., commands: _Optional[_Union[Commands, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., launch: _Optional[_Union[LaunchTask, _Mapping]] = ..., task: _Optional[_Union[TaskState, _Mapping]] = ..., output: _Optional[_Union[OutputRequest, _Mapping]] = ...) -> None: ...

class Commands(_message.Message):
    __slots__ = ("commands",)
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[ControllerMessage]
    def __init__(self, commands: _Optional[_Iterable[_Union[ControllerMessage, _Mapping]]] = ...) -> None: ...

class RunJob(_message.Message):
    __slots__ = ("job", "credential")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    job: Job
    credential: str
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., credential: _Optional[str] = ...) -> None: ...

class SignalJob(_message.Message):
    __slots__ = ("job_id", "attempt", "kind", "preempted", "signal", "checkpoint")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    kind: SignalKind
    preempted: bool
    signal: int
    checkpoint: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., kind: _Optional[_Union[SignalKind, str]] = ..., preempted: _Optional[bool] = ..., signal: _Optional[int] = ..., checkpoint: _Optional[int] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ("job_id", "attempt", "kind")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    kind: str
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., kind: _Optional[str] = ...) -> None: ...

class Joined(_message.Message):
    __slots__ = ("generation", "heartbeat_s", "fence_s", "unknown_timeout_s")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_S_FIELD_NUMBER: _ClassVar[int]
    FENCE_S_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    generation: int
    heartbeat_s: float
    fence_s: float
    unknown_timeout_s: float
    def __init__(self, generation: _Optional[int] = ..., heartbeat_s: _Optional[float] = ..., fence_s: _Optional[float] = ..., unknown_timeout_s: _Optional[float] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "priority", "description", "closed", "job_pick_plugin", "inactive", "slot_limit", "users", "admins", "max_user_priority", "res_req", "kill_invalid_depend", "fairshare", "preemptive", "preemptable", "preempt_action", "preempt_min_run_s", "max_preemptions", "preemptable_resources", "exclusive", "backfill", "chunk_job_size", "chunk_job_duration_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    JOB_PICK_PLUGIN_FIELD_NUMBER: _ClassVar[int]
    INACTIVE_FIELD_NUMBER: _ClassVar[int]
    SLOT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    ADMINS_FIELD_NUMBER: _ClassVar[int]
    MAX_USER_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RES_REQ_FIELD_NUMBER: _ClassVar[int]
    KILL_INVALID_DEPEND_FIELD_NUMBER: _ClassVar[int]
    FAIRSHARE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIVE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTABLE_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_ACTION_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_MIN_RUN_S_FIELD_NUMBER: _ClassVar[int]
    MAX_PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTABLE_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    CHUNK_JOB_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_JOB_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    priority: int
    description: str
    closed: bool
    job_pick_plugin: str
    inactive: bool
    slot_limit: int
    users: _containers.RepeatedScalarFieldContainer[str]
    admins: _containers.RepeatedScalarFieldContainer[str]
    max_user_priority: int
    res_req: str
    kill_invalid_depend: bool
    fairshare: FairShare
    preemptive: _containers.RepeatedScalarFieldContainer[str]
    preemptable: bool
    preempt_action: PreemptAction
    preempt_min_run_s: int
    max_preemptions: int
    preemptable_resources: _containers.RepeatedScalarFieldContainer[str]
    exclusive: bool
    backfill: str
    chunk_job_size: int
    chunk_job_duration_s: int
    def __init__(self, name: _Optional[str] = ..., priority: _Optional[int] = ..., description: _Optional[str] = ..., closed: _Optional[bool] = ..., job_pick_plugin: _Optional[str] = ..., inactive: _Optional[bool] = ..., slot_limit: _Optional[int] = ..., users: _Optional[_Iterable[str]] = ..., admins: _Optional[_Iterable[str]] = ..., max_user_priority: _Optional[int] = ..., res_req: _Optional[str] = ..., kill_invalid_depend: _Optional[bool] = ..., fairshare: _Optional[_Union[FairShare, _Mapping]] = ..., preemptive: _Optional[_Iterable[str]] = ..., preemptable: _Optional[bool] = ..., preempt_action: _Optional[_Union[PreemptAction, str]] = ..., preempt_min_run_s: _Optional[int] = ..., max_preemptions: _Optional[int] = ..., preemptable_resources: _Optional[_Iterable[str]] = ..., exclusive: _Optional[bool] = ..., backfill: _Optional[str] = ..., chunk_job_size: _Optional[int] = ..., chunk_job_duration_s: _Optional[int] = ...) -> None: ...

class FairShare(_message.Message):
    __slots__ = ("half_life_s", "users", "projects", "groups", "group_members")
    class UsersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ProjectsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class GroupsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HALF_LIFE_S_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    PROJECTS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    GROUP_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    half_life_s: int
    users: _containers.ScalarMap[str, int]
    projects: _containers.ScalarMap[str, int]
    groups: _containers.ScalarMap[str, int]
    group_members: _containers.RepeatedCompositeFieldContainer[UserGroup]
    def __init__(self, half_life_s: _Optional[int] = ..., users: _Optional[_Mapping[str, int]] = ..., projects: _Optional[_Mapping[str, int]] = ..., groups: _Optional[_Mapping[str, int]] = ..., group_members: _Optional[_Iterable[_Union[UserGroup, _Mapping]]] = ...) -> None: ...

class UserGroup(_message.Message):
    __slots__ = ("name", "members")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ...) -> None: ...

class ShareUsage(_message.Message):
    __slots__ = ("slot_ms", "stamp_ms", "queue", "project", "user")
    SLOT_MS_FIELD_NUMBER: _ClassVar[int]
    STAMP_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    slot_ms: int
    stamp_ms: int
    queue: str
    project: str
    user: str
    def __init__(self, slot_ms: _Optional[int] = ..., stamp_ms: _Optional[int] = ..., queue: _Optional[str] = ..., project: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class PutQueueRequest(_message.Message):
    __slots__ = ("queue", "request_id")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    request_id: str
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class QueueResponse(_message.Message):
    __slots__ = ("queue", "revision")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    revision: int
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("stale", "user_bounds")
    STALE_FIELD_NUMBER: _ClassVar[int]
    USER_BOUNDS_FIELD_NUMBER: _ClassVar[int]
    stale: bool
    user_bounds: bool
    def __init__(self, stale: _Optional[bool] = ..., user_bounds: _Optional[bool] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues", "default_queue", "revision", "limits", "limit_used", "share_usage", "user_bounds", "user_groups")
    class LimitUsedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_QUEUE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_USED_FIELD_NUMBER: _ClassVar[int]
    SHARE_USAGE_FIELD_NUMBER: _ClassVar[int]
    USER_BOUNDS_FIELD_NUMBER: _ClassVar[int]
    USER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    default_queue: str
    revision: int
    limits: _containers.RepeatedCompositeFieldContainer[Limit]
    limit_used: _containers.ScalarMap[str, int]
    share_usage: _containers.RepeatedCompositeFieldContainer[ShareUsage]
    user_bounds: UserBounds
    user_groups: _containers.RepeatedCompositeFieldContainer[UserGroup]
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ..., default_queue: _Optional[str] = ..., revision: _Optional[int] = ..., limits: _Optional[_Iterable[_Union[Limit, _Mapping]]] = ..., limit_used: _Optional[_Mapping[str, int]] = ..., share_usage: _Optional[_Iterable[_Union[ShareUsage, _Mapping]]] = ..., user_bounds: _Optional[_Union[UserBounds, _Mapping]] = ..., user_groups: _Optional[_Iterable[_Union[UserGroup, _Mapping]]] = ...) -> None: ...

class UserBounds(_message.Message):
    __slots__ = ("max_pend_jobs_per_user", "submit_rate_per_user", "submit_burst_per_user", "exempt_roles", "max_jobs_per_request", "max_array_size", "user", "exempt", "pending")
    MAX_PEND_JOBS_PER_USER_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_RATE_PER_USER_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_BURST_PER_USER_FIELD_NUMBER: _ClassVar[int]
    EXEMPT_ROLES_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_ARRAY_SIZE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    EXEMPT_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    max_pend_jobs_per_user: int
    submit_rate_per_user: float
    submit_burst_per_user: int
    exempt_roles: _containers.RepeatedScalarFieldContainer[str]
    max_jobs_per_request: int
    max_array_size: int
    user: str
    exempt: bool
    pending: int
    def __init__(self, max_pend_jobs_per_user: _Optional[int] = ..., submit_rate_per_user: _Optional[float] = ..., submit_burst_per_user: _Optional[int] = ..., exempt_roles: _Optional[_Iterable[str]] = ..., max_jobs_per_request: _Optional[int] = ..., max_array_size: _Optional[int] = ..., user: _Optional[str] = ..., exempt: _Optional[bool] = ..., pending: _Optional[int] = ...) -> None: ...

class TokenInfo(_message.Message):
    __slots__ = ("id", "user", "role", "expires_ms", "created_ms", "created_by", "description", "scope")
    ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    id: str
    user: str
    role: str
    expires_ms: int
    created_ms: int
    created_by: str
    description: str
    scope: TokenScope
    def __init__(self, id: _Optional[str] = ..., user: _Optional[str] = ..., role: _Optional[str] = ..., expires_ms: _Optional[int] = ..., created_ms: _Optional[int] = ..., created_by: _Optional[str] = ..., description: _Optional[str] = ..., scope: _Optional[_Union[TokenScope, _Mapping]] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("sha256", "user", "role", "expires_ms", "description", "request_id", "scope")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    user: str
    role: str
    expires_ms: int
    description: str
    request_id: str
    scope: TokenScope
    def __init__(self, sha256: _Optional[str] = ..., user: _Optional[str] = ..., role: _Optional[str] = ..., expires_ms: _Optional[int] = ..., description: _Optional[str] = ..., request_id: _Optional[str] = ..., scope: _Optional[_Union[TokenScope, _Mapping]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("id", "request_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    request_id: str
    def __init__(self, id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class TokenResponse(_message.Message):
    __slots__ = ("token", "revision")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    token: TokenInfo
    revision: int
    def __init__(self, token: _Optional[_Union[TokenInfo, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens", "revision")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenInfo]
    revision: int
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenInfo, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("name", "role", "kind", "permissions", "via", "sees_every_job", "scope", "cluster_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    SEES_EVERY_JOB_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    kind: str
    permissions: _containers.RepeatedScalarFieldContainer[str]
    via: str
    sees_every_job: bool
    scope: TokenScope
    cluster_id: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., kind: _Optional[str] = ..., permissions: _Optional[_Iterable[str]] = ..., via: _Optional[str] = ..., sees_every_job: _Optional[bool] = ..., scope: _Optional[_Union[TokenScope, _Mapping]] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class SaveSnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BackupHeader(_message.Message):
    __slots__ = ("cluster_id", "revision", "size")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    revision: int
    size: int
    def __init__(self, cluster_id: _Optional[str] = ..., revision: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class BackupChunk(_message.Message):
    __slots__ = ("header", "data", "sha256")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    header: BackupHeader
    data: bytes
    sha256: bytes
    def __init__(self, header: _Optional[_Union[BackupHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., sha256: _Optional[bytes] = ...) -> None: ...

class ReconfigureRequest(_message.Message):
    __slots__ = ("dry_run",)
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    def __init__(self, dry_run: _Optional[bool] = ...) -> None: ...

class ReconfigureResponse(_message.Message):
    __slots__ = ("replica_id", "leader", "config_digest", "changed", "committed", "message")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    leader: bool
    config_digest: str
    changed: bool
    committed: bool
    message: str
    def __init__(self, replica_id: _Optional[int] = ..., leader: _Optional[bool] = ..., config_digest: _Optional[str] = ..., changed: _Optional[bool] = ..., committed: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...
