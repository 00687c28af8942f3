"""The audit trail and scoped keys (G6, G7), pure: apply's rows (controller/fsm/audit.py),
the leader's helpers (controller/audit_trail.py) and the scope checks (controller/authz.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from controller import audit_trail, authz, fsm
from controller.fsm import audit
from controller.fsm.versions import AUDIT_FORMAT, FOREIGN_AUDIT_FORMAT, KEYED_AUDIT_FORMAT
from controller.tables import MemoryTables
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

STAMP = 1_700_000_000_000
ANN = log.Principal(name="ann", role="mcp_operator", via="token")


class State:
    def __init__(self, format_: int = AUDIT_FORMAT) -> None:
        self.tables, self.index, self.format = MemoryTables(), 0, format_
        self.step(log.Entry(init=log.InitCluster(cluster_id="demo", config_digest="d", default_queue="normal",
                                                 queues=[api.Queue(name="normal"), api.Queue(name="gpu")])))

    def step(self, entry: log.Entry) -> list[log.Result]:
        self.index += 1
        entry.stamp_ms, entry.format = STAMP + self.index, self.format
        results = fsm.apply(self.tables, self.index, entry.SerializeToString())
        assert results is not None
        return results

    def rows(self) -> list[api.AuditRecord]:
        """Every row, oldest first."""
        return audit.read(self.tables, "", 0, 1_000_000, "")[0][::-1]


def noted(request: object, method: str, dry_run: bool = False) -> api.AuditRequest:
    request.audit.CopyFrom(api.AuditRequest(via="rest", dry_run=dry_run))  # type: ignore[attr-defined]
    note = audit_trail.prepare(method, request, authz.Principal("ann", "mcp_operator"), AUDIT_FORMAT)
    assert note is not None
    return note


def test_an_audited_write_writes_its_row_beside_its_changes() -> None:
    state = State()
    submit = api.SubmitJobsRequest(request_id="r1", jobs=[api.JobSpec(command=["sleep", "1"], user="ann")])
    noted(submit, "SubmitJobs")
    plain = api.SubmitJobsRequest(request_id="r2", jobs=[api.JobSpec(command=["true"], user="bob")])
    bob = log.Principal(name="bob", role="user")
    state.step(log.Entry(submit=log.SubmitBatch(requests=[submit, plain], by=[ANN, bob])))
    kill = api.ControlJobRequest(job_id="1", action=api.KILL, request_id="r3")
    noted(kill, "ControlJob")
    state.step(log.Entry(control=kill, by=ANN))
    modify = api.ModifyJobRequest(job_id="1", priority=5, request_id="r4")
    noted(modify, "ModifyJob")
    [refused] = state.step(log.Entry(modify=modify, by=ANN))  # the job is over: apply refuses it
    assert refused.code != log.OK
    rows = state.rows()
    assert [(r.principal, r.role, r.via, r.action, r.outcome) for r in rows] == [
        ("ann", "mcp_operator", "mcp", "submit", api.CONFIRMED),
        ("ann", "mcp_operator", "mcp", "kill", api.CONFIRMED),
        ("ann", "mcp_operator", "mcp", "modify", api.CONFIRMED)]  # bob's unaudited submit has none
    assert [r.revision for r in rows] == [2, 3, 4] and rows[0].time_ms == STAMP + 2
    assert '"command": ["sleep", "1"]' in rows[0].params and "r1" not in rows[0].params
    assert rows[0].result == "OK" and rows[2].result.startswith("FAILED_PRECONDITION")
    state.step(log.Entry(control=kill, by=ANN))  # a retry of the same request id: no second row
    assert len(state.rows()) == 3 and state.tables.get("meta", fsm.META_KEY) is not None
    assert fsm.read_meta(state.tables).audit_rows == 3


def test_before_format_16_an_audit_request_writes_nothing() -> None:
    state = State(format_=15)
    submit = api.SubmitJobsRequest(request_id="r1", jobs=[api.JobSpec(command=["x"], user="ann")])
    noted(submit, "SubmitJobs")
    state.step(log.Entry(submit=log.SubmitBatch(requests=[submit], by=[ANN])))
    assert state.rows() == []


def test_dry_runs_and_refusals_are_rows_alone() -> None:
    state = State()
    kill = api.ControlJobRequest(job_id="9", action=api.HOLD)
    note = noted(kill, "ControlJob", dry_run=True)
    before = state.tables.copy()
    ann = authz.Principal("ann", "mcp_operator")
    state.step(audit_trail.entry(note, ann, api.DRY_RUN, "would hold job 9"))
    state.step(audit_trail.entry(note, authz.Principal("eve", "user"), api.REFUSED, "PERMISSION_DENIED: no"))
    rows = state.rows()
    assert [(r.principal, r.action, r.outcome, r.result) for r in rows] == [
        ("ann", "hold", api.DRY_RUN, "would hold job 9"),
        ("eve", "hold", api.REFUSED, "PERMISSION_DENIED: no")]
    assert list(state.tables.scan("jobs")) == list(before.scan("jobs"))  # nothing else changed
    [bad] = state.step(log.Entry(audit=log.AuditEntry(record=api.AuditRecord(outcome=api.CONFIRMED)), by=ANN))
    assert bad.code == log.INVALID_ARGUMENT and len(state.rows()) == 2


def test_the_trail_is_bounded_and_read_newest_first_by_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "DRY_RUNS_KEPT", 10)
    state = State()
    note = api.AuditRequest(via="rest", action="hold", params="{}")
    for i in range(14):
        who = authz.Principal("ann" if i % 2 else "bob", "user")
        state.step(audit_trail.entry(note, who, api.DRY_RUN, f"row {i}"))
    assert [r.result for r in state.rows()] == [f"row {i}" for i in range(4, 14)]
    assert fsm.read_meta(state.tables).audit_dry_rows == 10
    first, token = audit.read(state.tables, "", 0, 4, "")
    second, _ = audit.read(state.tables, "", 0, 4, token)
    assert [r.result for r in first + second] == [f"row {i}" for i in range(13, 5, -1)]
    anns, _ = audit.read(state.tables, "ann", 0, 100, "")
    assert [r.result for r in anns] == [f"row {i}" for i in (13, 11, 9, 7, 5)]
    recent, _ = audit.read(state.tables, "", STAMP + 13, 100, "")  # row i was entry i + 2
    assert [r.result for r in recent] == ["row 13", "row 12", "row 11"]
    with pytest.raises(ServiceError):
        audit.read(state.tables, "", 0, 4, "zz")


def test_params_are_cut_and_exclude_the_request_id() -> None:
    request = api.SubmitJobsRequest(request_id="secret-id", jobs=[api.JobSpec(command=["x" * 10_000])])
    text = audit_trail.params_of(request)
    assert len(text) <= audit.MAX_PARAMS and text.endswith("characters in all)") and "secret-id" not in text
    assert audit_trail.action_of("ControlJob", api.ControlJobRequest(action=api.REQUEUE)) == "requeue"
    scoped = authz.Principal("ann", "user", scope=api.TokenScope(queues=["normal"]))
    unasked = api.ModifyJobRequest(job_id="1", priority=3)
    # a scoped key's writes are always audited
    note = audit_trail.prepare("ModifyJob", unasked, scoped, AUDIT_FORMAT)
    assert note is not None and note.via == "grpc" and note.action == "modify"
    agent = authz.Principal("ann", "mcp_operator", scope=api.TokenScope(queues=["normal"]))
    assert audit_trail.prepare("ModifyJob", unasked, agent, AUDIT_FORMAT).via == "mcp"  # type: ignore[union-attr]


def test_the_relay_a_row_names_comes_from_the_credential_not_the_request() -> None:
    """Any client may put any `via` in its request: an agent's key is mcp whatever it says or
    whichever route it took, no other key is mcp whatever it says, and rest is only what authn
    proved (the route it found); a request's own word is never taken."""
    for role, route, named, expected in (
            ("user", "grpc", "mcp", "grpc"), ("cluster_admin", "rest", "mcp", "rest"),
            ("mcp_operator", "cli", "rest", "mcp"), ("mcp_readonly", "grpc", "", "mcp"),
            ("user", "cli", "rest", "cli"), ("user", "mcp", "x" * 5000, "grpc")):
        request = api.ModifyJobRequest(job_id="1", priority=3, audit=api.AuditRequest(via=named))
        caller = authz.Principal("ann", role, route=route)
        note = audit_trail.prepare("ModifyJob", request, caller, AUDIT_FORMAT)
        assert note is not None and note.via == expected, (role, route, named)
    user = authz.Principal("ann", "user", route="cli", key_id="0123456789abcdef")
    assert audit_trail.prepare("ModifyJob", api.ModifyJobRequest(), user, KEYED_AUDIT_FORMAT - 1) is None
    assert audit_trail.prepare("CreateQueue", api.PutQueueRequest(), user, KEYED_AUDIT_FORMAT - 1) is None
    for method, request in (("ModifyJob", api.ModifyJobRequest()), ("CreateQueue", api.PutQueueRequest())):
        note = audit_trail.prepare(method, request, user, KEYED_AUDIT_FORMAT)
        assert note is not None and (note.via, note.key_id) == ("cli", "0123456789abcdef"), method
    for method in ("AcquireLease", "SubmitDecisions", "GetJobOutput"):  # a daemon's, or a read
        assert audit_trail.prepare(method, api.LeaseRequest(), user, KEYED_AUDIT_FORMAT) is None


