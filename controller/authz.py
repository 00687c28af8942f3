"""Who may do what: the roles table, and the checks every request passes.

Theory of operation. Every request reaches the controller with a proven
caller, a `Principal` (controller/authn.py: a bearer token, a MUNGE
credential or a client certificate). One table maps each role to its
permissions (`DEFAULT_ROLES`, overridable per role in the cluster
configuration's `[roles.NAME]`). The gRPC layer asks for the permission a
method needs (`METHOD_PERMISSION`); the leader asks the finer questions that
need state (is this the caller's job, the queue's administrator, a priority
above the queue's cap) with the functions below, before anything is
proposed. Apply never decides on identity: the leader authorized the
request, and the entry records who asked.

Pure: no I/O, no clock (an expiry is compared with a time the caller gives).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controller import request_ids
from xce import cluster_names
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

PERMISSIONS = frozenset({
    "jobs.submit",        # submit jobs (owned by the caller)
    "jobs.read",          # list and get jobs (with private_jobs, only one's own)
    "jobs.read.all",      # see every user's jobs even with private_jobs
    "jobs.env.all",       # see other users' environment values
    "jobs.control",       # kill, stop, resume, hold, release, requeue one's own jobs
    "jobs.control.all",   # ... anyone's
    "jobs.modify",        # modify one's own jobs (priority at most the queue's max_user_priority)
    "jobs.modify.all",    # modify anyone's, any priority
    "jobs.run",           # force-run (brun)
    "queues.state",       # open, close, activate, inactivate queues
    "queues.manage",      # create queues, change anything about them
    "tokens.manage",      # create, list and revoke tokens
    "audit.read",         # read everyone's audit trail (without it: one's own rows)
    "cluster.backup",     # save a snapshot of the whole state (every job, token hashes): admins only
    "cluster.members",    # add and remove controller replicas
    "cluster.config",     # make a replica re-read its cluster file (xce reconfig, badmin reconfig)
    "cluster.read",       # status, hosts, queues
    "hosts.control",      # close and open hosts (badmin hclose/hopen)
    "state.sync",         # the Sync stream (every job in full)
    "scheduler.lease",    # take and renew the scheduler lease
    "scheduler.decide",   # send decision batches
    "worker.connect",     # join as a worker (only as the host one is)
})

_USER = frozenset({"jobs.submit", "jobs.read", "jobs.control", "jobs.modify", "cluster.read"})
_READONLY = frozenset({"jobs.read", "jobs.read.all", "cluster.read"})
_OPERATOR = _USER | _READONLY | {"jobs.control.all", "jobs.modify.all", "jobs.run", "jobs.env.all",
                                 "queues.state", "hosts.control", "audit.read"}

DEFAULT_ROLES: Mapping[str, frozenset[str]] = {
    "cluster_admin": PERMISSIONS - {"worker.connect", "scheduler.lease", "scheduler.decide"},
    "operator": _OPERATOR,
    "user": _USER,
    "readonly": _READONLY,
    # The gateway's agent roles: an agent reads, or acts on jobs, never on configuration.
    "mcp_readonly": _READONLY,
    "mcp_operator": _READONLY | {"jobs.submit", "jobs.control.all", "jobs.modify.all"},
    "worker": frozenset({"worker.connect"}),
    "scheduler": frozenset({"state.sync", "scheduler.lease", "scheduler.decide", "cluster.read",
                            "jobs.read", "jobs.read.all", "jobs.env.all"}),
    "replica": frozenset({"cluster.read"}),
    # `xce gateway`'s own key: the one Sync stream it fans out to its SSE clients. Each
    # client's own key decides what of it that client is sent.
    "gateway": frozenset({"state.sync", "cluster.read"}),
}

# The permission each method needs before anything else is looked at; the
# leader then checks ownership and queues (the "own" permissions are the floor).
METHOD_PERMISSION: Mapping[str, str] = {
    "SubmitJobs": "jobs.submit",
    "GetJob": "jobs.read",
    "ListJobs": "jobs.read",
    "ListHistory": "jobs.read",
    "GetJobOutput": "jobs.read",
    "Accounting": "jobs.read",
    "ControlJob": "jobs.control",
    "ModifyJob": "jobs.modify",
    "RunJob": "jobs.run",
    "Status": "cluster.read",
    "ListHosts": "cluster.read",
    "ControlHost": "hosts.control",
    "ListQueues": "cluster.read",
    "CreateQueue": "queues.manage",
    "UpdateQueue": "queues.state",
    "CreateToken": "tokens.manage",
    "RevokeToken": "tokens.manage",
    "ListTokens": "tokens.manage",
    "ListAudit": "jobs.read",
    "Sync": "state.sync",
    "SaveSnapshot": "cluster.backup",
    "AddMember": "cluster.members",
    "RemoveMember": "cluster.members",
    "ListMembers": "cluster.read",
    "Reconfigure": "cluster.config",
    "PutJobGroup": "jobs.submit",
    "PutReservation": "hosts.control",
    "Connect": "worker.connect",
    "AcquireLease": "scheduler.lease",
    "SubmitDecisions": "scheduler.decide",
}

ROLES_FOR_PEOPLE = ("cluster_admin", "operator", "user", "readonly", "mcp_readonly", "mcp_operator")


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: a person (by token or MUNGE), a worker, a scheduler or a replica."""

    name: str
    role: str
    via: str = "token"                          # token, certificate, munge
    groups: frozenset[str] = field(default_factory=frozenset)
    # A scoped token's scope (G7) and the token's id, which a refusal names.
    scope: api.TokenScope | None = field(default=None, compare=False, hash=False)
    key_id: str = ""
    # The rest is for the audit trail only, never for a decision: the key's description, and how the
    # request came (authn.py: rest when the gateway proved itself, cli when the client says so, grpc).
    key_description: str = field(default="", compare=False, hash=False)
    route: str = field(default="grpc", compare=False, hash=False)

    def record(self) -> log.Principal:
        return log.Principal(name=self.name, role=self.role, via=self.via)


