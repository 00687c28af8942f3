"""Unit tests of the cluster configuration loader (controller/config.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from controller import config
from controller.config import ConfigError
from xce.v1 import api_pb2 as api

REPLICAS = """
[[replicas]]
id = 1
grpc = "127.0.0.1:7101"
raft = "127.0.0.1:7201"

[[replicas]]
id = 2
grpc = "127.0.0.1:7102"
raft = "127.0.0.1:7202"
"""

GOOD = """
cluster_id = "demo"
password = "s3cret"
data_dir = "xce-data"
default_queue = "low"
max_slots_per_job = 64

[raft]
election_min_s = 0.5
election_max_s = 0.9

[[queues]]
name = "normal"
priority = 30

[[queues]]
name = "low"
priority = 10
description = "background"
closed = true
""" + REPLICAS


def write(tmp_path: Path, text: str, name: str = "xce.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    message = str(caught.value)
    assert str(path.resolve()) in message  # every message names the file
    return message


# ---------------------------------------------------------------- good files


def test_good_file_loads_every_field(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, GOOD))
    assert loaded.cluster_id == "demo"
    assert loaded.password == "s3cret"
    assert loaded.data_dir == tmp_path.resolve() / "xce-data"
    assert loaded.default_queue == "low"
    assert loaded.max_slots_per_job == 64
    assert loaded.queues == (api.Queue(name="normal", priority=30),
                             api.Queue(name="low", priority=10, description="background", closed=True))
    assert [(r.id, r.grpc, r.raft) for r in loaded.replicas] == [
        (1, "127.0.0.1:7101", "127.0.0.1:7201"), (2, "127.0.0.1:7102", "127.0.0.1:7202")]
    assert (loaded.raft.election_min_s, loaded.raft.election_max_s) == (0.5, 0.9)
    assert loaded.replica(2).grpc == "127.0.0.1:7102"
    assert loaded.replica_dir(2) == tmp_path.resolve() / "xce-data" / "replica-2"
    assert loaded.grpc_for_raft("127.0.0.1:7201") == "127.0.0.1:7101"
    assert loaded.grpc_for_raft("127.0.0.1:9999") is None


def test_minimal_file_gets_defaults(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, 'cluster_id = "c1"\npassword = "p"\n' + REPLICAS))
    assert loaded.queues == (api.Queue(name="normal", priority=30),)
    assert loaded.default_queue == "normal"
    assert loaded.max_slots_per_job == 1024
    assert loaded.data_dir == tmp_path.resolve() / "data"


def test_default_queue_is_the_first_queue_when_not_given(tmp_path: Path) -> None:
    text = 'cluster_id = "c1"\npassword = "p"\n[[queues]]\nname = "gpu"\n[[queues]]\nname = "cpu"\n'
    assert config.load(write(tmp_path, text + REPLICAS)).default_queue == "gpu"


def test_password_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("  from-file\n")
    loaded = config.load(write(tmp_path, 'cluster_id = "c1"\npassword_file = "secret"\n' + REPLICAS))
    assert loaded.password == "from-file"


def test_digest_follows_queues_and_limits_only(tmp_path: Path) -> None:
    base = config.load(write(tmp_path, GOOD))
    same = config.load(write(tmp_path, GOOD.replace('"s3cret"', '"other"').replace(
        "election_min_s = 0.5", "election_min_s = 0.4"), "b.toml"))
    assert same.digest() == base.digest()
    assert len(base.digest()) == 16
    reordered = GOOD.replace('name = "normal"\npriority = 30', 'name = "normal"\npriority = 31')
    assert config.load(write(tmp_path, reordered, "c.toml")).digest() != base.digest()
    assert config.load(write(tmp_path, GOOD.replace("= 64", "= 65"), "d.toml")).digest() != base.digest()


def test_unknown_replica_id_is_a_config_error(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, GOOD))
    with pytest.raises(ConfigError, match=r"no replica with id 3 \(ids: 1, 2\)"):
        loaded.replica(3)


# ---------------------------------------------------------------- bad files


def test_missing_password_is_refused(tmp_path: Path) -> None:
    message = load_error(tmp_path, GOOD.replace('password = "s3cret"\n', ""))
    assert "a password (or password_file) is mandatory" in message


def test_empty_password_is_refused(tmp_path: Path) -> None:
    assert "mandatory" in load_error(tmp_path, GOOD.replace('"s3cret"', '""'))


def test_empty_password_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("\n")
    text = GOOD.replace('password = "s3cret"', 'password_file = "secret"')
    assert "mandatory" in load_error(tmp_path, text)


def test_unreadable_password_file_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace('password = "s3cret"', 'password_file = "no-such-file"')
    assert "cannot read password_file" in load_error(tmp_path, text)


def test_duplicate_replica_ids_are_refused(tmp_path: Path) -> None:
    assert "duplicate replica ids" in load_error(tmp_path, GOOD.replace("id = 2", "id = 1"))


def test_unknown_default_queue_is_refused(tmp_path: Path) -> None:
    message = load_error(tmp_path, GOOD.replace('default_queue = "low"', 'default_queue = "gpu"'))
    assert "default_queue 'gpu' is not among [[queues]]" in message


def test_invalid_toml_is_refused(tmp_path: Path) -> None:
    message = load_error(tmp_path, GOOD + "\nthis is = not [toml\n")
    assert "not valid TOML" in message


def test_non_utf8_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "xce.toml"
    path.write_bytes(b'cluster_id = "\xff"\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(path)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no configuration file at"):
        config.load(tmp_path / "absent.toml")


@pytest.mark.parametrize(("change", "words"), [
    (('cluster_id = "demo"\n', ""), "missing cluster_id"),
    (('cluster_id = "demo"', "cluster_id = 5"), "cluster_id must be a str"),
    (('cluster_id = "demo"', 'cluster_id = "my-cluster"'), "cluster_id must be letters, digits, _ or ."),
    (('cluster_id = "demo"', 'cluster_id = ""'), "cluster_id must be"),
    (("max_slots_per_job = 64", "max_slots_per_job = 0"), "max_slots_per_job must be a positive integer"),
    (("max_slots_per_job = 64", 'max_slots_per_job = "64"'), "max_slots_per_job must be a positive"),
    (("election_min_s = 0.5", "election_minimum = 0.5"), "[raft]"),
    (('grpc = "127.0.0.1:7102"\n', ""), "missing grpc"),
    (("id = 2", 'id = "2"'), "id must be a int"),
    (('name = "normal"', "name = 3"), "name must be a str"),
], ids=["no-cluster-id", "cluster-id-type", "cluster-id-dash", "cluster-id-empty", "slots-zero",
        "slots-string", "raft-unknown", "replica-no-grpc", "replica-id-type", "queue-name-type"])
def test_malformed_field_is_refused(tmp_path: Path, change: tuple[str, str], words: str) -> None:
    old, new = change
    assert old in GOOD
    assert words in load_error(tmp_path, GOOD.replace(old, new, 1))


def test_no_replicas_is_refused(tmp_path: Path) -> None:
    assert "no [[replicas]]" in load_error(tmp_path, GOOD.replace(REPLICAS, ""))


@pytest.mark.parametrize("priority", ['"high"', "3000000000", "[1]"], ids=["text", "too-big", "list"])
def test_bad_queue_priority_is_a_config_error(tmp_path: Path, priority: str) -> None:
    # ConfigError is what main() reports cleanly; anything else is a traceback.
    assert "priority" in load_error(tmp_path, GOOD.replace("priority = 10", f"priority = {priority}"))


def test_raft_settings_pysyncobj_would_refuse_are_a_config_error(tmp_path: Path) -> None:
    # pysyncobj asserts election timeout > 3 heartbeats deep in its constructor;
    # the replica must say so at load time instead of dying with a traceback.
    path = tmp_path / "cluster.toml"
    path.write_text('cluster_id = "c"\npassword = "p"\n[[replicas]]\nid = 1\ngrpc = "127.0.0.1:1"\n'
                    'raft = "127.0.0.1:2"\n[raft]\nelection_min_s = 0.1\nheartbeat_s = 0.05\n')
    with pytest.raises(ConfigError, match="3 heartbeats"):
        config.load(path)


@pytest.mark.parametrize("limit", ["-1", '"8"', "true", "3000000000"],
                         ids=["negative", "text", "bool", "too-big"])
def test_bad_queue_slot_limit_is_a_config_error(tmp_path: Path, limit: str) -> None:
    text = GOOD.replace("priority = 10", f"priority = 10\nslot_limit = {limit}")
    assert "slot_limit" in load_error(tmp_path, text)


def test_a_queue_slot_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(GOOD.replace("priority = 10", "priority = 10\nslot_limit = 8"))
    assert [q.slot_limit for q in config.load(path).queues if q.slot_limit] == [8]


# ---------------------------------------------------------------- security settings


def test_tls_is_on_unless_insecure_is_said_and_files_default_beside_the_file(tmp_path: Path) -> None:
    loaded = config.load(write(tmp_path, 'cluster_id = "c1"\npassword = "p"\n' + REPLICAS))
    assert not loaded.tls.insecure
    assert loaded.tls.ca == str(tmp_path.resolve() / "tls" / "ca.crt")
    assert loaded.replica(2).cert == tmp_path.resolve() / "tls" / "replica-2.crt"
    text = 'cluster_id = "c1"\npassword = "p"\n[tls]\ninsecure = true\n' + REPLICAS
    plain = config.load(write(tmp_path, text))
    assert plain.tls.insecure and plain.replica(1).cert is None


def test_auth_settings_load(tmp_path: Path) -> None:
    digest = "ab" * 32
    text = GOOD + f"""
