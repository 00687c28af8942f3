from xce.v1 import api_pb2 as _api_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemberOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMBER_OP_UNSPECIFIED: _ClassVar[MemberOp]
    ADD_LEARNER: _ClassVar[MemberOp]
    PROMOTE: _ClassVar[MemberOp]
    BECOME_VOTER: _ClassVar[MemberOp]
    REMOVE: _ClassVar[MemberOp]
    REMOVED: _ClassVar[MemberOp]

class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[Code]
    INVALID_ARGUMENT: _ClassVar[Code]
    NOT_FOUND: _ClassVar[Code]
    ALREADY_EXISTS: _ClassVar[Code]
    PERMISSION_DENIED: _ClassVar[Code]
    RESOURCE_EXHAUSTED: _ClassVar[Code]
    FAILED_PRECONDITION: _ClassVar[Code]
    OUT_OF_RANGE: _ClassVar[Code]
    INTERNAL: _ClassVar[Code]
    UNAVAILABLE: _ClassVar[Code]
    UNAUTHENTICATED: _ClassVar[Code]
MEMBER_OP_UNSPECIFIED: MemberOp
ADD_LEARNER: MemberOp
PROMOTE: MemberOp
BECOME_VOTER: MemberOp
REMOVE: MemberOp
REMOVED: MemberOp
OK: Code
INVALID_ARGUMENT: Code
NOT_FOUND: Code
ALREADY_EXISTS: Code
PERMISSION_DENIED: Code
RESOURCE_EXHAUSTED: Code
FAILED_PRECONDITION: Code
OUT_OF_RANGE: Code
INTERNAL: Code
UNAVAILABLE: Code
UNAUTHENTICATED: Code

class Entry(_message.Message):
    __slots__ = ("stamp_ms", "proposer", "format", "by", "audit_note", "submit", "control", "modify", "put_queue", "init", "join_host", "host_status", "dispatch", "report", "resolve_host", "lease", "decisions", "reports", "joins", "announce", "host_statuses", "token", "member_change", "host_control", "host_loads", "audit", "job_group", "reservation")
    STAMP_MS_FIELD_NUMBER: _ClassVar[int]
    PROPOSER_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    AUDIT_NOTE_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    MODIFY_FIELD_NUMBER: _ClassVar[int]
    PUT_QUEUE_FIELD_NUMBER: _ClassVar[int]
    INIT_FIELD_NUMBER: _ClassVar[int]
    JOIN_HOST_FIELD_NUMBER: _ClassVar[int]
    HOST_STATUS_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_HOST_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    JOINS_FIELD_NUMBER: _ClassVar[int]
    ANNOUNCE_FIELD_NUMBER: _ClassVar[int]
    HOST_STATUSES_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    MEMBER_CHANGE_FIELD_NUMBER: _ClassVar[int]
    HOST_CONTROL_FIELD_NUMBER: _ClassVar[int]
    HOST_LOADS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_FIELD_NUMBER: _ClassVar[int]
    JOB_GROUP_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    stamp_ms: int
    proposer: int
    format: int
    by: Principal
    audit_note: _api_pb2.AuditRequest
    submit: SubmitBatch
    control: _api_pb2.ControlJobRequest
    modify: _api_pb2.ModifyJobRequest
    put_queue: PutQueueEntry
    init: InitCluster
    join_host: _api_pb2.HostSpec
    host_status: SetHostStatus
    dispatch: Dispatch
    report: HostReport
    resolve_host: SetHostStatus
    lease: LeaseEntry
    decisions: _api_pb2.DecisionBatch
    reports: HostReports
    joins: HostJoins
    announce: Announce
    host_statuses: HostStatuses
    token: TokenEntry
    member_change: MemberChange
    host_control: _api_pb2.ControlHostRequest
    host_loads: HostLoads
    audit: AuditEntry
    job_group: _api_pb2.PutJobGroupRequest
    reservation: _api_pb2.PutReservationRequest
    def __init__(self, stamp_ms: _Optional[int] = ..., proposer: _Optional[int] = ..., format: _Optional[int] = ..., by: _Optional[_Union[Principal, _Mapping]] = ..., audit_note: _Optional[_Union[_api_pb2.AuditRequest, _Mapping]] = ..., submit: _Optional[_Union[SubmitBatch, _Mapping]] = ..., control: _Optional[_Union[_api_pb2.ControlJobRequest, _Mapping]] = ..., modify: _Optional[_Union[_api_pb2.ModifyJobRequest, _Mapping]] = ..., put_queue: _Optional[_Union[PutQueueEntry, _Mapping]] = ..., init: _Optional[_Union[InitCluster, _Mapping]] = ..., join_host: _Optional[_Union[_api_pb2.HostSpec, _Mapping]] = ..., host_status: _Optional[_Union[SetHostStatus, _Mapping]] = ..., dispatch: _Optional[_Union[Dispatch, _Mapping]] = ..., report: _Optional[_Union[HostReport, _Mapping]] = ..., resolve_host: _Optional[_Union[SetHostStatus, _Mapping]] = ..., lease: _Optional[_Union[LeaseEntry, _Mapping]] = ..., decisions: _Optional[_Union[_api_pb2.DecisionBatch, _Mapping]] = ..., reports: _Optional[_Union[HostReports, _Mapping]] = ..., joins: _Optional[_Union[HostJoins, _Mapping]] = ..., announce: _Optional[_Union[Announce, _Mapping]] = ..., host_statuses: _Optional[_Union[HostStatuses, _Mapping]] = ..., token: _Optional[_Union[TokenEntry, _Mapping]] = ..., member_change: _Optional[_Union[MemberChange, _Mapping]] = ..., host_control: _Optional[_Union[_api_pb2.ControlHostRequest, _Mapping]] = ..., host_loads: _Optional[_Union[HostLoads, _Mapping]] = ..., audit: _Optional[_Union[AuditEntry, _Mapping]] = ..., job_group: _Optional[_Union[_api_pb2.PutJobGroupRequest, _Mapping]] = ..., reservation: _Optional[_Union[_api_pb2.PutReservationRequest, _Mapping]] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: _api_pb2.AuditRecord
    def __init__(self, record: _Optional[_Union[_api_pb2.AuditRecord, _Mapping]] = ...) -> None: ...

class Principal(_message.Message):
    __slots__ = ("name", "role", "via")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    via: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., via: _Optional[str] = ...) -> None: ...