def test_a_scope_names_what_it_refuses() -> None:
    scope = api.TokenScope(queues=["normal"], users=["ann"], actions=["submit", "kill"], max_jobs=3,
                           max_slots=8)
    key = authz.Principal("ann", "mcp_operator", scope=scope, key_id="0123abcd")
    authz.check_scope(key, "submit", ["normal"], "ann")
    for action, queues, owner, words in (("hold", ["normal"], "ann", "hold is not among its actions"),
                                         ("kill", ["gpu"], "ann", "queue 'gpu' is not among its queues"),
                                         ("kill", ["normal"], "bob", "owner 'bob' is not among its users")):
        with pytest.raises(ServiceError) as caught:
            authz.check_scope(key, action, queues, owner)
        assert caught.value.code == log.PERMISSION_DENIED and words in caught.value.message
        assert "outside the scope of key 0123abcd (ann)" in caught.value.message
    authz.check_scope_totals(key, 2, 4, 1, 4)
    with pytest.raises(ServiceError, match="max_jobs 3"):
        authz.check_scope_totals(key, 3, 4, 1, 1)
    with pytest.raises(ServiceError, match="max_slots 8"):
        authz.check_scope_totals(key, 1, 6, 1, 4)
    authz.check_scope(authz.Principal("bob", "user"), "hold", ["gpu"], "eve")  # no scope: no fence
    with pytest.raises(ServiceError, match="unknown scope actions fly"):
        authz.check_scope_spec(api.TokenScope(actions=["fly"]))