[auth]
private_jobs = true
max_jobs_per_request = 50
munge = true
munge_roles = {{ root = "cluster_admin" }}
[[auth.tokens]]
sha256 = "{digest}"
user = "root"
role = "cluster_admin"

[roles.auditor]
permissions = ["jobs.read", "jobs.read.all"]
"""
    loaded = config.load(write(tmp_path, text))
    assert loaded.policy.private_jobs and loaded.policy.max_jobs_per_request == 50
    assert loaded.static_tokens[digest].role == "cluster_admin" and loaded.munge
    assert loaded.policy.roles["auditor"] == {"jobs.read", "jobs.read.all"}


@pytest.mark.parametrize(("extra", "words"), [
    ('[tls]\ninsecure = "yes"\n', "insecure must be true or false"),
    ('[auth]\nmax_jobs_per_request = 0\n', "max_jobs_per_request must be an integer >= 1"),
    ('[auth]\nmax_pend_jobs_per_user = -1\n', "max_pend_jobs_per_user must be an integer >= 0"),
    ('[auth]\nprivate_jobs = 1\n', "private_jobs must be true or false"),
    ('[[auth.tokens]]\nsha256 = "x"\nuser = "u"\nrole = "user"\n', "needs sha256 (64 hex digits)"),
    (f'[[auth.tokens]]\nsha256 = "{"a" * 64}"\nuser = "u"\nrole = "god"\n', "role 'god' is not a role"),
    ('[roles.x]\npermissions = ["jobs.everything"]\n', "unknown permissions jobs.everything"),
    ('[auth]\nmunge_roles = { root = "god" }\n', "munge_roles maps user names to roles"),
], ids=["insecure", "max-jobs", "max-pend", "private", "short-hash", "bad-role", "bad-permission",
        "munge-role"])
def test_bad_security_settings_are_config_errors(tmp_path: Path, extra: str, words: str) -> None:
    assert words in load_error(tmp_path, GOOD + "\n" + extra)


def test_a_bad_roles_table_names_its_line(tmp_path: Path) -> None:
    """The seed's API server answered 403 to everyone when its RBAC file was bad; a replica refuses to
    start instead, naming the file's line."""
    text = GOOD + '\n[roles.auditor]\npermissions = ["jobs.read"]\n\n[roles.x]\npermissions = ["jobs.all"]\n'
    line = text.splitlines().index("[roles.x]") + 1
    assert f"xce.toml:{line}: [roles.x]: unknown permissions jobs.all" in load_error(tmp_path, text)
    not_tables = "roles = 3\n" + GOOD
    assert f":{not_tables.splitlines().index('roles = 3') + 1}: [roles] must be tables" \
        in load_error(tmp_path, not_tables)