@dataclass(frozen=True)
class StaticToken:
    """A token from the cluster file (`[[auth.tokens]]`): bootstrap, not revocable through the API."""

    user: str
    role: str


@dataclass(frozen=True)
class Policy:
    roles: Mapping[str, frozenset[str]] = field(default_factory=lambda: dict(DEFAULT_ROLES))
    private_jobs: bool = False                  # Slurm PrivateData=jobs; LSF's default is false
    max_jobs_per_request: int = 10_000
    max_pend_jobs_per_user: int = 10_000        # 0: no limit (LSF MAX_PEND_JOBS; pending_counts.py)
    max_array_size: int = 1_000_000             # elements of one job array (LSF MAX_JOB_ARRAY_SIZE)
    submit_rate_per_user: float = 1_000.0       # jobs a second, sustained (submit_rates.py); 0: no bound
    submit_burst_per_user: int = 20_000         # ... and at once
    limits_exempt_roles: frozenset[str] = frozenset({"cluster_admin"})  # neither bound applies to them

    def exempt(self, principal: Principal) -> bool:
        """The per-user submit bounds do not hold the cluster's administrators (Slurm exempts its
        SlurmUser and root from its rate limit likewise)."""
        return principal.role in self.limits_exempt_roles

    def permissions(self, principal: Principal) -> frozenset[str]:
        return self.roles.get(principal.role, frozenset())

    def allows(self, principal: Principal, permission: str) -> bool:
        """`permission`, or its ".all" form, which implies it (jobs.control.all is jobs.control too)."""
        held = self.permissions(principal)
        return permission in held or f"{permission}.all" in held

    def require(self, principal: Principal, permission: str, what: str = "") -> None:
        if not self.allows(principal, permission):
            raise denied(principal, permission, what)


def denied(principal: Principal, permission: str, what: str = "") -> ServiceError:
    target = f" {what}" if what else ""
    return ServiceError(log.PERMISSION_DENIED,
                        f"{principal.name} (role {principal.role}) may not{target}: needs {permission}")


def roles_from_config(raw: Mapping[str, object]) -> dict[str, frozenset[str]]:
    """DEFAULT_ROLES with `[roles.NAME] permissions = [...]` replacing or adding roles."""
    roles = dict(DEFAULT_ROLES)
    for name, body in raw.items():
        perms = body.get("permissions") if isinstance(body, Mapping) else None
        if not isinstance(perms, list) or not all(isinstance(p, str) for p in perms):
            raise ValueError(f"[roles.{name}] needs permissions = [\"...\", ...]")
        unknown = sorted(set(perms) - PERMISSIONS)
        if unknown:
            raise ValueError(f"[roles.{name}]: unknown permissions {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(PERMISSIONS))})")
        roles[name] = frozenset(perms)
    return roles


