"""The leader's own duties on a timer: the configuration push, the host watchdog, load commits.

The configuration push: once a new leader caught up, it proposes the cluster
file's configuration if the committed one differs (as far as the entry format
in use carries it), and serves once that is settled; nothing is proposed when
the committed state already matches, so a restart of the whole cluster leaves
the revision where it was. After an announcement commits, settings that wait
for a newer format may apply: the push is looked at again.

The watchdog (watchdog.py) proposes the hosts whose heartbeats stopped as
unavailable, then lost. Load indices heard in heartbeats are committed at most
every `load_commit_s` per host (load_commits.py), once every replica applies them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from controller import fsm
from controller.fsm import versions
from controller.leader.context import LeaderContext, logger, per_request
from controller.leader.leadership import Leadership
from controller.watchdog import Change
from xce.v1 import api_pb2 as api
from xce.v1 import log_pb2 as log

CONFIG_RETRY_S = 0.05


class Upkeep:
    def __init__(self, ctx: LeaderContext) -> None:
        self.ctx = ctx

    def configure(self, leadership: Leadership, now: float) -> bool:
        """Propose the configuration once this leader is caught up, if it changed; False: not
        looked at yet (not caught up, a push in flight or to be retried later)."""
        ctx, upkeep = self.ctx, leadership.upkeep
        if not ctx.consensus.caught_up() or upkeep.config_in_flight or now < upkeep.config_retry_s:
            return False
        init = ctx.settings.init
        with ctx.state.read() as tables:
            meta = fsm.read_meta(tables)
            voters = ctx.voter_ids(tables)
        if config_current(meta, init, voters):
            self._configured(leadership)
            return True
        upkeep.config_in_flight = True

        def done(results: list[log.Result] | None) -> None:
            upkeep.config_in_flight = False
            if results is None:
                upkeep.config_retry_s = ctx.clock.monotonic_s() + CONFIG_RETRY_S
                return
            if results[0].code != log.OK:
                logger.error("configuration push rejected: %s", results[0].message)
            self._configured(leadership)

        ctx.propose(log.Entry(init=init), done)
        return True

    def reconfigure(self, leadership: Leadership, now: float) -> None:
        """Push again if an announcement asked for it (settings that wait for a newer format)."""
        if leadership.upkeep.reconfigure and self.configure(leadership, now):
            leadership.upkeep.reconfigure = False

    @staticmethod
    def _configured(leadership: Leadership) -> None:
        if not leadership.upkeep.configured:
            leadership.upkeep.configured = True
            logger.info("serving (leadership %d)", leadership.number)

    def commit_loads(self, leadership: Leadership, now: float) -> None:
        """The load indices due (load_commits.py), once every replica applies `host_loads`."""
        loads = leadership.upkeep.loads
        if now < loads.next_s:
            return
        ctx = self.ctx
        if ctx.settings.load_commit_s > 0:
            with ctx.state.read() as tables:
                if not ctx.enabled(tables, "host_loads"):
                    loads.next_s = now + ctx.settings.capability_poll_s
                    return
        sent = loads.due(now)
        if not sent:
            return

        def done(results: list[log.Result] | None) -> None:
            codes = [r.code if r is not None else None for r in per_request(results, len(sent))]
            loads.settled(sent, codes, ctx.clock.monotonic_s())

        ctx.propose(log.Entry(host_loads=log.HostLoads(loads=sent)), done)

    def tick_reservations(self, leadership: Leadership) -> None:
        """A tick when the next begin or end of an advance reservation came (controller/fsm/
        reservations.py): apply begins or ends them at the tick's time."""
        upkeep, ctx = leadership.upkeep, self.ctx
        if upkeep.reservation_tick_in_flight:
            return
        with ctx.state.read() as tables:
            due = fsm.read_meta(tables).next_reservation_ms
            if not due or ctx.clock.now_ms() < due or not ctx.enabled(tables, "reservation"):
                return
        upkeep.reservation_tick_in_flight = True

        def done(results: list[log.Result] | None) -> None:
            upkeep.reservation_tick_in_flight = False

        ctx.propose(log.Entry(reservation=api.PutReservationRequest(tick=True)), done)

    def watch(self, leadership: Leadership, now: float) -> None:
        """The watchdog's proposals, when it is due: hosts gone silent."""
        watchdog = leadership.upkeep.watchdog
        if not watchdog.due(now):
            return
        with self.ctx.state.read() as tables:
            batched = self.ctx.enabled(tables, "host_statuses")
            changes = watchdog.proposals(tables, now, batched)
        for change in changes:
            self.ctx.propose(change.entry, functools.partial(self._watched, leadership, change))

    @staticmethod
    def _watched(leadership: Leadership, change: Change, results: list[log.Result] | None) -> None:
        leadership.upkeep.watchdog.settled(change)
        for (name, generation), result in zip(change.hosts, results or [], strict=False):
            if result.code != log.OK:
                continue
            if change.what == "unavailable":
                logger.warning("host %s (generation %d) missed its heartbeats: UNAVAIL", name, generation)
            else:
                logger.warning("host %s lost: jobs %s requeued or ended", name, list(result.job_ids))


def config_current(meta: log.Meta, init: log.InitCluster, members: Iterable[int]) -> bool:
    """The committed configuration is the file's, as far as the entry format in use carries it."""
    format_ = versions.proposal_format(meta, members)
    return (meta.cluster_id, meta.default_queue, meta.max_slots_per_job, meta.config_digest) == (
        init.cluster_id, init.default_queue, init.max_slots_per_job, init.config_digest) \
        and (format_ < versions.HISTORY_FORMAT
             or (meta.clean_period_ms, meta.history_retention_ms)
             == (init.clean_period_ms, init.history_retention_ms)) \
        and (format_ < versions.RESOURCES_FORMAT or meta.resources_digest == init.resources_digest) \
        and (format_ < versions.LIMITS_FORMAT or meta.limits_digest == init.limits_digest) \
        and (format_ < versions.USER_GROUP_FORMAT or meta.user_groups_digest == init.user_groups_digest)
