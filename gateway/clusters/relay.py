"""A request for another cluster: who asks, whether they may, the backend's answer in XCE's shapes,
and the audit row.

The local XCE cluster proves every caller (WhoAmI with the request's key, remembered for a few
seconds) and keeps the audit trail of what they do elsewhere (RecordAudit: a row naming the
cluster, under the caller's proven principal). What the key may do is the local cluster's answer
too: its role's permissions (jobs.read, jobs.submit, jobs.control; cluster.read for hosts and
queues), its scope (clusters, actions, queues, users; a scope that bounds unfinished jobs or slots
cannot be kept on a cluster whose jobs XCE does not count, so such a key does not submit there),
and, with private_jobs, only the caller's own jobs. Then the other cluster decides as it would for
that user at a shell.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from google.protobuf import json_format

from client.channel import Client, XceError
from gateway import render
from gateway.clusters.backend import Caller, ClusterBackend, ForeignJob, Output
from gateway.problems import Problem
from xce import job_filter
from xce.v1 import api_pb2 as api

T = TypeVar("T")
REMEMBER_S = 5.0
DEFAULT_PAGE = 500  # jobs listed when the request names no page_size (as the controllers' ListJobs)
LIMIT_PER_CLUSTER = 8  # of the gateway's threads, what one other cluster's calls may hold at once
_limiters: dict[str, anyio.CapacityLimiter] = {}


def limiter_of(cluster: str) -> anyio.CapacityLimiter:
    """The cluster's own bound on threads (made in the event loop's thread, as anyio wants)."""
    if cluster not in _limiters:
        _limiters[cluster] = anyio.CapacityLimiter(LIMIT_PER_CLUSTER)
    return _limiters[cluster]
log = logging.getLogger("xce.gateway")
ACTION_PERMISSION = {"submit": "jobs.submit", "modify": "jobs.modify"}  # the rest: jobs.control
# Who may act on everyone's jobs may act on their own.
IMPLIED = {"jobs.control": "jobs.control.all", "jobs.modify": "jobs.modify.all", "jobs.read": "jobs.read.all"}


@dataclass(frozen=True)
class Who:
    name: str
    role: str
    permissions: frozenset[str]
    sees_every_job: bool
    scope: api.TokenScope | None


LocalCall = Callable[[Callable[[Client], Any]], Awaitable[Any]]


class Relay:
    """One request's dealings with cluster `backend` on behalf of the key `local` calls with."""

    def __init__(self, backend: ClusterBackend, who: Who, local: LocalCall,
                 fresh: Callable[[], Awaitable[Who]]) -> None:
        self.backend = backend
        self.who = who
        self.local = local
        self.fresh = fresh
        self.caller = Caller(who.name)

    # ------------------------------------------------------------ checks

    def _may(self, permission: str, what: str) -> None:
        if permission not in self.who.permissions and IMPLIED.get(permission) not in self.who.permissions:
            raise Problem(403, f"{self.who.name} (role {self.who.role}) may not {what} on cluster "
                               f"{self.backend.name}: needs {permission}", "PERMISSION_DENIED")

    def _supported(self, operation: str, what: str) -> None:
        if operation not in self.backend.supports:
            raise self.backend.unsupported(what, "its backend has no way to")

    def _in_scope(self, action: str, queue: str = "", owner: str = "") -> None:
        scope = self.who.scope
        if scope is None:
            return
        why = ""
        if action and scope.actions and action not in scope.actions:
            why = f"{action} is not among its actions ({', '.join(scope.actions)})"
        elif scope.queues and queue not in scope.queues:  # (a submit naming none: the cluster's default)
            why = (f"queue {queue!r} is not among its queues ({', '.join(scope.queues)})" if queue else
                   f"it names no queue, and the cluster's default may not be among its queues "
                   f"({', '.join(scope.queues)}): name one")
        elif scope.users and owner not in scope.users:
            why = f"the job's owner {owner!r} is not among its users ({', '.join(scope.users)})"
        elif action == "submit" and (scope.max_jobs or scope.max_slots):
            why = (f"its max_jobs and max_slots cannot be kept on {self.backend.name}, whose jobs XCE "
                   "does not count")
        if why:
            raise Problem(403, f"outside the scope of this key ({self.who.name}): {why}", "PERMISSION_DENIED")

    async def _run(self, work: Callable[[], T]) -> T:
        """`work` in a thread, at most LIMIT_PER_CLUSTER at once for this cluster (a hung one holds no
        more of the pool the local cluster's calls need); what its answers could not be read as is 502."""
        try:
            return await anyio.to_thread.run_sync(work, limiter=limiter_of(self.backend.name))
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as exc:
            log.warning("cluster %s answered what cannot be read: %r", self.backend.name, exc)
            raise Problem(502, f"cluster {self.backend.name} answered what the gateway cannot read "
                               f"({type(exc).__name__})") from None

    # ------------------------------------------------------------ reads

    def _visible(self, found: ForeignJob) -> bool:
        return self.who.sees_every_job or found.job.spec.user == self.who.name

    async def jobs(self, filters: list[str], page_size: int, finished: bool = False) -> dict[str, Any]:
        self._may("jobs.read", "list jobs")
        self._supported("history" if finished else "list", "list jobs")
        try:
            wanted = [job_filter.parse(f) for f in filters]
        except job_filter.FilterError as exc:
            raise Problem(400, str(exc)) from None
        found = await self._run(lambda: self.backend.history(self.caller) if finished else
                                self.backend.jobs(self.caller))
        shown = [self.shown(f) for f in found if self._visible(f) and job_filter.matches_all(wanted, f.job)]
        shown.sort(key=lambda j: int(j.get("id", 0)), reverse=finished)
        size = page_size or DEFAULT_PAGE
        return {"jobs": shown[:size], "next_page_token": "", "revision": "0", "cluster": self.backend.name,
                "more": len(shown) > size}

    async def job(self, job_id: str) -> dict[str, Any]:
        self._may("jobs.read", "read jobs")
        self._supported("get", "read a job")
        found = await self._run(lambda: self.backend.job(self.caller, job_id))
        if not self._visible(found):
            raise Problem(404, f"cluster {self.backend.name}: no job {job_id}")
        return self.shown(found)

    async def output(self, job_id: str, stderr: bool, tail: int) -> Output:
        """As on the local cluster: its owner's, or with jobs.env.all; inside a scoped key's queues
        and users. (The file is read as the caller, so the other cluster's permissions hold too.)"""
        self._may("jobs.read", "read job output")
        self._supported("output", "read a job's output")
        spec = (await self.job(job_id)).get("spec", {})  # a job hidden by private_jobs has no output either
        owner = spec.get("user", "")
        if owner != self.who.name and "jobs.env.all" not in self.who.permissions:
            raise Problem(403, f"{self.who.name} may not read the output of {owner}'s job: needs "
                               "jobs.env.all", "PERMISSION_DENIED")
        self._in_scope("", spec.get("queue", ""), owner)
        return await self._run(lambda: self.backend.output(self.caller, job_id, stderr, tail))

    async def hosts(self) -> dict[str, Any]:
        self._may("cluster.read", "list hosts")
        self._supported("hosts", "list hosts")
        found = await self._run(lambda: self.backend.hosts(self.caller))
        return {"hosts": render.messages(found), "cluster": self.backend.name}

    async def queues(self) -> dict[str, Any]:
        self._may("cluster.read", "list queues")
        self._supported("queues", "list queues")
        found = await self._run(lambda: self.backend.queues(self.caller))
        return {"queues": render.messages(found), "default_queue": found[0].name if found else "",
                "cluster": self.backend.name}

    def shown(self, found: ForeignJob) -> dict[str, Any]:
        out = render.message(found.job)
        out["cluster"] = self.backend.name
        out["native"] = {"id": found.native.id, "state": found.native.state, "reason": found.native.reason,
                         "exit": found.native.exit}
        return out

    # ------------------------------------------------------------ writes

    async def submit(self, specs: list[api.JobSpec], dry_run: bool) -> dict[str, Any]:
        if len(specs) != 1:
            raise Problem(400, f"cluster {self.backend.name} takes one job per request")
        spec = specs[0]
        shown = api.JobSpec()
        shown.CopyFrom(spec)
        for name in list(shown.env):  # environment values stay out of the trail (names kept), as locally
            shown.env[name] = ""
        params = json_format.MessageToJson(shown, preserving_proto_field_name=True, indent=None,
                                           sort_keys=True)
        await self._checked_write("submit", params, spec.queue, self.who.name, "submit jobs")
        self.backend.check(spec)
        if dry_run:
            what = spec.name or " ".join(spec.command)[:60]
            words = f"would submit job {what!r} to cluster {self.backend.name}"
            await self._record("submit", params, api.DRY_RUN, words)
            return {"dry_run": words, "jobs": [render.message(api.Job(spec=spec))]}
        found = await self._acted("submit", params, lambda: self.backend.submit(self.caller, spec))
        return {"jobs": [self.shown(found)], "revision": "0"}

    async def control(self, job_id: str, action: str, dry_run: bool) -> dict[str, Any]:
        params = json.dumps({"job_id": job_id, "action": action})
        self._supported(f"control.{action}", action + " a job")
        # The job is read to check its owner and queue whatever the key may read; it is shown only
        # to one that may.
        found = await self._run(lambda: self.backend.job(self.caller, job_id))
        current = self.shown(found) if self.who.permissions & {"jobs.read", "jobs.read.all"} else {}
        spec = {"queue": found.job.spec.queue, "user": found.job.spec.user}
        await self._checked_write(action, params, spec.get("queue", ""), spec.get("user", ""),
                                  action + " jobs")
        if dry_run:
            now = current.get("state", "?")
            words = f"would {action} job {job_id} on cluster {self.backend.name} (now {now})"
            await self._record(action, params, api.DRY_RUN, words)
            return {"dry_run": words, "job": current}
        found = await self._acted(action, params, lambda: self.backend.control(self.caller, job_id, action))
        return self.shown(found)

    async def _checked_write(self, action: str, params: str, queue: str, owner: str, what: str) -> None:
        """The permission and scope of a write, a refusal recorded before it is answered. The key is
        asked of the local cluster again, not remembered: a key revoked a moment ago writes nothing."""
        self.who = await self.fresh()
        try:
            self._may(ACTION_PERMISSION.get(action, "jobs.control"), what)
            self._in_scope(action, queue, owner)
            if owner and owner != self.who.name and "jobs.control.all" not in self.who.permissions \
                    and action != "submit":
                raise Problem(403, f"{self.who.name} may not {action} {owner}'s jobs: needs jobs.control.all",
                              "PERMISSION_DENIED")
        except Problem as refusal:
            await self._record(action, params, api.REFUSED, f"PERMISSION_DENIED: {refusal.detail}")
            raise

    async def _acted(self, action: str, params: str, work: Callable[[], ForeignJob]) -> ForeignJob:
        try:
            found = await self._run(work)
        except Problem as refusal:
            if refusal.status < 500:
                await self._record(action, params, api.CONFIRMED, f"{refusal.code}: {refusal.detail}")
            raise
        await self._record(action, params, api.CONFIRMED, f"OK: {found.native.id}")
        return found

    async def _record(self, action: str, params: str, outcome: api.AuditOutcome, result: str) -> None:
        row = api.RecordAuditRequest(cluster=self.backend.name, action=action, params=params[:2048],
                                     outcome=outcome, result=result[:1000])
        try:
            await self.local(lambda c: c.call("AdminService", "RecordAudit", row, api.RecordAuditResponse))
        except XceError as exc:  # the action stands; the gateway's log says what the trail lacks
            log.error("audit row of %s on %s for %s not recorded: %s", action, self.backend.name,
                      self.who.name, exc.message)


class Callers:
    """Who a key is, as the local cluster says (WhoAmI), remembered for REMEMBER_S by the key's digest."""

    def __init__(self, most: int = 1024) -> None:
        self.most = most
        self._known: OrderedDict[str, tuple[float, Who]] = OrderedDict()

    async def who(self, key: str, local: LocalCall, fresh: bool = False) -> Who:
        digest = hashlib.sha256(key.encode()).hexdigest()
        now = time.monotonic()
        known = self._known.get(digest)
        if known is not None and now - known[0] < REMEMBER_S and not fresh:
            return known[1]
        me = await local(lambda c: c.who_am_i())
        who = Who(me.name, me.role, frozenset(me.permissions), me.sees_every_job,
                  me.scope if me.HasField("scope") else None)
        self._known[digest] = (now, who)
        self._known.move_to_end(digest)
        while len(self._known) > self.most:
            self._known.popitem(last=False)
        return who
