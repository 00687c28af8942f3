"""-W run limits and -We estimates at submit (entry format 14): checked by apply, refused by the
leader until every replica reads them. Pure."""

from __future__ import annotations

import pytest

from controller.fsm.validation import MAX_RUN_LIMIT_S, check_min_slots_known
from tests.unit.test_unit_allocation import State
from xce.errors import ServiceError
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log


def submit(state: State, format_: int, **spec: int) -> log.Result:
    request = api.SubmitJobsRequest(request_id=f"r{state.index}", jobs=[api.JobSpec(command=["x"], **spec)])
    return state.apply(log.Entry(submit=log.SubmitBatch(requests=[request])), format_)


def test_a_run_limit_and_an_estimate_are_kept_and_bad_ones_refused() -> None:
    state = State()
    kept = submit(state, 14, run_limit_s=3600, estimate_s=600)
    assert kept.code == log.OK
    job = state.job(int(kept.job_ids[0]))
    assert (job.spec.run_limit_s, job.spec.estimate_s) == (3600, 600)
    for bad in ({"run_limit_s": -1}, {"estimate_s": MAX_RUN_LIMIT_S + 1}):
        refused = submit(state, 14, **bad)
        assert refused.code == log.INVALID_ARGUMENT and "from 0 (none) to ten years" in refused.message


def test_the_leader_refuses_w_until_every_replica_reads_it() -> None:
    with pytest.raises(ServiceError, match="-W and -We need every replica at entry format 14"):
        check_min_slots_known(api.JobSpec(command=["x"], run_limit_s=60), 13)
    check_min_slots_known(api.JobSpec(command=["x"], run_limit_s=60), 14)
