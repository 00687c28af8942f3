"""A submit's jobs from bsub's options: one job, a job array (`-J "sim[1-1000]%50"`), or many jobs from
a file in one request.

`--file JOBS` (`-` for stdin) reads one job per line, as HTCondor's
`queue from` does: a command line, optionally led by the submit options
that differ for that line (`-q long -n 4 ./big.sh in.dat`), in shell words.
Blank lines and lines starting with # are skipped. The whole file is one
SubmitJobs request (one request id, so a retry never submits it twice),
checked line by line first: a line that does not parse stops everything,
and the error names the line.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys

from cli.parser import Parser, UsageError
from xce.rules import array_spec
from xce.v1 import api_pb2 as api

TYPE_CHECKING = False  # not typing's: importing it is ~2 ms of every command's start
if TYPE_CHECKING:
    from typing import IO, NoReturn

INT32_MAX = (1 << 31) - 1


def int32(text: str) -> int:
    """An argparse type: a number that fits the wire's int32."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
    if not -INT32_MAX - 1 <= value <= INT32_MAX:
        raise argparse.ArgumentTypeError(f"{text[:40]} is out of range (at most {INT32_MAX})")
    return value


MAX_RUN_LIMIT_S = 10 * 366 * 86400  # ten years: a limit past this is a typo


def minutes(text: str) -> int:
    """An argparse type for -W and -We: LSF's [hour:]minute, in seconds."""
    hours, colon, mins = text.partition(":")
    try:
        total = (int(hours) * 60 + int(mins)) if colon else int(hours)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: [hour:]minute, as 90 or 1:30") from None
    if total < 1 or colon and not 0 <= int(mins) < 60 or total * 60 > MAX_RUN_LIMIT_S:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: [hour:]minute from 1 minute to ten years "
                                         "(minutes below 60 after a colon)")
    return total * 60


CHECKPOINT_SIGNALS = {"HUP": 1, "INT": 2, "USR1": 10, "USR2": 12}


def checkpoint_signal(text: str) -> int:
    """An argparse type for -k: the signal a checkpoint sends the job (bsub -k, with a signal)."""
    name = text.upper().removeprefix("SIG")
    if name in CHECKPOINT_SIGNALS:
        return CHECKPOINT_SIGNALS[name]
    if text.isdigit() and int(text) in CHECKPOINT_SIGNALS.values():
        return int(text)
    raise argparse.ArgumentTypeError(f"{text[:20]!r}: the checkpoint signal is HUP, INT, USR1 or USR2")


def signal_number(name: str) -> int | None:
    """A signal by number (1-64) or name, with or without SIG (USR2, SIGUSR2, 12): --signal, -wa."""
    import signal

    if re.fullmatch(r"[0-9]{1,2}", name):
        return int(name) if 1 <= int(name) <= 64 else None
    if not re.fullmatch(r"[A-Za-z0-9+]{1,16}", name):
        return None
    found = getattr(signal.Signals, "SIG" + name.upper().removeprefix("SIG"), None)
    return int(found) if found is not None else None


def slot_range(text: str) -> tuple[int, int]:
    """An argparse type for -n: N, or MIN,MAX (bsub -n 4,8)."""
    low, comma, high = text.partition(",")
    first = int32(low)
    second = int32(high) if comma else first
    if first < 1 or second < first:
        raise argparse.ArgumentTypeError(f"-n {text[:40]}: slots are N or MIN,MAX with 1 <= MIN <= MAX")
    return first, second