def test_unfinished_counts_an_array_by_its_elements() -> None:
    state = State()
    array = api.JobSpec(command=["x"], user="ann", slots=2, name="a",
                        array=api.ArraySpec(ranges=[api.IndexRange(start=1, end=5)]))
    jobs = [array, api.JobSpec(command=["y"], user="ann"), api.JobSpec(command=["z"], user="bob")]
    state.step(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(request_id="r", jobs=jobs)],
                                                by=[ANN])))
    assert audit_trail.unfinished(state.tables, "ann") == (6, 11)
    state.step(log.Entry(control=api.ControlJobRequest(job_id="2", action=api.KILL, request_id="k"), by=ANN))
    assert audit_trail.unfinished(state.tables, "ann") == (5, 10)


def test_dry_runs_do_not_push_out_what_was_done_or_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dry runs cost nothing: a user's flood of them must not erase another's refused or confirmed rows."""
    monkeypatch.setattr(audit, "DRY_RUNS_KEPT", 3)
    monkeypatch.setattr(audit, "AUDIT_KEPT", 3)
    state = State()
    note = api.AuditRequest(via="rest", action="kill", params="{}")
    state.step(audit_trail.entry(note, authz.Principal("eve", "user"), api.REFUSED, "kill bob's job"))
    for i in range(20):
        state.step(audit_trail.entry(note, authz.Principal("eve", "user"), api.DRY_RUN, f"dry {i}"))
    rows = state.rows()
    assert [r.result for r in rows] == ["kill bob's job", "dry 17", "dry 18", "dry 19"]
    for i in range(3):
        state.step(audit_trail.entry(note, authz.Principal("ann", "user"), api.REFUSED, f"no {i}"))
    assert [r.result for r in state.rows() if r.outcome == api.REFUSED] == ["no 0", "no 1", "no 2"]
    meta = fsm.read_meta(state.tables)
    assert (meta.audit_rows, meta.audit_dry_rows) == (3, 3)


def test_a_submit_s_environment_values_stay_out_of_the_trail() -> None:
    request = api.SubmitJobsRequest(jobs=[api.JobSpec(command=["x"], env={"TOKEN": "hunter2"})])
    text = audit_trail.params_of(request)
    assert "hunter2" not in text and '"TOKEN": ""' in text
    assert request.jobs[0].env["TOKEN"] == "hunter2"  # the request itself is unchanged
    create = api.CreateTokenRequest(sha256="ab" * 32, user="agent", role="mcp_operator")
    assert "abab" not in audit_trail.params_of(create)


def test_another_cluster_s_row_may_be_confirmed_from_format_25() -> None:
    """The gateway's row of what a caller did on one of its other clusters (RecordAudit): CONFIRMED is
    taken only with a cluster named, and only from entry format 25 (an older replica refuses it)."""
    row = api.AuditRecord(outcome=api.CONFIRMED, action="kill", cluster="hpc", via="mcp", result="OK: 17")
    old = State(format_=FOREIGN_AUDIT_FORMAT - 1)
    [refused] = old.step(log.Entry(audit=log.AuditEntry(record=row), by=ANN))
    assert refused.code == log.INVALID_ARGUMENT and old.rows() == []
    state = State(format_=FOREIGN_AUDIT_FORMAT)
    [taken] = state.step(log.Entry(audit=log.AuditEntry(record=row), by=ANN))
    unnamed = api.AuditRecord(outcome=api.CONFIRMED, action="kill")
    [bad] = state.step(log.Entry(audit=log.AuditEntry(record=unnamed), by=ANN))
    assert taken.code == log.OK and bad.code == log.INVALID_ARGUMENT
    assert [(r.principal, r.cluster, r.action, r.outcome, r.result) for r in state.rows()] == [
        ("ann", "hpc", "kill", api.CONFIRMED, "OK: 17")]


# ---------------------------------------------------------------------- entry format 27: every write, its key

KEY_ID = "0123456789abcdef"
CLI_ANN = authz.Principal("ann", "user", route="cli", key_id=KEY_ID,
                          key_description="ann's laptop\nsecond line")


def prepared(request: object, method: str, caller: authz.Principal = CLI_ANN) -> api.AuditRequest:
    note = audit_trail.prepare(method, request, caller, KEYED_AUDIT_FORMAT)
    assert note is not None
    return note


def test_from_format_27_every_write_is_audited_and_names_its_key() -> None:
    """A plain client's job writes (no note asked for) and its other writes each get one row, in the
    entry of the write: a submit one per request, however many jobs and elements it makes."""
    state = State(format_=KEYED_AUDIT_FORMAT)
    ann = CLI_ANN.record()
    array = api.JobSpec(command=["x"], user="ann",
                        array=api.ArraySpec(ranges=[api.IndexRange(start=1, end=1000)]))
    many = api.SubmitJobsRequest(request_id="s1", jobs=[array] + [api.JobSpec(command=["y"], user="ann")] * 9)
    other = api.SubmitJobsRequest(request_id="s2", jobs=[api.JobSpec(command=["z"], user="bob")])
    prepared(many, "SubmitJobs")
    prepared(other, "SubmitJobs", authz.Principal("bob", "user", key_id="fedcba9876543210"))
    state.step(log.Entry(submit=log.SubmitBatch(requests=[many, other], by=[ann, log.Principal(name="bob")])))
    kill = api.ControlJobRequest(job_id="2", action=api.KILL, request_id="k1")
    prepared(kill, "ControlJob")
    state.step(log.Entry(control=kill, by=ann))
    queue = api.PutQueueRequest(queue=api.Queue(name="short"), request_id="q1")
    entry = log.Entry(put_queue=log.PutQueueEntry(queue=queue.queue, request_id="q1", create=True), by=ann,
                      audit_note=prepared(queue, "CreateQueue"))
    state.step(entry)
    again = log.Entry()
    again.CopyFrom(entry)
    state.step(again)  # the same request id again: its first result, no second row
    rows = state.rows()
    assert [(r.principal, r.via, r.key_id, r.action, r.outcome) for r in rows] == [
        ("ann", "cli", KEY_ID, "submit", api.CONFIRMED),
        ("bob", "grpc", "fedcba9876543210", "submit", api.CONFIRMED),
        ("ann", "cli", KEY_ID, "kill", api.CONFIRMED),
        ("ann", "cli", KEY_ID, "createqueue", api.CONFIRMED)]
    assert rows[0].key_description == "ann's laptop\nsecond line" and rows[0].result == "OK"
    assert rows[3].revision == 4 and '"name": "short"' in rows[3].params
    assert fsm.read_meta(state.tables).audit_rows == 4


def test_a_noted_entry_writes_its_row_only_for_its_kinds_and_from_format_27() -> None:
    """Apply writes an entry's note only where the leader puts one (not for the job writes, whose
    notes are in their requests: no second row) and only from format 27 (older code ignores it)."""
    note = api.AuditRequest(via="cli", action="kill", params="{}", key_id=KEY_ID)
    old = State(format_=KEYED_AUDIT_FORMAT - 1)
    old.step(log.Entry(put_queue=log.PutQueueEntry(queue=api.Queue(name="q"), request_id="q", create=True),
                       by=ANN, audit_note=note))
    assert old.rows() == []
    state = State(format_=KEYED_AUDIT_FORMAT)
    state.step(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="s", jobs=[api.JobSpec(command=["x"], user="ann")])], by=[ANN]), by=ANN, audit_note=note))
    state.step(log.Entry(control=api.ControlJobRequest(job_id="1", action=api.KILL, request_id="k"), by=ANN,
                         audit_note=note))
    state.step(log.Entry(put_queue=log.PutQueueEntry(queue=api.Queue(name="q"), request_id="q", create=True),
                         audit_note=note))  # without its principal: no row
    assert state.rows() == []


def test_before_format_27_no_row_names_a_key() -> None:
    """A note carrying a key (a client may send one) is applied as code before format 27 applied it:
    without the key; and the leader clears what a client put there."""
    state = State(format_=KEYED_AUDIT_FORMAT - 1)
    kill = api.ControlJobRequest(job_id="1", action=api.KILL, request_id="k",
                                 audit=api.AuditRequest(via="rest", key_id="forged", key_description="x"))
    note = audit_trail.prepare("ControlJob", kill, CLI_ANN, KEYED_AUDIT_FORMAT - 1)
    assert note is not None and (note.key_id, note.key_description) == ("", "")
    kill.audit.key_id = "forged"
    state.step(log.Entry(submit=log.SubmitBatch(requests=[api.SubmitJobsRequest(
        request_id="s", jobs=[api.JobSpec(command=["x"], user="ann")])], by=[ANN])))
    state.step(log.Entry(control=kill, by=ANN))
    [row] = state.rows()
    assert (row.action, row.key_id, row.key_description) == ("kill", "", "")


def test_the_bound_holds_for_every_write_s_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain clients' writes fill the same bounded trail: the newest AUDIT_KEPT done or refused rows,
    the dry runs kept apart; each row written prunes at most PRUNE_PER_ROW."""
    monkeypatch.setattr(audit, "AUDIT_KEPT", 5)
    monkeypatch.setattr(audit, "DRY_RUNS_KEPT", 2)
    state = State(format_=KEYED_AUDIT_FORMAT)
    dry = api.ControlJobRequest(job_id="1", action=api.HOLD, audit=api.AuditRequest(dry_run=True))
    state.step(audit_trail.entry(prepared(dry, "ControlJob"), CLI_ANN, api.DRY_RUN, "would hold"))
    for i in range(12):
        submit = api.SubmitJobsRequest(request_id=f"s{i}", jobs=[api.JobSpec(command=["x"], user="ann")])
        prepared(submit, "SubmitJobs")
        state.step(log.Entry(submit=log.SubmitBatch(requests=[submit], by=[CLI_ANN.record()])))
    rows = state.rows()
    assert [r.outcome for r in rows] == [api.DRY_RUN] + [api.CONFIRMED] * 5  # the dry run outlives them
    assert [r.revision for r in rows[1:]] == list(range(10, 15))
    meta = fsm.read_meta(state.tables)
    assert (meta.audit_rows, meta.audit_dry_rows) == (5, 1)
    assert sum(1 for _ in state.tables.scan("audit")) == 6


