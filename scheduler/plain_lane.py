"""The plain lane of a pass: the short way for a job that asks for nothing but slots.

Theory of operation. Most jobs of a busy cluster ask for slots alone: no -R,
-m, -x, -U or -n min,max, nothing to wait for (-w, -b, -t, a start's
backoff, a chunk), in a queue without RES_REQ (their digest's `lane`:
scheduler/job_digest.py). In a pass where no limit, backfill order, chunk
or recovery applies (core.py decides), such a job meets no gate but its
queue's (asked once a pass) and the pass's dispatch cap, and its host is
the one with the most free slots, if that has enough: what the general way
(gates.py, host_checks.place) would choose, without reading the job's
fields or building its need. A job that finds no room goes the general way
once per slot count and pass (it may span hosts; else it is explained); its
reason then holds for every such job of the pass, since free slots only
shrink in a pass. Its barrier is apply's check on slots: the job-level checks
of `feasibility.check` can refuse nothing here, so a job that uses no
feature pays for none. A property test holds the lane to the general way,
decision for decision. Pure: no I/O.
"""

from __future__ import annotations

from scheduler import gates, host_checks
from scheduler.job_digest import Digest
from scheduler.pass_state import PassState
from xce.invariant import InvariantViolated
from xce.rules import feasibility


class PlainLane:
    """One pass's plain lane: see the module's docstring."""

    def __init__(self, state: PassState, recount: bool) -> None:
        self._state = state
        self._recount = recount
        self._queues: dict[str, bool] = {}  # whether a queue's jobs may: it is active and has no RES_REQ
        self._no_room: dict[int, feasibility.Reason] = {}  # by slots: the reason a lane job waits, this pass
        self._keeps_no_room = state.fallback is None  # (else a job may preempt where another did not)

    def took(self, made: Digest) -> bool:
        """Whether the lane took the job (`made.lane` slots): dispatched, given its reason, or left
        unexplained. False: the general way decides (its queue refuses it, or the dispatch cap)."""
        state, slots, queue = self._state, made.lane, made.queue
        if (open_ := self._queues.get(queue)) is None:
            open_ = self._queues[queue] = queue not in state.queues_with_req and \
                gates.queue_active(made, state) is None
        if not open_ or state.dispatched >= state.max_dispatches:
            return False
        reason = self._no_room.get(slots)
        if reason is None:
            first = state.index.most_free()
            if first is not None and -first[0] >= slots:  # the host with the most free slots has enough
                name = first[1]
                host = state.usage.states[name]
                if not host.available or host.closed or host.slots - host.used < slots:  # apply's check
                    raise InvariantViolated(f"the host index chose {name} for job {made.id}, which does not "
                                            f"fit there: {feasibility.host_refusal(name, host, slots)}")
                state.placed_plain(made.job, name, host, slots)
                return True
            state.least = state.most = slots
            state.charged = ()
            reason = host_checks.place(made.job, None, state)
            if reason is None:
                return True  # dispatched over several hosts, preempted for, or unexplained
            if self._keeps_no_room:
                self._no_room[slots] = reason
        state.pended(made, reason, self._recount)
        return True