def add_options(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    """The options of one job, as bsub takes them (also what a --file line may start with)."""
    unset = None if not defaults else ""
    p.add_argument("-q", "--queue", default=unset, help="the queue (default: the cluster's default queue)")
    p.add_argument("-n", "--slots", type=slot_range,
                   help="slots: N, or MIN,MAX to take as many as fit (default 1); over several hosts "
                        "unless -R says span[hosts=1] or span[ptile=N]")
    p.add_argument("-J", "--name", default=unset,
                   help='the job name; NAME[1-100:2]%%10 makes a job array (indices start-end:step, '
                        "comma-separated; %%10: at most 10 elements running at once)")
    p.add_argument("-o", "--stdout", default=unset,
                   help="stdout file (relative to the working directory); %%J: the job id, %%I: the index")
    p.add_argument("-e", "--stderr", default=unset, help="stderr file; %%J and %%I as for -o")
    p.add_argument("-R", "--resource-req", default=unset, help="resource requirement string (LSF -R)")
    p.add_argument("-M", "--mem-limit", dest="mem_limit", type=int32, default=None,
                   help="memory limit in MB of the job's processes on each host (bsub -M); past it the "
                        "job is killed, exit reason MEMLIMIT (default: its rusage[mem=])")
    p.add_argument("-W", "--run-limit", dest="run_limit", type=minutes, default=None,
                   help="run limit, [hour:]minute (bsub -W): past it the job is killed, exit reason RUNLIMIT "
                        "(time suspended not counted)")
    p.add_argument("-We", "--estimate", dest="estimate", type=minutes, default=None,
                   help="how long the job is expected to run, [hour:]minute (bsub -We); else its -W")
    p.add_argument("-k", "--checkpoint", dest="checkpoint", type=checkpoint_signal, default=None,
                   help="the job checkpoints itself on this signal (HUP, INT, USR1, USR2), sent by "
                        "`xce checkpoint` (bsub -k, bchkpnt)")
    p.add_argument("-m", "--hosts", default=unset,
                   help='hosts or host groups the job may run on, space-separated (bsub -m "gpu_nodes h3")')
    p.add_argument("-x", "--exclusive", action="store_true", default=None if not defaults else False,
                   help="run only on hosts where nothing else runs, and keep them so (bsub -x)")
    p.add_argument("-P", "--project", default=unset,
                   help='the project the job is charged to (bsub -P); "/" nests: research/genomics')
    p.add_argument("-w", "--depend", default=unset,
                   help='run only once this holds (bsub -w): done(12), exit(13, != 0), ended(14), '
                        'started(15), an element 17[3], numdone(17, >= 100) ...; && || ! and parentheses')
    p.add_argument("--kill-on-invalid-dep", action="store_true", default=None if not defaults else False,
                   help="kill the job once its -w condition can never hold (else it pends, saying so)")
    p.add_argument("--priority", type=int32, default=None if not defaults else 0,
                   help="higher runs first inside a queue (default 0)")
    p.add_argument("-r", "--rerunnable", action="store_true", default=None if not defaults else False,
                   help="requeue the job if its host is lost")
    p.add_argument("--cwd", default=None, help="working directory (default: the current one)")


def spec_from(args: argparse.Namespace, command: list[str]) -> api.JobSpec:
    if not command:
        raise UsageError("no command: put it after --, as in xce submit -- ./run.sh")
    try:
        name, array = array_spec.parse_name(args.name or "")
    except array_spec.ArraySpecError as exc:
        raise UsageError(str(exc)) from None
    spec = api.JobSpec(command=command, name=name, queue=args.queue or "", priority=args.priority or 0,
                       stdout_path=args.stdout or "", stderr_path=args.stderr or "",
                       resource_req=args.resource_req or "", rerunnable=bool(args.rerunnable),
                       cwd=args.cwd if args.cwd is not None else os.getcwd())
    if array is not None:
        spec.array.CopyFrom(array)
    _placement(spec, args)
    _limits(spec, args)
    return spec


def _placement(spec: api.JobSpec, args: argparse.Namespace) -> None:
    """Where, when and beside what the job may run, and what it is charged to."""
    if args.hosts:
        spec.hosts.extend(dict.fromkeys(args.hosts.split()))
    if args.depend:
        spec.depend = args.depend
    if args.project:
        spec.project = args.project
    if args.exclusive:
        spec.exclusive = True
    if args.kill_on_invalid_dep:
        spec.kill_on_invalid_dep = True
    if args.slots is not None:
        low, high = args.slots
        spec.slots = high
        if low != high:
            spec.min_slots = low


def _limits(spec: api.JobSpec, args: argparse.Namespace) -> None:
    """How long it may run and how much memory it may take, and how it is checkpointed."""
    if args.run_limit is not None:
        spec.run_limit_s = args.run_limit
    if getattr(args, "checkpoint", None) is not None:
        spec.checkpoint_signal = args.checkpoint
    if args.estimate is not None:
        spec.estimate_s = args.estimate
    if args.mem_limit is not None:
        if args.mem_limit < 1:
            raise UsageError(f"-M {args.mem_limit}: a memory limit is a number of MB, at least 1")
        spec.mem_limit_mb = args.mem_limit


class _LineParser(Parser):  # as strict as the command line
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _line_parser() -> argparse.ArgumentParser:
    p = _LineParser(prog="line", add_help=False, exit_on_error=False)
    add_options(p, defaults=False)
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    return p


def specs_from_file(args: argparse.Namespace, stream: IO[str]) -> list[api.JobSpec]:
    """Every line's job, with the command line's options as defaults; UsageError names the line."""
    parser = _line_parser()
    specs = []
    for number, line in enumerate(stream, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            words = shlex.split(text)
            if words and not words[0].startswith("-"):
                words = ["--", *words]  # a bare command line: no options to look for
            own = parser.parse_args(words)
            mine = vars(own)
            merged = argparse.Namespace(**{k: (mine[k] if mine.get(k) is not None else v)
                                           for k, v in vars(args).items() if k != "cmd"})
            command = list(own.cmd)
            if command and command[0] == "--":
                command = command[1:]
            specs.append(spec_from(merged, command))
        except (UsageError, ValueError, argparse.ArgumentError) as exc:
            raise UsageError(f"{_name(args.file)} line {number}: {exc}") from None
    if not specs:
        raise UsageError(f"{_name(args.file)} has no jobs")
    return specs


def _name(path: str) -> str:
    return "stdin" if path == "-" else path


def read_specs(args: argparse.Namespace) -> list[api.JobSpec]:
    """The jobs this `xce submit` asks for."""
    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if args.file is None:
        return [spec_from(args, command)]
    if command:
        raise UsageError("give the jobs either with --file or on the command line, not both")
    if args.file == "-":
        return specs_from_file(args, sys.stdin)
    try:
        with open(args.file, encoding="utf-8") as stream:
            return specs_from_file(args, stream)
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{args.file} is not UTF-8 text") from None


def describe(jobs: list[api.Job]) -> str:
    """What `xce submit` prints: bsub's line for one job or array, a summary for many."""
    if len(jobs) == 1:
        job = jobs[0]
        what = f"Job <{job.id}> ({job.readable_id})"
        if job.spec.HasField("array"):
            what = f"Job array <{job.id}> of {job.array.size} elements ({job.readable_id})"
        return f"{what} is submitted to queue <{job.spec.queue}>."
    ids = sorted(j.id for j in jobs)
    dense = ids[-1] - ids[0] + 1 == len(ids)
    span = f"<{ids[0]}>-<{ids[-1]}>" if dense else ", ".join(f"<{i}>" for i in ids[:5]) + ", ..."
    return f"{len(jobs)} jobs {span} are submitted."
