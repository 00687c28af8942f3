"""What the gateway asks of a cluster that is not its own: the backend interface.

A backend serves one cluster of the gateway's clusters file (registry.py) for callers the local
XCE cluster has proven (their key's user name, `Caller`). It answers in XCE's words: each job an
`api.Job` (state, pending reason, exit code and signal, times, hosts), mapped from the backend's
own by one table per backend (slurm_words.py, lsf_words.py); the backend's own words ride along
(`Native`) so nothing is lost in the mapping. So the same routes, filters, renderings and agent
advice serve every cluster.

A backend names what it can do (`supports`); asked anything else it says so (`Unsupported`: 501
with why), never pretends. The calls are blocking (a subprocess, an HTTP request): the routes run
them in the thread pool.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from gateway.problems import Problem
from xce.v1 import api_pb2 as api

# What a backend may support. control.* are the actions of POST .../actions.
OPERATIONS = ("submit", "list", "get", "control.kill", "control.stop", "control.resume", "control.hold",
              "control.release", "control.requeue", "output", "hosts", "queues", "history", "events")


@dataclass(frozen=True)
class Caller:
    """Who asks: the user the local cluster proved the key to be (its name is the user's name on the
    other cluster too: one site, one directory of users)."""

    user: str


@dataclass
class Native:
    """A job's own words on its cluster, beside XCE's: its id, state and reason as that cluster
    says them."""

    id: str
    state: str
    reason: str = ""
    exit: str = ""


@dataclass
class ForeignJob:
    job: api.Job
    native: Native


@dataclass
class Output:
    data: bytes
    size: int
    host: str = ""


@dataclass
class Health:
    ok: bool
    detail: str
    extra: dict[str, str] = field(default_factory=dict)


class Unsupported(Problem):
    def __init__(self, cluster: str, kind: str, what: str, why: str) -> None:
        super().__init__(501, f"cluster {cluster} ({kind}) cannot {what}: {why}")


class ClusterBackend(ABC):
    """One cluster the gateway relays to. `name`: its name in the clusters file; `kind`: slurm, lsf."""

    kind = ""
    supports: frozenset[str] = frozenset()

    def __init__(self, name: str) -> None:
        self.name = name

    def unsupported(self, what: str, why: str) -> Unsupported:
        return Unsupported(self.name, self.kind, what, why)

    @abstractmethod
    def health(self) -> Health: ...

    def check(self, spec: api.JobSpec) -> None:
        """Refuse a spec this backend cannot submit as it is (a dry run asks this alone)."""
        spec_fields(spec, self.taken, self.name, self.kind)
        if not spec.command:
            raise Problem(400, "a job needs its command")

    taken: frozenset[str] = frozenset()  # the spec's fields it submits

    @abstractmethod
    def submit(self, caller: Caller, spec: api.JobSpec) -> ForeignJob: ...

    @abstractmethod
    def jobs(self, caller: Caller) -> list[ForeignJob]:
        """The jobs the cluster shows now (live and recently finished), every user's it lets `caller` see."""

    @abstractmethod
    def job(self, caller: Caller, job_id: str) -> ForeignJob: ...

    @abstractmethod
    def control(self, caller: Caller, job_id: str, action: str) -> ForeignJob: ...

    def output(self, caller: Caller, job_id: str, stderr: bool, tail: int) -> Output:
        raise self.unsupported("read a job's output", "it has no way to read one")

    @abstractmethod
    def hosts(self, caller: Caller) -> list[api.Host]: ...

    @abstractmethod
    def queues(self, caller: Caller) -> list[api.Queue]: ...

    def history(self, caller: Caller) -> list[ForeignJob]:
        """Finished jobs, as far as the cluster keeps them."""
        return [found for found in self.jobs(caller) if found.job.state in (api.DONE, api.EXIT)]

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "backend": self.kind, "supports": sorted(self.supports),
                "cannot": [op for op in OPERATIONS if op not in self.supports]}


def spec_fields(spec: api.JobSpec, taken: frozenset[str], cluster: str, kind: str) -> None:
    """Refuse a spec that sets what the backend cannot submit: nothing the caller asked is dropped."""
    extra = sorted(f.name for f, _ in spec.ListFields() if f.name not in taken)
    if extra:
        raise Problem(400, f"cluster {cluster} ({kind}) does not take {', '.join(extra)} "
                           f"(it takes {', '.join(sorted(taken))})")