class MemberChange(_message.Message):
    __slots__ = ("op", "member", "bootstrap", "request_id")
    OP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    op: MemberOp
    member: _api_pb2.Member
    bootstrap: _containers.RepeatedCompositeFieldContainer[_api_pb2.Member]
    request_id: str
    def __init__(self, op: _Optional[_Union[MemberOp, str]] = ..., member: _Optional[_Union[_api_pb2.Member, _Mapping]] = ..., bootstrap: _Optional[_Iterable[_Union[_api_pb2.Member, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class TokenEntry(_message.Message):
    __slots__ = ("revoke", "sha256", "info", "revoke_id", "request_id")
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    REVOKE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    revoke: bool
    sha256: str
    info: _api_pb2.TokenInfo
    revoke_id: str
    request_id: str
    def __init__(self, revoke: _Optional[bool] = ..., sha256: _Optional[str] = ..., info: _Optional[_Union[_api_pb2.TokenInfo, _Mapping]] = ..., revoke_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class Announce(_message.Message):
    __slots__ = ("replica_id", "kinds", "format")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    replica_id: int
    kinds: _containers.RepeatedScalarFieldContainer[str]
    format: int
    def __init__(self, replica_id: _Optional[int] = ..., kinds: _Optional[_Iterable[str]] = ..., format: _Optional[int] = ...) -> None: ...

class HostStatuses(_message.Message):
    __slots__ = ("changes",)
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[SetHostStatus]
    def __init__(self, changes: _Optional[_Iterable[_Union[SetHostStatus, _Mapping]]] = ...) -> None: ...

class LeaseEntry(_message.Message):
    __slots__ = ("scheduler_id", "duration_ms")
    SCHEDULER_ID_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    scheduler_id: str
    duration_ms: int
    def __init__(self, scheduler_id: _Optional[str] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class Dispatch(_message.Message):
    __slots__ = ("job_id", "host", "attempt", "request_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    host: str
    attempt: int
    request_id: str
    def __init__(self, job_id: _Optional[int] = ..., host: _Optional[str] = ..., attempt: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class HostReport(_message.Message):
    __slots__ = ("host", "generation", "report")
    HOST_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    host: str
    generation: int
    report: _api_pb2.JobReport
    def __init__(self, host: _Optional[str] = ..., generation: _Optional[int] = ..., report: _Optional[_Union[_api_pb2.JobReport, _Mapping]] = ...) -> None: ...

class HostReports(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[HostReport]
    def __init__(self, reports: _Optional[_Iterable[_Union[HostReport, _Mapping]]] = ...) -> None: ...

class HostJoins(_message.Message):
    __slots__ = ("joins",)
    JOINS_FIELD_NUMBER: _ClassVar[int]
    joins: _containers.RepeatedCompositeFieldContainer[_api_pb2.HostSpec]
    def __init__(self, joins: _Optional[_Iterable[_Union[_api_pb2.HostSpec, _Mapping]]] = ...) -> None: ...

class HostLoads(_message.Message):
    __slots__ = ("loads",)
    LOADS_FIELD_NUMBER: _ClassVar[int]
    loads: _containers.RepeatedCompositeFieldContainer[HostLoad]
    def __init__(self, loads: _Optional[_Iterable[_Union[HostLoad, _Mapping]]] = ...) -> None: ...

class HostLoad(_message.Message):
    __slots__ = ("name", "generation", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    generation: int
    values: _containers.ScalarMap[str, float]
    def __init__(self, name: _Optional[str] = ..., generation: _Optional[int] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...

class SetHostStatus(_message.Message):
    __slots__ = ("name", "generation", "status")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    name: str
    generation: int
    status: _api_pb2.HostStatus
    def __init__(self, name: _Optional[str] = ..., generation: _Optional[int] = ..., status: _Optional[_Union[_api_pb2.HostStatus, str]] = ...) -> None: ...

class SubmitBatch(_message.Message):
    __slots__ = ("requests", "by")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[_api_pb2.SubmitJobsRequest]
    by: _containers.RepeatedCompositeFieldContainer[Principal]
    def __init__(self, requests: _Optional[_Iterable[_Union[_api_pb2.SubmitJobsRequest, _Mapping]]] = ..., by: _Optional[_Iterable[_Union[Principal, _Mapping]]] = ...) -> None: ...

class PutQueueEntry(_message.Message):
    __slots__ = ("queue", "request_id", "create")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    queue: _api_pb2.Queue
    request_id: str
    create: bool
    def __init__(self, queue: _Optional[_Union[_api_pb2.Queue, _Mapping]] = ..., request_id: _Optional[str] = ..., create: _Optional[bool] = ...) -> None: ...

class InitCluster(_message.Message):
    __slots__ = ("cluster_id", "default_queue", "max_slots_per_job", "config_digest", "queues", "events_kept", "clean_period_ms", "history_retention_ms", "host_groups", "shared", "resources_digest", "limits", "limits_digest", "user_groups", "user_groups_digest")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_PER_JOB_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_KEPT_FIELD_NUMBER: _ClassVar[int]
    CLEAN_PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    HOST_GROUPS_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_DIGEST_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    USER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    USER_GROUPS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    default_queue: str
    max_slots_per_job: int
    config_digest: str
    queues: _containers.RepeatedCompositeFieldContainer[_api_pb2.Queue]
    events_kept: int
    clean_period_ms: int
    history_retention_ms: int
    host_groups: _containers.RepeatedCompositeFieldContainer[_api_pb2.HostGroup]
    shared: _containers.RepeatedCompositeFieldContainer[_api_pb2.SharedResource]
    resources_digest: str
    limits: _containers.RepeatedCompositeFieldContainer[_api_pb2.Limit]
    limits_digest: str
    user_groups: _containers.RepeatedCompositeFieldContainer[_api_pb2.UserGroup]
    user_groups_digest: str
    def __init__(self, cluster_id: _Optional[str] = ..., default_queue: _Optional[str] = ..., max_slots_per_job: _Optional[int] = ..., config_digest: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_api_pb2.Queue, _Mapping]]] = ..., events_kept: _Optional[int] = ..., clean_period_ms: _Optional[int] = ..., history_retention_ms: _Optional[int] = ..., host_groups: _Optional[_Iterable[_Union[_api_pb2.HostGroup, _Mapping]]] = ..., shared: _Optional[_Iterable[_Union[_api_pb2.SharedResource, _Mapping]]] = ..., resources_digest: _Optional[str] = ..., limits: _Optional[_Iterable[_Union[_api_pb2.Limit, _Mapping]]] = ..., limits_digest: _Optional[str] = ..., user_groups: _Optional[_Iterable[_Union[_api_pb2.UserGroup, _Mapping]]] = ..., user_groups_digest: _Optional[str] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("code", "message", "job_ids", "revision", "stamp_ms", "generation", "lease_epoch", "lease_holder", "lease_expires_ms", "rejections", "outcomes")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    STAMP_MS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    job_ids: _containers.RepeatedScalarFieldContainer[int]
    revision: int
    stamp_ms: int
    generation: int
    lease_epoch: int
    lease_holder: str
    lease_expires_ms: int
    rejections: _containers.RepeatedScalarFieldContainer[str]
    outcomes: _containers.RepeatedCompositeFieldContainer[_api_pb2.DecisionOutcome]
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., job_ids: _Optional[_Iterable[int]] = ..., revision: _Optional[int] = ..., stamp_ms: _Optional[int] = ..., generation: _Optional[int] = ..., lease_epoch: _Optional[int] = ..., lease_holder: _Optional[str] = ..., lease_expires_ms: _Optional[int] = ..., rejections: _Optional[_Iterable[str]] = ..., outcomes: _Optional[_Iterable[_Union[_api_pb2.DecisionOutcome, _Mapping]]] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("table", "key", "value", "deleted")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    table: str
    key: bytes
    value: bytes
    deleted: bool
    def __init__(self, table: _Optional[str] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., deleted: _Optional[bool] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("revision", "changes", "rejected", "kind", "by", "batch")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    revision: int
    changes: _containers.RepeatedCompositeFieldContainer[Change]
    rejected: Result
    kind: str
    by: _containers.RepeatedScalarFieldContainer[str]
    batch: _api_pb2.DecisionBatch
    def __init__(self, revision: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[Change, _Mapping]]] = ..., rejected: _Optional[_Union[Result, _Mapping]] = ..., kind: _Optional[str] = ..., by: _Optional[_Iterable[str]] = ..., batch: _Optional[_Union[_api_pb2.DecisionBatch, _Mapping]] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("kinds", "format")
    KINDS_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    kinds: _containers.RepeatedScalarFieldContainer[str]
    format: int
    def __init__(self, kinds: _Optional[_Iterable[str]] = ..., format: _Optional[int] = ...) -> None: ...

class Meta(_message.Message):
    __slots__ = ("applied_index", "cluster_id", "next_job_id", "events_floor", "default_queue", "max_slots_per_job", "config_digest", "events_bytes", "events_kept", "lease_holder", "lease_epoch", "lease_expires_ms", "members", "clean_period_ms", "history_retention_ms", "membership", "incarnation", "recovery", "host_groups", "resources_digest", "limits_digest", "audit_rows", "audit_dry_rows", "user_groups", "user_groups_digest", "next_reservation_ms", "audit_refused_rows")
    class MembersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Capabilities
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Capabilities, _Mapping]] = ...) -> None: ...
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FLOOR_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_SLOTS_PER_JOB_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    EVENTS_BYTES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_KEPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CLEAN_PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    HOST_GROUPS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_DIGEST_FIELD_NUMBER: _ClassVar[int]
    LIMITS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    AUDIT_ROWS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_DRY_ROWS_FIELD_NUMBER: _ClassVar[int]
    USER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    USER_GROUPS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    NEXT_RESERVATION_MS_FIELD_NUMBER: _ClassVar[int]
    AUDIT_REFUSED_ROWS_FIELD_NUMBER: _ClassVar[int]
    applied_index: int
    cluster_id: str
    next_job_id: int
    events_floor: int
    default_queue: str
    max_slots_per_job: int
    config_digest: str
    events_bytes: int
    events_kept: int
    lease_holder: str
    lease_epoch: int
    lease_expires_ms: int
    members: _containers.MessageMap[int, Capabilities]
    clean_period_ms: int
    history_retention_ms: int
    membership: _containers.RepeatedCompositeFieldContainer[_api_pb2.Member]
    incarnation: str
    recovery: Recovery
    host_groups: _containers.RepeatedCompositeFieldContainer[_api_pb2.HostGroup]
    resources_digest: str
    limits_digest: str
    audit_rows: int
    audit_dry_rows: int
    user_groups: _containers.RepeatedCompositeFieldContainer[_api_pb2.UserGroup]
    user_groups_digest: str
    next_reservation_ms: int
    audit_refused_rows: int
    def __init__(self, applied_index: _Optional[int] = ..., cluster_id: _Optional[str] = ..., next_job_id: _Optional[int] = ..., events_floor: _Optional[int] = ..., default_queue: _Optional[str] = ..., max_slots_per_job: _Optional[int] = ..., config_digest: _Optional[str] = ..., events_bytes: _Optional[int] = ..., events_kept: _Optional[int] = ..., lease_holder: _Optional[str] = ..., lease_epoch: _Optional[int] = ..., lease_expires_ms: _Optional[int] = ..., members: _Optional[_Mapping[int, Capabilities]] = ..., clean_period_ms: _Optional[int] = ..., history_retention_ms: _Optional[int] = ..., membership: _Optional[_Iterable[_Union[_api_pb2.Member, _Mapping]]] = ..., incarnation: _Optional[str] = ..., recovery: _Optional[_Union[Recovery, _Mapping]] = ..., host_groups: _Optional[_Iterable[_Union[_api_pb2.HostGroup, _Mapping]]] = ..., resources_digest: _Optional[str] = ..., limits_digest: _Optional[str] = ..., audit_rows: _Optional[int] = ..., audit_dry_rows: _Optional[int] = ..., user_groups: _Optional[_Iterable[_Union[_api_pb2.UserGroup, _Mapping]]] = ..., user_groups_digest: _Optional[str] = ..., next_reservation_ms: _Optional[int] = ..., audit_refused_rows: _Optional[int] = ...) -> None: ...

class Recovery(_message.Message):
    __slots__ = ("from_revision", "hosts", "until_ms", "why", "wait_ms")
    FROM_REVISION_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    from_revision: int
    hosts: _containers.RepeatedScalarFieldContainer[str]
    until_ms: int
    why: str
    wait_ms: int
    def __init__(self, from_revision: _Optional[int] = ..., hosts: _Optional[_Iterable[str]] = ..., until_ms: _Optional[int] = ..., why: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class SyncRequest(_message.Message):
    __slots__ = ("from_revision", "cluster_id", "history", "metrics_address")
    FROM_REVISION_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    METRICS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    from_revision: int
    cluster_id: str
    history: bool
    metrics_address: str
    def __init__(self, from_revision: _Optional[int] = ..., cluster_id: _Optional[str] = ..., history: _Optional[bool] = ..., metrics_address: _Optional[str] = ...) -> None: ...

class SyncMessage(_message.Message):
    __slots__ = ("snapshot_begin", "snapshot_chunk", "snapshot_end", "event", "progress")
    SNAPSHOT_BEGIN_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_CHUNK_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_END_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    snapshot_begin: SnapshotBegin
    snapshot_chunk: SnapshotChunk
    snapshot_end: SnapshotEnd
    event: Event
    progress: int
    def __init__(self, snapshot_begin: _Optional[_Union[SnapshotBegin, _Mapping]] = ..., snapshot_chunk: _Optional[_Union[SnapshotChunk, _Mapping]] = ..., snapshot_end: _Optional[_Union[SnapshotEnd, _Mapping]] = ..., event: _Optional[_Union[Event, _Mapping]] = ..., progress: _Optional[int] = ...) -> None: ...

class JobHosts(_message.Message):
    __slots__ = ("id", "host", "allocation")
    ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    id: int
    host: str
    allocation: _containers.RepeatedCompositeFieldContainer[_api_pb2.HostAllocation]
    def __init__(self, id: _Optional[int] = ..., host: _Optional[str] = ..., allocation: _Optional[_Iterable[_Union[_api_pb2.HostAllocation, _Mapping]]] = ...) -> None: ...

class SnapshotBegin(_message.Message):
    __slots__ = ("revision", "cluster_id")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    revision: int
    cluster_id: str
    def __init__(self, revision: _Optional[int] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Change]
    def __init__(self, records: _Optional[_Iterable[_Union[Change, _Mapping]]] = ...) -> None: ...

class SnapshotEnd(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...
