"""`xce sim ... --interactive`: step a simulation an event or a pass at a time, look at it, keep and
restore its state, and change a policy from any point on.

Commands come from standard input, one a line (a prompt on a terminal; a
script can be piped in), and `help` lists them. What is printed depends only
on the workload, the options and the commands: a session replays the same.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Iterable
from typing import TextIO

from scheduler import backfill
from simulator import engine, report, whatif
from simulator.replay import describe
from xce.v1 import api_pb2 as api

HELP = """\
step [N]           the next N events (default 1), each with the passes after it
pass               one pass now (the clock does not move)
run [SECONDS]      events until the clock reads SECONDS (the workload's time), or to the end
view               the clock, the jobs by state, slots busy, the next event
jobs [N]           the first N pending jobs in the view, with their reasons (default 20)
why JOB            a job's state, where it runs and why it waits
decisions          the last pass's decisions and what apply made of each
snapshot [NAME]    keep the simulated state as NAME (default: s)
restore [NAME]     go back to it (it stays kept)
snapshots          the kept states
set KEY=VALUE      a what-if from now on (keys as --set's)
report             the figures of the jobs ended so far
help, quit
"""


class Session:
    def __init__(self, sim: engine.Engine, out: TextIO) -> None:
        self.sim = sim
        self.sim.begin()  # the cluster, its hosts and queues: before the first event
        self.out = out
        self.kept: dict[str, engine.Engine] = {}
        self._commands: dict[str, Callable[[list[str]], None]] = {
            "step": self.step, "pass": self.one_pass, "run": self.run, "view": self.view, "jobs": self.jobs,
            "why": self.why, "decisions": self.decisions, "snapshot": self.snapshot, "restore": self.restore,
            "snapshots": self.snapshots, "set": self.set, "report": self.report,
            "help": lambda _: self.say(HELP.rstrip()),
        }

    def say(self, line: str) -> None:
        self.out.write(line + "\n")

    def serve(self, lines: Iterable[str], prompt: Callable[[], None] = lambda: None) -> None:
        prompt()
        for line in lines:
            words = shlex.split(line, comments=True) if line.strip() else []
            if words and words[0] in ("quit", "exit"):
                return
            if words:
                command = self._commands.get(words[0])
                if command is None:
                    self.say(f"unknown command {words[0]!r}: {', '.join(sorted(self._commands))}, quit")
                else:
                    try:
                        command(words[1:])
                    except (ValueError, whatif.WhatIfError, engine.SimulationError) as exc:
                        self.say(f"error: {exc}")
            prompt()

    # -------------------------------------------------------------- moving

    def step(self, args: list[str]) -> None:
        count = _count(args, 1)
        done = 0
        while done < count and self.sim.step():
            done += 1
        self.say(f"{done} event(s); {self._clock()}")
        self._summary()

    def one_pass(self, _: list[str]) -> None:
        batch = self.sim.one_pass()
        self.say(f"pass at {self._clock()}: " + (f"{len(batch.decisions)} decision(s)" if batch else
                                                   "nothing to decide"))
        if batch is not None:
            self.decisions([])

    def run(self, args: list[str]) -> None:
        until = None if not args else _ms(args[0])
        events = 0
        while True:
            upcoming = self.sim.next_event_ms()
            if upcoming is None or until is not None and upcoming > until:
                break
            self.sim.step()
            events += 1
        self.say(f"{events} event(s); {self._clock()}" + ("; nothing more happens" if
                                                          self.sim.next_event_ms() is None else ""))
        self._summary()

    # -------------------------------------------------------------- looking

    def view(self, _: list[str]) -> None:
        jobs = self.sim.view.jobs()
        states: dict[str, int] = {}
        for job in jobs:
            if not job.spec.HasField("array"):
                name = api.JobState.Name(job.state)
                states[name] = states.get(name, 0) + 1
        hosts = self.sim.view.hosts()
        total = sum(h.spec.slots for h in hosts)
        busy = sum(h.slots_used for h in hosts)
        upcoming = self.sim.next_event_ms()
        self.say(f"{self._clock()}, revision {self.sim.view.revision}")
        self.say("jobs: " + (", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none") +
                 f"; ended {len(self.sim.result.finished)} of {len(self.sim.workload.jobs)}")
        self.say(f"hosts: {len(hosts)}, slots busy {busy} of {total}")
        for queue in self.sim.view.queues():
            mode = queue.backfill or "any"
            self.say(f"queue {queue.name}: priority {queue.priority}, picker "
                     f"{queue.job_pick_plugin or self.sim.decider.default_picker}, backfill {mode}")
        self.say("next event: " + (f"at {upcoming / 1000:.3f} s" if upcoming is not None else "none"))

    def jobs(self, args: list[str]) -> None:
        count = _count(args, 20)
        pending = [j for j in self.sim.view.jobs() if j.state == api.PEND and not j.spec.HasField("array")]
        for job in pending[:count]:
            self.say(f"job {job.id}: {job.spec.slots} slot(s), {_estimate(job)}, "
                     f"{api.PendingReason.Name(job.pending_code)}: {job.pending_reason or '(no reason yet)'}")
        self.say(f"{len(pending)} pending" + (f" ({count} shown)" if len(pending) > count else ""))

    def why(self, args: list[str]) -> None:
        if len(args) != 1 or not args[0].isdigit():
            raise ValueError("why JOB: a job id")
        job = self.sim.view.job(int(args[0]))
        if job is None:
            ended = [f for f in self.sim.result.finished if f.job_id == int(args[0])]
            if ended:
                f = ended[-1]
                waited, ran = (f.start_ms - f.submit_ms) / 1000, (f.end_ms - f.start_ms) / 1000
                self.say(f"job {f.job_id}: {api.JobState.Name(f.state)}, waited {waited:.3f} s, ran "
                         f"{ran:.3f} s" + (f" ({f.exit_reason})" if f.exit_reason else ""))
                return
            raise ValueError(f"job {args[0]}: not in the view (not yet submitted, or not a job)")
        line = f"job {job.id}: {api.JobState.Name(job.state)}, queue {job.spec.queue}, user " \
               f"{job.spec.user}, {job.spec.slots} slot(s), {_estimate(job)}"
        if job.state == api.PEND:
            line += f"; {api.PendingReason.Name(job.pending_code)}: {job.pending_reason or '(no reason yet)'}"
        elif job.host:
            line += f"; on {', '.join(f'{a.host}:{a.slots}' for a in job.allocation) or job.host}"
        self.say(line)

    def decisions(self, _: list[str]) -> None:
        batch = self.sim.last_batch
        if batch is None:
            self.say("no pass has decided anything yet")
            return
        at = (batch.now_ms - engine.EPOCH_MS) / 1000
        self.say(f"the pass at {at:.3f} s on revision {batch.base_revision}:")
        for i, decision in enumerate(batch.decisions):
            outcome = self.sim.last_outcomes[i] if i < len(self.sim.last_outcomes) else None
            code = api.DecisionRejection.Name(outcome.code) if outcome is not None else "?"
            self.say(f"  {describe(decision)} -> {code}")

    def report(self, _: list[str]) -> None:
        figures = report.report(self.sim.result, self.sim.workload.source, self.sim.workload.notes)
        self.out.write(report.as_text(figures))

    # -------------------------------------------------------------- state

    def snapshot(self, args: list[str]) -> None:
        name = args[0] if args else "s"
        self.kept[name] = self.sim.snapshot()
        self.say(f"kept {name!r} at {self._clock()}")

    def restore(self, args: list[str]) -> None:
        name = args[0] if args else "s"
        if name not in self.kept:
            raise ValueError(f"no snapshot {name!r} (kept: {', '.join(sorted(self.kept)) or 'none'})")
        self.sim = self.kept[name].snapshot()  # the kept one stays as it was
        self.say(f"restored {name!r}: {self._clock()}")

    def snapshots(self, _: list[str]) -> None:
        for name, kept in sorted(self.kept.items()):
            at = (kept.now_ms - engine.EPOCH_MS) / 1000
            self.say(f"{name}: at {at:.3f} s, revision {kept.view.revision}")
        if not self.kept:
            self.say("none kept")

    def set(self, args: list[str]) -> None:
        changes = whatif.parse(args)
        unknown = changes.unknown_queues([q.name for q in self.sim.view.queues()])
        if unknown:
            raise ValueError(f"no such queue: {', '.join(unknown)}")
        changed = self.sim.what_if(changes)
        self.say(f"from {self._clock()}: {'; '.join(args)}" + (f" (queues changed: {', '.join(changed)})"
                                                               if changed else ""))

    # -------------------------------------------------------------- words

    def _clock(self) -> str:
        return f"time {(self.sim.now_ms - engine.EPOCH_MS) / 1000:.3f} s"

    def _summary(self) -> None:
        pending = sum(1 for j in self.sim.view.jobs() if j.state == api.PEND and not j.spec.HasField("array"))
        self.say(f"pending {pending}, ended {len(self.sim.result.finished)} of "
                 f"{len(self.sim.workload.jobs)}, passes {self.sim.result.passes}")


def _count(args: list[str], default: int) -> int:
    if not args:
        return default
    if not args[0].isdigit() or int(args[0]) <= 0:
        raise ValueError(f"{args[0]!r}: a count above 0")
    return int(args[0])


def _ms(seconds: str) -> int:
    try:
        value = float(seconds)
    except ValueError:
        raise ValueError(f"{seconds!r}: seconds from the workload's start") from None
    if not 0 <= value < 10**12:
        raise ValueError(f"{seconds!r}: seconds from the workload's start, 0 or more")
    return int(value * 1000)


def _estimate(job: api.Job) -> str:
    estimate = backfill.estimate_ms(job)
    return f"estimate {estimate // 1000} s" if estimate is not None else "no estimate"


def serve(sim: engine.Engine, stdin: TextIO = sys.stdin, out: TextIO = sys.stdout) -> int:
    session = Session(sim, out)
    tty = stdin.isatty()

    def prompt() -> None:
        if tty:
            out.write("(xce sim) ")
            out.flush()

    if tty:
        session.say("xce sim: interactive; 'help' lists the commands")
    session.serve(stdin, prompt)
    return 0