@pytest.mark.parametrize(("hosts", "words"), [
    ("unknown_timeout_s = 20\nfence_s = 20", "shorter than unknown_timeout_s (20"),
    ("fence_s = 5", "longer than heartbeat_timeout_s (10.0"),
    ("unknown_timeout_s = 15", "[hosts] fence_s (7.5; default half"),
    ("fence_s = -1", "[hosts] fence_s (-1"),
    ("fence_s = true", "[hosts] fence_s (True"),
], ids=["not-below-unknown", "not-above-heartbeat-timeout", "default-too-short", "negative", "bool"])
def test_a_fence_that_cannot_come_first_is_refused(tmp_path: Path, hosts: str, words: str) -> None:
    assert words in load_error(tmp_path, GOOD + f"\n[hosts]\n{hosts}\n")


def test_the_fence_defaults_to_half_the_unknown_timeout_and_0_turns_it_off(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(GOOD + "\n[hosts]\nunknown_timeout_s = 40\n")
    assert config.load(path).fence_s == 20
    path.write_text(GOOD + "\n[hosts]\nfence_s = 0\n")
    assert config.load(path).fence_s == 0


@pytest.mark.parametrize("value", ["-1", "true", '"15"'])
def test_a_load_commit_period_that_is_not_a_duration_is_refused(tmp_path: Path, value: str) -> None:
    refused = load_error(tmp_path, GOOD + f"\n[hosts]\nload_commit_s = {value}\n")
    assert "[hosts] load_commit_s must be 0" in refused


def test_load_indices_are_committed_every_15_s_by_default_and_0_turns_them_off(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(GOOD)
    assert config.load(path).load_commit_s == 15.0
    path.write_text(GOOD + "\n[hosts]\nload_commit_s = 0\n")
    assert config.load(path).load_commit_s == 0


@pytest.mark.parametrize("value", ["0", "-1", "true", '"5"'])
def test_a_resend_period_that_is_not_a_positive_duration_is_refused(tmp_path: Path, value: str) -> None:
    refused = load_error(tmp_path, GOOD + f"\n[hosts]\nresend_s = {value}\n")
    assert "[hosts] resend_s must be positive" in refused


def test_a_worker_is_sent_its_whole_set_of_jobs_every_5_s_by_default_and_the_leader_takes_the_file_s(
        tmp_path: Path) -> None:
    from controller.replica import leader_settings

    path = tmp_path / "cluster.toml"
    path.write_text(GOOD)
    assert config.load(path).resend_s == 5.0
    path.write_text(GOOD + "\n[hosts]\nresend_s = 600\n")
    loaded = config.load(path)
    assert leader_settings(loaded, loaded.replicas[0].id, frozenset()).session_full_look_s == 600


def test_a_worker_whose_kill_grace_outlasts_the_fence_window_is_refused(tmp_path: Path) -> None:
    from worker.config import WorkerConfigError
    from worker.config import load as load_worker

    (tmp_path / "cluster.toml").write_text(GOOD + "\n[hosts]\nunknown_timeout_s = 20\nfence_s = 15\n")
    worker = tmp_path / "worker.toml"
    worker.write_text('cluster_config = "cluster.toml"\nname = "n1"\nkill_grace_s = 5\ninsecure = true\n')
    with pytest.raises(WorkerConfigError, match=r"kill_grace_s 5 \+ the cluster's \[hosts\] fence_s 15"):
        load_worker(worker)


def test_a_metrics_address_must_be_host_and_port(tmp_path: Path) -> None:
    from worker.config import WorkerConfigError
    from worker.config import load as load_worker

    text = GOOD.replace('raft = "127.0.0.1:7202"', 'raft = "127.0.0.1:7202"\nmetrics = "127.0.0.1:9102"')
    assert config.load(write(tmp_path, text)).replicas[1].metrics == "127.0.0.1:9102"
    bad = GOOD.replace('raft = "127.0.0.1:7202"', 'raft = "127.0.0.1:7202"\nmetrics = "everywhere"')
    assert "replica 2: metrics is HOST:PORT, not 'everywhere'" in load_error(tmp_path, bad)
    (tmp_path / "cluster.toml").write_text(GOOD)
    worker = tmp_path / "worker.toml"
    worker.write_text('cluster_config = "cluster.toml"\nname = "n1"\ninsecure = true\nmetrics = "x:99999"\n')
    with pytest.raises(WorkerConfigError, match="metrics is HOST:PORT"):
        load_worker(worker)


def test_raft_settings_pysyncobj_would_refuse_are_a_clear_error() -> None:
    from controller.raft import RaftSettings

    with pytest.raises(ValueError, match="leader_lost_s"):
        RaftSettings(leader_lost_s=-1.0).check()
    slow = RaftSettings(election_min_s=3.0, election_max_s=3.2)  # the default connection timeout: 3.5 s
    slow.check_voters(3)  # the latest window: 3.2 + 2 x 0.15
    with pytest.raises(ValueError, match="connection_timeout_s"):
        slow.check_voters(5)  # 3.2 + 4 x 0.15: pysyncobj would assert at start