# ------------------------------------------------------------------ jobs


def owns(principal: Principal, job: api.Job) -> bool:
    return bool(job.spec.user) and job.spec.user == principal.name


def is_queue_admin(principal: Principal, queue: api.Queue | None) -> bool:
    return queue is not None and member(principal, queue.admins)


def member(principal: Principal, names: Iterable[str]) -> bool:
    """`names` holds user names and "@group"s (LSF's USERS syntax); "all" is everyone."""
    for name in names:
        if name == "all" or name == principal.name or (name.startswith("@") and name[1:] in principal.groups):
            return True
    return False


def check_job_action(policy: Policy, principal: Principal, job: api.Job, queue: api.Queue | None,
                     permission: str, what: str) -> None:
    """`permission` on one's own job, `permission.all` (or queue administrator) on anyone's."""
    if owns(principal, job) and policy.allows(principal, permission):
        return
    if policy.allows(principal, permission + ".all") or (
            is_queue_admin(principal, queue) and policy.allows(principal, permission)):
        return
    raise denied(principal, permission + ".all", f"{what} job {job.id} of {job.spec.user or 'nobody'}")


def check_priority(policy: Policy, principal: Principal, queue: api.Queue | None, priority: int,
                   current: int | None = None) -> None:
    """A user may set a priority up to the queue's max_user_priority (or lower what it has)."""
    if queue is None or not queue.HasField("max_user_priority") or priority <= queue.max_user_priority:
        return
    if current is not None and priority <= current:
        return
    if policy.allows(principal, "jobs.modify.all") or is_queue_admin(principal, queue):
        return
    raise ServiceError(log.PERMISSION_DENIED,
                       f"priority {priority} is above queue {queue.name}'s max_user_priority "
                       f"{queue.max_user_priority}: needs jobs.modify.all")


def check_submit_queue(policy: Policy, principal: Principal, queue: api.Queue | None) -> None:
    if queue is None or not queue.users or member(principal, queue.users) or is_queue_admin(principal, queue):
        return
    if policy.allows(principal, "jobs.control.all"):
        return
    raise ServiceError(log.PERMISSION_DENIED,
                       f"{principal.name} may not submit to queue {queue.name} (its users: "
                       f"{', '.join(queue.users)})")


def check_queue_update(policy: Policy, principal: Principal, current: api.Queue, wanted: api.Queue) -> None:
    """Opening, closing, activating a queue is queues.state; any other change is queues.manage."""
    if policy.allows(principal, "queues.manage"):
        return
    before, after = api.Queue(), api.Queue()
    before.CopyFrom(current)
    after.CopyFrom(wanted)
    for state_field in ("closed", "inactive"):
        before.ClearField(state_field)
        after.ClearField(state_field)
    if before != after:
        raise denied(principal, "queues.manage", f"change queue {wanted.name} beyond open/close/activate")
    policy.require(principal, "queues.state", f"open or close queue {wanted.name}")


def visible(policy: Policy, principal: Principal, job: api.Job) -> bool:
    """With private_jobs, a job is seen only by its owner and those with jobs.read.all."""
    return not policy.private_jobs or owns(principal, job) or policy.allows(principal, "jobs.read.all")


def redact(policy: Policy, principal: Principal, job: api.Job, in_place: bool = False) -> api.Job:
    """Other users' environment values are hidden unless the caller has jobs.env.all (keys stay), and
    their request ids always (an id answers a retry of its caller's only, but says what it was); the
    owner sees its own id as it sent it (controller/request_ids.py). `in_place`: `job` is the
    caller's own copy (a read's, parsed for it), changed rather than copied."""
    mine = owns(principal, job)
    hide_env = not mine and bool(job.spec.env) and not policy.allows(principal, "jobs.env.all")
    # An interactive job's key (bsub -I) is its owner's alone: whoever holds it may speak for the
    # submitter (cli/lsf/interactive.py), an operator with jobs.env.all included.
    hide_key = not mine and OWNER_ONLY_ENV in job.spec.env
    stored = job.request_id
    own_id = request_ids.shown(stored) if mine else ""
    if not hide_env and not hide_key and own_id == stored:
        return job
    shown = job
    if not in_place:
        shown = api.Job()
        shown.CopyFrom(job)
    shown.request_id = own_id
    if hide_env:
        blank_env(shown.spec)
    elif hide_key:
        shown.spec.env[OWNER_ONLY_ENV] = ""
    return shown