def test_the_row_s_key_description_is_cut() -> None:
    long = authz.Principal("ann", "user", key_id=KEY_ID, key_description="d" * 5000)
    note = prepared(api.ModifyJobRequest(job_id="1", priority=2), "ModifyJob", long)
    assert len(note.key_description) == audit.MAX_KEY_DESCRIPTION


class _Context:
    """What authn reads of a call: its metadata."""

    def __init__(self, *metadata: tuple[str, str]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata


class _Store:
    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    @contextlib.contextmanager
    def read(self) -> Iterator[MemoryTables]:
        yield self.tables


def test_the_route_is_proven_for_rest_and_only_claimed_for_cli() -> None:
    """rest needs the gateway's own key (role gateway) beside the caller's; `cli` is what the client
    says; anything else (mcp claimed, a user's key as relay, a revoked one) is grpc. The caller and
    its key are the caller's own credential's, whatever rides beside it."""
    from client.credentials import AUTH_METADATA, CLIENT_METADATA, RELAY_METADATA, Credentials, token_hash
    from controller.authn import Authenticator
    from xce.clock import ManualClock

    tables = MemoryTables()
    info = api.TokenInfo(id=token_hash("xce_ann")[:16], user="ann", role="user", description="ann's laptop")
    tables.put("tokens", token_hash("xce_ann").encode(), info.SerializeToString())
    static = {token_hash("xce_gw"): authz.StaticToken("gw", "gateway"),
              token_hash("xce_root"): authz.StaticToken("root", "cluster_admin")}
    authenticator = Authenticator(_Store(tables), ManualClock(), static, {}, munge=False, tls=False)
    ann = (AUTH_METADATA, "Bearer xce_ann")
    for extra, route in (((), "grpc"), (((CLIENT_METADATA, "cli"),), "cli"),
                         (((CLIENT_METADATA, "mcp"),), "grpc"), (((CLIENT_METADATA, "rest"),), "grpc"),
                         (((RELAY_METADATA, "Bearer xce_gw"),), "rest"),
                         (((RELAY_METADATA, "Bearer xce_gw"), (CLIENT_METADATA, "cli")), "rest"),
                         (((RELAY_METADATA, "Bearer xce_root"), (CLIENT_METADATA, "cli")), "cli"),
                         (((RELAY_METADATA, "Bearer xce_revoked"),), "grpc"),
                         (((RELAY_METADATA, "xce_gw"),), "grpc")):
        caller = asyncio.run(authenticator.principal(_Context(ann, *extra)))  # type: ignore[arg-type]
        assert (caller.name, caller.key_id, caller.route) == ("ann", info.id, route), extra
        assert caller.key_description == "ann's laptop"
    root = asyncio.run(authenticator.principal(_Context((AUTH_METADATA, "Bearer xce_root"))))  # type: ignore[arg-type]
    assert root.key_id == token_hash("xce_root")[:16] and "cluster file" in root.key_description
    sent = dict(Credentials(insecure=True, token="xce_ann", relay="xce_gw", client="cli").metadata())
    assert sent == {AUTH_METADATA: "Bearer xce_ann", RELAY_METADATA: "Bearer xce_gw", CLIENT_METADATA: "cli"}
    assert dict(Credentials(insecure=True, token="xce_ann").metadata()) == {AUTH_METADATA: "Bearer xce_ann"}


def test_refusals_are_kept_apart_from_what_was_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """From format 27 anyone's denied write leaves a row, as often as they like: a caller denied in a
    loop pushes out only refusals, never a row of what was done (before 27 they shared one bound)."""
    monkeypatch.setattr(audit, "AUDIT_KEPT", 3)
    monkeypatch.setattr(audit, "REFUSED_KEPT", 2)
    note = api.AuditRequest(via="grpc", action="kill", params="{}")
    for format_, done_left in ((KEYED_AUDIT_FORMAT, 3), (KEYED_AUDIT_FORMAT - 1, 0)):
        state = State(format_=format_)
        for i in range(3):
            submit = api.SubmitJobsRequest(request_id=f"s{i}", jobs=[api.JobSpec(command=["x"], user="ann")])
            prepared(submit, "SubmitJobs")
            state.step(log.Entry(submit=log.SubmitBatch(requests=[submit], by=[CLI_ANN.record()])))
        for i in range(10):
            state.step(audit_trail.entry(note, authz.Principal("eve", "user"), api.REFUSED, f"no {i}"))
        rows = state.rows()
        assert sum(r.outcome == api.CONFIRMED for r in rows) == done_left, format_
        if format_ >= KEYED_AUDIT_FORMAT:
            assert [r.result for r in rows if r.outcome == api.REFUSED] == ["no 8", "no 9"]
            meta = fsm.read_meta(state.tables)
            assert (meta.audit_rows, meta.audit_refused_rows) == (3, 2)
