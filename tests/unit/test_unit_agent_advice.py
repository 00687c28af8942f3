"""The MCP tools' reasoning (gateway/agent_advice.py), pure: templates, failure analysis, resource
suggestions, pending reasons and the wait estimate through the simulator."""

from __future__ import annotations

import pytest

from gateway import agent_advice as advice


def test_templates_make_the_specs_an_operator_would_write() -> None:
    assert advice.job_spec(["echo", "hi"]) == {"command": ["echo", "hi"]}
    assert advice.job_spec(["omp"], "multi_core", slots=8, mem_mb=2000, run_limit_s=600, queue="short") == {
        "command": ["omp"], "slots": 8, "resource_req": "span[hosts=1]", "mem_limit_mb": 2000,
        "run_limit_s": 600, "queue": "short"}
    assert advice.job_spec(["big"], "high_memory", mem_mb=64000)["resource_req"] == "rusage[mem=64000]"
    for args, words in ((("x", "gpu_magic"), "unknown template 'gpu_magic': one of general_serial"),
                        (("x", "general_serial", 4), "one slot"), (("x", "high_memory"), "needs mem_mb")):
        with pytest.raises(ValueError, match=words):
            advice.job_spec([args[0]], *args[1:])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty list"):
        advice.job_spec([])


def job(state: str, **fields: object) -> dict[str, object]:
    return {"id": "7", "state": state, "spec": {"command": ["prog"], **fields.pop("spec", {})}, **fields}  # type: ignore[dict-item]


@pytest.mark.parametrize("record, cause, suggestion", [
    (job("EXIT", exit_reason="MEMLIMIT", exit_code=137, term_signal=9, usage={"max_rss_kb": str(300 << 10)},
         spec={"mem_limit_mb": "100"}),
     "killed for memory: its processes reached 300 MB, over its limit of 100 MB", "mem_mb 500"),
    (job("EXIT", exit_reason="RUNLIMIT", start_time_ms="1000", end_time_ms="61000",
         spec={"run_limit_s": "60"}),
     "killed at its run limit: it ran 60 s, its limit is 60 s", "run_limit_s 120"),
    (job("EXIT", exit_code=127), "the command was not found", "PATH"),
    (job("EXIT", exit_code=1, exit_reason="OUTPUT_FILE", start_error="output file /x/o: denied (on h1)"),
     "it never ran: its owner cannot open its output file, however often it was tried (output file /x/o",
     "requeue"),
    (job("EXIT", term_signal=15), "signal 15 (SIGTERM) after a kill", None),
    (job("EXIT", exit_code=139), "signal 11 (SIGSEGV)", None),
    (job("EXIT", exit_status_unknown=True), "its host was lost", "rerunnable"),
    (job("EXIT", exit_code=3), "exited with code 3: its own error", None),
    (job("DONE"), "it did not fail", None),
    (job("PEND", pending_reason="no host has 4 free slots"), "it has not ended: it is PEND (no host", None),
])
def test_a_failure_is_explained_from_its_record(record: dict[str, object], cause: str,
                                                suggestion: str | None) -> None:
    found = advice.explain_failure(record)
    assert cause in " ".join(found["causes"])
    if suggestion:
        assert suggestion in " ".join(found["suggestions"])


def finished(program: str, rss_mb: int, run_s: int, slots: int = 1, state: str = "DONE") -> dict[str, object]:
    return {"state": state, "spec": {"command": [f"/opt/bin/{program}", "x"], "slots": slots},
            "start_time_ms": "1000", "end_time_ms": str(1000 + run_s * 1000),
            "usage": {"max_rss_kb": str(rss_mb << 10)}}


def test_resources_are_suggested_from_the_same_program_s_history() -> None:
    history = [finished("sim", 100 * i, 10 * i) for i in range(1, 21)] + [finished("other", 9000, 9000)]
    found = advice.suggest_resources(history, ["sim", "--big"])
    assert found["based_on"] == 20 and found["slots"] == 1
    assert found["mem_mb"] == 2400  # p95 1900 MB x1.25 = 2375, up to 100 MB
    assert found["run_limit_s"] == 300  # p95 190 s x1.5 = 285, up to a minute
    none = advice.suggest_resources(history, ["new-program"])
    assert none["based_on"] == 0 and none["mem_mb"] is None and "no finished job" in none["why"]
    # a Slurm job submitted as a script: no command kept, its name says the program
    scripted = [{**finished("x", 500, 60), "spec": {"name": "sim", "slots": 4}} for _ in range(3)]
    found = advice.suggest_resources(scripted, ["/opt/sim"])
    assert (found["based_on"], found["slots"], found["mem_mb"]) == (3, 4, 700)


def test_pending_jobs_are_grouped_by_reason() -> None:
    jobs = [{"id": str(i), "state": "PEND", "pending_code": code, "pending_reason": f"why {code}"}
            for i, code in enumerate(["PEND_NO_HOST", "PEND_NO_HOST", "PEND_JOB_HELD"])]
    jobs.append({"id": "9", "state": "RUN"})
    summary = advice.pending_summary(jobs)
    assert summary["pending"] == 3
    assert [(g["code"], g["jobs"], g["reason"]) for g in summary["by_reason"]] == [
        ("PEND_NO_HOST", 2, "why PEND_NO_HOST"), ("PEND_JOB_HELD", 1, "why PEND_JOB_HELD")]


def test_the_wait_is_estimated_by_simulating_the_cluster_now() -> None:
    hosts = [{"spec": {"name": "h1", "slots": 2}, "status": "HOST_OK"},
             {"spec": {"name": "h2", "slots": 2}, "status": "HOST_DOWN"}]
    queues = [{"name": "normal", "priority": 30}]
    now = 1_800_000_000_000
    running = [{"id": "1", "state": "RUN", "start_time_ms": str(now - 100_000),
                "spec": {"queue": "normal", "slots": 2, "run_limit_s": "400", "user": "a"}}]
    pending = [{"id": "2", "state": "PEND", "spec": {"queue": "normal", "slots": 2, "estimate_s": "50",
                                                     "user": "b"}}]
    found = advice.estimate_wait(hosts, queues, running + pending, {"command": ["x"], "slots": 1}, now)
    # Job 1 has 300 s left on the only host up; job 2 (first in line) runs 50 s after it; then this one.
    assert found["start_in_s"] == 350 and found["hosts"] == 1 and found["assumed"]
    alone = advice.estimate_wait(hosts, queues, [], {"command": ["x"]}, now)
    assert alone["start_in_s"] == 0
    assert advice.estimate_wait([], queues, [], {"command": ["x"]}, now)["start_in_s"] is None