OWNER_ONLY_ENV = "XCE_INTERACTIVE_KEY"


def blank_env(spec: api.JobSpec) -> None:
    """Every value of the spec's environment blanked, the names kept. (The names are taken first:
    a protobuf map written while it is iterated skips entries, and values were left in clear.)"""
    for key in list(spec.env):
        spec.env[key] = ""


# ------------------------------------------------------------------ scopes


SCOPE_ACTIONS = ("submit", "kill", "stop", "resume", "hold", "release", "requeue", "modify", "checkpoint")
# What a scoped key may ask at all (its role then decides, and its scope on each job): job work and
# reads; never the Sync stream, backups, tokens, queues, hosts, members or a force-run.
SCOPED_PERMISSIONS = frozenset({"jobs.read", "jobs.submit", "jobs.control", "jobs.modify", "cluster.read"})
# Checked by the leader, not the gRPC layer: a denied audited write is recorded before it is answered.
LEADER_CHECKED = frozenset({"jobs.submit", "jobs.control", "jobs.modify"})


def check_scope(principal: Principal, action: str, queues: Iterable[str] = (), owner: str = "") -> None:
    """A scoped key acts only inside its scope: its actions, its queues, its users' jobs."""
    scope = principal.scope
    if scope is None:
        return
    if action and scope.actions and action not in scope.actions:
        raise out_of_scope(principal, f"{action} is not among its actions ({', '.join(scope.actions)})")
    for queue in queues:
        if scope.queues and queue not in scope.queues:
            raise out_of_scope(principal, f"queue {queue!r} is not among its queues "
                                          f"({', '.join(scope.queues)})")
    if owner and scope.users and owner not in scope.users:
        raise out_of_scope(principal, f"the job's owner {owner!r} is not among its users "
                                      f"({', '.join(scope.users)})")


def check_scope_totals(principal: Principal, jobs: int, slots: int, more_jobs: int, more_slots: int) -> None:
    """`jobs` and `slots` of its user's unfinished jobs now, and what a submit would add."""
    scope = principal.scope
    if scope is None:
        return
    if scope.max_jobs and jobs + more_jobs > scope.max_jobs:
        raise out_of_scope(principal, f"{principal.name} has {jobs} unfinished jobs; {more_jobs} more would "
                                      f"pass its max_jobs {scope.max_jobs}")
    if scope.max_slots and slots + more_slots > scope.max_slots:
        raise out_of_scope(principal, f"{principal.name}'s unfinished jobs hold {slots} slots; {more_slots} "
                                      f"more would pass its max_slots {scope.max_slots}")


def out_of_scope(principal: Principal, why: str) -> ServiceError:
    return ServiceError(log.PERMISSION_DENIED,
                        f"outside the scope of key {principal.key_id or '?'} ({principal.name}): {why}")


def describe_scope(scope: api.TokenScope) -> str:
    parts = [f"{name} {', '.join(getattr(scope, name))}"
             for name in ("actions", "queues", "users", "clusters") if getattr(scope, name)]
    parts += [f"{name} {getattr(scope, name)}" for name in ("max_jobs", "max_slots") if getattr(scope, name)]
    return "; ".join(parts) or "unbounded"


def check_scope_spec(scope: api.TokenScope) -> None:
    unknown = sorted(set(scope.actions) - set(SCOPE_ACTIONS))
    if unknown:
        raise ServiceError(log.INVALID_ARGUMENT, f"unknown scope actions {', '.join(unknown)} "
                                                 f"(known: {', '.join(SCOPE_ACTIONS)})")
    for cluster in scope.clusters:
        if not cluster_names.valid(cluster):
            raise ServiceError(log.INVALID_ARGUMENT, f"a scope's cluster is {cluster_names.RULE}, "
                                                     f"not {cluster[:70]!r}")
    if scope.max_jobs < 0 or scope.max_slots < 0:
        raise ServiceError(log.INVALID_ARGUMENT, "a scope's max_jobs and max_slots are 0 (no bound) or more")
    if len(scope.SerializeToString()) > 4096:
        raise ServiceError(log.INVALID_ARGUMENT, "the scope is larger than 4 KiB")
