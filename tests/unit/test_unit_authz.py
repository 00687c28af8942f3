"""The roles table and the checks on it (controller/authz.py), as pure functions."""

from __future__ import annotations

import pytest

from controller import authz
from controller.authz import Policy, Principal
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

POLICY = Policy()
ALICE = Principal("alice", "user", groups=frozenset({"physics"}))
BOB = Principal("bob", "user")


def _job(owner: str, env: dict[str, str] | None = None) -> api.Job:
    return api.Job(id=7, spec=api.JobSpec(command=["true"], user=owner, env=env or {}))


def _denied(call: object) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code == log.PERMISSION_DENIED
    return caught.value


def test_every_role_grants_only_known_permissions_and_people_never_act_as_daemons() -> None:
    for role, permissions in authz.DEFAULT_ROLES.items():
        assert permissions <= authz.PERMISSIONS, role
    for role in authz.ROLES_FOR_PEOPLE:
        assert not authz.DEFAULT_ROLES[role] & {"worker.connect", "scheduler.lease", "scheduler.decide"}
    assert set(authz.METHOD_PERMISSION.values()) <= authz.PERMISSIONS


def test_own_jobs_yes_others_only_with_the_all_permission_or_as_queue_admin() -> None:
    authz.check_job_action(POLICY, ALICE, _job("alice"), None, "jobs.control", "kill")
    error = _denied(lambda: authz.check_job_action(POLICY, BOB, _job("alice"), None, "jobs.control", "kill"))
    assert "needs jobs.control.all" in error.message
    queue = api.Queue(name="q", admins=["bob"])
    authz.check_job_action(POLICY, BOB, _job("alice"), queue, "jobs.control", "kill")
    authz.check_job_action(POLICY, Principal("op", "operator"), _job("alice"), None, "jobs.modify", "modify")
    reader = Principal("r", "readonly")
    _denied(lambda: authz.check_job_action(POLICY, reader, _job("r"), None, "jobs.control", "kill"))


def test_queue_users_and_groups_and_the_priority_cap() -> None:
    queue = api.Queue(name="q", users=["@physics", "carol"], max_user_priority=10)
    authz.check_submit_queue(POLICY, ALICE, queue)  # by group
    authz.check_submit_queue(POLICY, Principal("carol", "user"), queue)
    refused = _denied(lambda: authz.check_submit_queue(POLICY, BOB, queue))
    assert "may not submit to queue q" in refused.message
    authz.check_priority(POLICY, ALICE, queue, 10)
    _denied(lambda: authz.check_priority(POLICY, ALICE, queue, 11))
    authz.check_priority(POLICY, ALICE, queue, 20, current=30)  # lowering is always allowed
    authz.check_priority(POLICY, Principal("op", "operator"), queue, 99)


def test_operators_open_and_close_queues_only_admins_change_the_rest() -> None:
    current = api.Queue(name="q", priority=30)
    closed = api.Queue(name="q", priority=30, closed=True)
    authz.check_queue_update(POLICY, Principal("op", "operator"), current, closed)
    assert "queues.manage" in _denied(lambda: authz.check_queue_update(
        POLICY, Principal("op", "operator"), current, api.Queue(name="q", priority=99))).message
    admin = Principal("root", "cluster_admin")
    authz.check_queue_update(POLICY, admin, current, api.Queue(name="q", priority=99))


def test_env_values_hidden_and_private_jobs_invisible() -> None:
    job = _job("alice", {"TOKEN": "s3cr3t"})
    assert authz.redact(POLICY, BOB, job).spec.env["TOKEN"] == ""
    assert job.spec.env["TOKEN"] == "s3cr3t"  # a copy was redacted, not the stored job
    assert authz.redact(POLICY, ALICE, job).spec.env["TOKEN"] == "s3cr3t"
    assert authz.redact(POLICY, Principal("op", "operator"), job).spec.env["TOKEN"] == "s3cr3t"
    private = Policy(private_jobs=True)
    assert authz.visible(POLICY, BOB, job) and not authz.visible(private, BOB, job)
    assert authz.visible(private, Principal("r", "readonly"), job)


def test_roles_from_the_configuration_replace_a_role_and_refuse_unknown_permissions() -> None:
    roles = authz.roles_from_config({"operator": {"permissions": ["jobs.read"]},
                                     "auditor": {"permissions": ["jobs.read", "jobs.read.all"]}})
    assert roles["operator"] == {"jobs.read"} and roles["auditor"] == {"jobs.read", "jobs.read.all"}
    with pytest.raises(ValueError, match="unknown permissions jobs.destroy"):
        authz.roles_from_config({"x": {"permissions": ["jobs.destroy"]}})


def test_an_all_permission_implies_the_own_one() -> None:
    agent = Principal("agent", "mcp_operator")  # holds jobs.control.all, not jobs.control
    assert POLICY.allows(agent, "jobs.control") and POLICY.allows(agent, "jobs.modify")
    authz.check_job_action(POLICY, agent, _job("alice"), None, "jobs.control", "kill")
    assert not POLICY.allows(Principal("r", "readonly"), "jobs.control")


def test_operators_and_admins_close_hosts_users_and_agents_do_not() -> None:
    permission = authz.METHOD_PERMISSION["ControlHost"]
    for role in ("operator", "cluster_admin"):
        POLICY.require(Principal("op", role), permission)
    for role in ("user", "readonly", "mcp_operator", "worker", "scheduler"):
        assert "hosts.control" in _denied(lambda: POLICY.require(Principal("x", role), permission)).message  # noqa: B023


def test_every_environment_value_of_another_user_s_job_is_hidden_however_many() -> None:
    """A protobuf map blanked while it was iterated skipped entries: values were shown in clear."""
    env = {f"SECRET_{i}": f"value-{i}" for i in range(200)}
    job = api.Job(id=1, spec=api.JobSpec(user="alice", command=["true"], env=env))
    shown = authz.redact(POLICY, BOB, job)
    assert set(shown.spec.env) == set(env) and set(shown.spec.env.values()) == {""}
    assert authz.redact(POLICY, ALICE, job).spec.env == env  # the owner's own


def test_an_interactive_job_s_key_is_its_owner_s_alone() -> None:
    job = api.Job(id=1, spec=api.JobSpec(user="alice", command=["bash"], env={
        "XCE_INTERACTIVE_KEY": "k" * 32, "XCE_INTERACTIVE": "10.0.0.1:4000"}))
    operator = Principal("op", "operator")  # jobs.env.all: every other value
    shown = authz.redact(POLICY, operator, job)
    assert shown.spec.env["XCE_INTERACTIVE_KEY"] == ""
    assert shown.spec.env["XCE_INTERACTIVE"] == "10.0.0.1:4000"
    assert authz.redact(POLICY, ALICE, job).spec.env["XCE_INTERACTIVE_KEY"] == "k" * 32
