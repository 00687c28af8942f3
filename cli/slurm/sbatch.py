"""sbatch: submit a batch script (or a job array of it), as Slurm 22.05 does.

`sbatch [options] script [args]`, `sbatch [options] < script`, or
`sbatch --wrap "command"`. The script's `#SBATCH` lines, up to its first
command, are options (the command line's win); it must start with `#!`, as
Slurm's must, and runs under that interpreter where the job runs (its text
goes with the job: cli/lsf/script.py). The submitter's environment goes
with the job (`--export=ALL`, Slurm's default), or `NONE`, or only the
variables named (`--export=A,B=2`, or `ALL,B=2`).

What each option is in XCE: `-p` the queue, `-A` the project, `-n` tasks
times `-c` CPUs per task the slots (`-N 1`: on one host; `--ntasks-per-node`
with `-c`: span[ptile]), `--mem` (per node) and `--mem-per-cpu` the memory
limit, `-t` the run limit, `--array` an array with its `%` limit,
`--dependency` a -w condition (afterok: done, afterany: ended, afternotok:
exit, after: started; `,` all of them, `?` any; singleton: every job of the
caller's of that name before it ended), `--begin` a begin time, `-H` held,
`--gres=gpu:N` rusage[gpu=N], `--mail-type`/`--mail-user` job mail, `-o`/`-e`
with `%j %A %a %x %u %%` (default `slurm-%j.out`, `slurm-%A_%a.out` for an
array, in the working directory). `--parsable` prints the job id alone.
`--signal=[B:]SIG[@TIME]` sends SIG once the job has run its run limit
less TIME seconds (60 by default): to its tasks (srun's steps) as Slurm's
default, to the batch shell alone with `B:` (`R:` does not apply to XCE's
reservations: sbatch says so). `--wckey` is accepted and kept nowhere.
The input variables (SBATCH_PARTITION, SBATCH_TIMELIMIT, ...: INPUT_VARIABLES)
rank between the command line and the #SBATCH lines, as Slurm's. An option
of Slurm's that XCE does not carry out yet is refused by name and nothing
is submitted.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import re
import shlex
import socket
import sys

from cli import job_spec
from cli.lsf import environment, script
from cli.parser import UsageError
from cli.slurm import formats
from client.channel import Client, XceError
from xce.printable import shown
from xce.rules import array_spec
from xce.v1 import api_pb2 as api

MEMORY_UNITS_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
# Slurm 22.05 options XCE does not carry out yet: refused by name, nothing submitted.
NOT_YET_WITH_VALUE = ("--qos", "-q", "--constraint", "-C", "--reservation", "--licenses", "-L",
                      "--cluster", "-M", "--nice", "--priority", "--distribution", "-m", "--gpus", "-G",
                      "--gpus-per-task", "--cpus-per-gpu", "--mem-per-gpu", "--deadline",
                      "--time-min", "--tmp", "--switches", "--input", "-i",
                      "--profile", "--propagate", "--uid", "--gid", "--network", "--mcs-label",
                      "--acctg-freq",
                      "--core-spec", "--thread-spec", "--sockets-per-node", "--cores-per-socket",
                      "--threads-per-core", "--ntasks-per-core", "--ntasks-per-socket", "--hint",
                      "--cpu-freq", "--bb", "--bbf", "--container", "--delay-boot", "--burst-buffer",
                      "--kill-on-invalid-dep", "--batch", "--clusters", "--exclude", "-F",
                      "--nodefile", "--extra-node-info", "-B", "--get-user-env", "--gpu-bind", "--mem-bind",
                      "--export-file", "--power", "--prefer", "--het-group")
NOT_YET_FLAGS = ("--overcommit", "-O", "--oversubscribe", "-s", "--contiguous", "--no-kill", "-k",
                 "--spread-job", "--use-min-nodes", "--test-only", "--ignore-pbs", "--reboot", "--quiet",
                 "-Q", "--verbose", "-v")


def declare(p: argparse.ArgumentParser, name: str) -> None:
    from cli.lsf import not_yet

    # Every default is None: a script's #SBATCH value is taken where the command line gave none.
    p.add_argument("-J", "--job-name", dest="name", metavar="name")
    p.add_argument("-p", "--partition", dest="partition", metavar="partition")
    p.add_argument("-A", "--account", dest="account", metavar="account")
    p.add_argument("-n", "--ntasks", dest="ntasks", metavar="ntasks", type=_count)
    p.add_argument("-N", "--nodes", dest="nodes", metavar="nodes", type=_nodes)
    p.add_argument("--ntasks-per-node", dest="per_node", metavar="ntasks", type=_count)
    p.add_argument("-c", "--cpus-per-task", dest="cpus", metavar="ncpus", type=_count)
    p.add_argument("--mem", dest="mem", metavar="size[units]")
    p.add_argument("--mem-per-cpu", dest="mem_per_cpu", metavar="size[units]")
    p.add_argument("-t", "--time", dest="time", metavar="time")
    p.add_argument("-o", "--output", dest="output", metavar="pattern")
    p.add_argument("-e", "--error", dest="error", metavar="pattern")
    p.add_argument("-D", "--chdir", dest="chdir", metavar="directory")
    p.add_argument("-a", "--array", dest="array", metavar="indexes")
    p.add_argument("-d", "--dependency", dest="dependency", metavar="type:jobid[:jobid]")
    p.add_argument("--export", dest="export", metavar="ALL|NONE|VARS")
    p.add_argument("-b", "--begin", dest="begin", metavar="time")
    p.add_argument("-H", "--hold", dest="hold", action="store_const", const=True)
    p.add_argument("--gres", dest="gres", metavar="gpu:N")
    p.add_argument("--gpus-per-node", dest="gpus_per_node", metavar="[type:]N", help="as --gres=gpu:N")
    p.add_argument("--signal", dest="signal", metavar="[{R|B}:]sig[@time]",
                   help="send sig time seconds (60) before the run limit: to the job's tasks (srun's), or "
                        "with B: to the batch shell alone")
    p.add_argument("--wckey", dest="wckey", metavar="wckey", help="accepted; no workload keys are tracked")
    p.add_argument("-w", "--nodelist", dest="nodelist", metavar="hosts")
    p.add_argument("--exclusive", dest="exclusive", action="store_const", const=True)
    p.add_argument("--requeue", dest="requeue", action="store_const", const=True)
    p.add_argument("--no-requeue", dest="requeue", action="store_const", const=False)
    p.add_argument("--mail-type", dest="mail_type", metavar="type,...")
    p.add_argument("--mail-user", dest="mail_user", metavar="user")
    p.add_argument("--comment", dest="comment", metavar="text", help="kept with the job (sacct's Comment)")
    p.add_argument("--open-mode", dest="open_mode", metavar="append|truncate",
                   help="the output files appended to, or truncated at each start (Slurm's default)")
    p.add_argument("--wrap", dest="wrap", metavar="command")
    p.add_argument("--parsable", dest="parsable", action="store_const", const=True)
    p.add_argument("-W", "--wait", dest="wait", action="store_const", const=True)
    p.add_argument("-V", "--version", dest="version", action="store_const", const=True)
    not_yet.declare(p, NOT_YET_WITH_VALUE, NOT_YET_FLAGS, system="Slurm")
    p.add_argument("script", nargs=argparse.REMAINDER, help="the batch script and its arguments")


def declare_job_size(p: argparse.ArgumentParser) -> None:
    """The options of a job's size, name, place and time that srun and salloc take as sbatch reads them."""
    p.add_argument("-n", "--ntasks", dest="ntasks", metavar="ntasks", type=_count)
    p.add_argument("-N", "--nodes", dest="nodes", metavar="nodes", type=_nodes)
    p.add_argument("--ntasks-per-node", dest="per_node", metavar="ntasks", type=_count)
    p.add_argument("-c", "--cpus-per-task", dest="cpus", metavar="ncpus", type=_count)
    p.add_argument("-J", "--job-name", dest="name", metavar="name")
    p.add_argument("-p", "--partition", dest="partition", metavar="partition")
    p.add_argument("-A", "--account", dest="account", metavar="account")
    p.add_argument("-t", "--time", dest="time", metavar="time")
    p.add_argument("--mem", dest="mem", metavar="size[units]")
    p.add_argument("--mem-per-cpu", dest="mem_per_cpu", metavar="size[units]")
    p.add_argument("-D", "--chdir", dest="chdir", metavar="directory")


def _count(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,8}", text) or not 1 <= int(text) <= 1 << 20:
        raise argparse.ArgumentTypeError(f"invalid number: {text[:20]!r}")
    return int(text)


def _nodes(text: str) -> int:
    """-N as XCE takes it: a count (min-max takes its max: XCE places a job on what it asks)."""
    low, _, high = text.partition("-")
    return _count(high or low)


def memory_mb(text: str, flag: str) -> int:
    """--mem as Slurm takes it: a number of MB, or with a unit K M G T; 0: all of a node's (no limit)."""
    found = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip(), re.IGNORECASE)
    if found is None:
        raise UsageError(f"{flag}: invalid memory specification {text[:40]!r}")
    if int(found[1]) == 0:
        return 0
    return max(1, math.ceil(int(found[1]) * MEMORY_UNITS_MB[found[2].upper() or "M"]))


def warning_signal(text: str) -> tuple[str, int, int]:
    """--signal=[{R|B}:]SIG[@TIME] as Slurm 22.05 reads it: (whom: "" the job's steps, "B" the batch
    shell alone; the signal's number; the seconds before the run limit, 0-65535, default 60). `R`
    (reservation overlap) is taken as "". UsageError for one Slurm would refuse."""
    flags, rest = _signal_flags(text)
    name, at, seconds = rest.partition("@")
    number = job_spec.signal_number(name)
    if number is None:
        raise UsageError(f"--signal {text[:40]!r}: {name[:20]!r} is not a signal")
    seconds = seconds.strip() or "0"  # Slurm reads `USR1@` (strtol of nothing) as 0, and ignores spaces
    if at and not (re.fullmatch(r"[0-9]{1,5}", seconds) and int(seconds) <= 0xFFFF):
        raise UsageError(f"--signal {text[:40]!r}: the time is seconds, 0 to 65535")
    return ("B" if "B" in flags else ""), number, int(seconds) if at else 60


def _signal_flags(text: str) -> tuple[set[str], str]:
    """--signal's flags before a colon ({"R", "B"} or fewer), and the rest."""
    whom, _, rest = text.rpartition(":") if re.match(r"^[A-Za-z]+:", text) else ("", "", text)
    flags = set(whom.upper()) if whom else set()
    if not flags <= {"R", "B"}:
        raise UsageError(f"--signal {text[:40]!r}: write [{{R|B}}:]SIG[@TIME]")
    return flags, rest


# Slurm 22.05's input variables of sbatch (`man sbatch`, INPUT ENVIRONMENT VARIABLES): each is the option
# it names, under the command line's and over the script's #SBATCH lines. A flag's variable sets it when
# present. An option XCE does not carry out yet is refused by its variable's name, as by its own.
INPUT_VARIABLES = {
    "SBATCH_ACCOUNT": "--account", "SBATCH_ARRAY_INX": "--array", "SBATCH_ERROR": "--error",
    "SBATCH_EXPORT": "--export", "SBATCH_GPUS_PER_NODE": "--gpus-per-node", "SBATCH_GRES": "--gres",
    "SBATCH_JOB_NAME": "--job-name", "SBATCH_MEM_PER_CPU": "--mem-per-cpu", "SBATCH_MEM_PER_NODE": "--mem",
    "SBATCH_OPEN_MODE": "--open-mode", "SBATCH_OUTPUT": "--output", "SBATCH_PARTITION": "--partition",
    "SBATCH_SIGNAL": "--signal", "SBATCH_TIMELIMIT": "--time", "SBATCH_WCKEY": "--wckey",
    "SBATCH_QOS": "--qos", "SBATCH_CONSTRAINT": "--constraint", "SBATCH_RESERVATION": "--reservation",
    "SBATCH_CLUSTERS": "--clusters", "SBATCH_DISTRIBUTION": "--distribution", "SBATCH_GPUS": "--gpus",
    "SBATCH_GPUS_PER_TASK": "--gpus-per-task", "SBATCH_CPUS_PER_GPU": "--cpus-per-gpu",
    "SBATCH_MEM_PER_GPU": "--mem-per-gpu", "SBATCH_PROFILE": "--profile", "SBATCH_NETWORK": "--network",
    "SBATCH_HINT": "--hint", "SBATCH_CORE_SPEC": "--core-spec", "SBATCH_THREAD_SPEC": "--thread-spec",
    "SBATCH_DELAY_BOOT": "--delay-boot", "SBATCH_INPUT": "--input", "SBATCH_CONTAINER": "--container",
}
INPUT_FLAGS = {"SBATCH_EXCLUSIVE": "--exclusive", "SBATCH_REQUEUE": "--requeue",
               "SBATCH_NO_REQUEUE": "--no-requeue", "SBATCH_WAIT": "--wait",
               "SBATCH_OVERCOMMIT": "--overcommit", "SBATCH_NO_KILL": "--no-kill",
               "SBATCH_SPREAD_JOB": "--spread-job", "SBATCH_USE_MIN_NODES": "--use-min-nodes",
               "SBATCH_IGNORE_PBS": "--ignore-pbs"}


def input_words(environ: dict[str, str]) -> list[str]:
    """The options sbatch's input variables give, as words (in the table's order)."""
    words = [f"{option}={environ[name]}" for name, option in INPUT_VARIABLES.items() if environ.get(name)]
    return words + [option for name, option in INPUT_FLAGS.items() if name in environ]


def directives(text: str) -> list[str]:
    """The words of a script's #SBATCH lines (in column 0, as Slurm reads them), up to its first
    command; a line ends at a `#` outside quotes (a comment)."""
    words: list[str] = []
    for line in text.splitlines()[1:]:
        if line.startswith("#SBATCH"):
            try:
                lexer = shlex.shlex(line[len("#SBATCH"):], posix=True, punctuation_chars=False)
                lexer.whitespace_split, lexer.commenters = True, "#"
                words += list(lexer)
            except ValueError as exc:
                raise UsageError(f"#SBATCH line {line[:60]!r}: {exc}") from None
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return words


def dependency(text: str) -> str:
    """--dependency as an XCE -w condition; `singleton` stays a word for `run` to resolve."""
    kinds = {"afterok": "done", "afterany": "ended", "afternotok": "exit", "after": "started"}
    if "," in text and "?" in text:
        raise UsageError(f"--dependency {text[:80]!r}: one kind of separator: , (all) or ? (any)")
    joiner = " || " if "?" in text else " && "
    terms = []
    for item in re.split(r"[,?]", text):
        if item == "singleton":
            terms.append("singleton")
            continue
        kind, _, ids = item.partition(":")
        if kind not in kinds or not ids:
            raise UsageError(f"--dependency {text[:80]!r}: write afterok:ID[:ID], afterany:, afternotok:, "
                             "after: or singleton")
        for ref in ids.split(":"):
            if "+" in ref:
                raise UsageError(f"--dependency: {ref[:40]!r}: a delay (+time) is not carried out by XCE yet")
            found = re.fullmatch(r"(\d+)(?:_(\d+))?", ref)
            if found is None:
                raise UsageError(f"--dependency: {ref[:40]!r} is not a job id")
            job = f"{found[1]}[{found[2]}]" if found[2] else found[1]
            terms.append(f"{kinds[kind]}({job})")
    return joiner.join(terms)


def output_pattern(pattern: str) -> str:
    """-o/-e: Slurm's %j %J %A %a %x %u %% are the worker's to fill in (worker/spawn.py: a job
    sbatch submitted); others are refused."""
    for found in re.finditer(r"%(\d*)([a-zA-Z%])", pattern):
        if found[2] not in "jJAaxu%" or found[1]:
            raise UsageError(f"-o/-e: %{found[1]}{found[2]} is not carried out by XCE yet "
                             "(%j %J %A %a %x %u %%)")
    return pattern


def begin_ms(text: str, now: datetime.datetime) -> int:
    """--begin: HH:MM[:SS], now+N[units], today, tomorrow, YYYY-MM-DD[THH:MM[:SS]]."""
    text = text.strip()
    relative = re.fullmatch(r"now\+(\d+)(second|minute|hour|day|week)?s?", text)
    if relative:
        unit = {"second": 1, "minute": 60, "hour": 3600, "day": 86_400, "week": 604_800}[
            relative[2] or "second"]
        when = now + datetime.timedelta(seconds=int(relative[1]) * unit)
    elif text in ("now", "today", "tomorrow"):
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        when = {"now": now, "today": midnight, "tomorrow": midnight + datetime.timedelta(days=1)}[text]
    elif re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", text):
        parts = [int(p) for p in text.split(":")]
        when = now.replace(hour=parts[0], minute=parts[1], second=parts[2] if len(parts) > 2 else 0,
                           microsecond=0)
        if when <= now:
            when += datetime.timedelta(days=1)
    else:
        try:
            when = datetime.datetime.fromisoformat(text)
        except ValueError:
            raise UsageError(f"--begin: invalid time specification {text[:40]!r}") from None
    return int(when.timestamp() * 1000)


def _read(args: argparse.Namespace) -> tuple[str, str]:
    """(the script's text, its name) from --wrap, the file named, or stdin."""
    if args.wrap is not None:
        if args.script:
            raise UsageError("--wrap is incompatible with a script")
        return f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{args.wrap}\n", "wrap"
    if args.script:
        path = args.script[0]
        try:
            with open(path, "rb") as stream:
                data = stream.read(script.MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"Unable to open file {path}: {exc.strerror}") from None
        name = os.path.basename(path)
    else:
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no batch script: give a script, --wrap, or a script on stdin")
        data, name = sys.stdin.buffer.read(script.MAX_SCRIPT_BYTES + 1), "sbatch"
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise UsageError("Batch script is not text (UTF-8)") from None
    if "\r\n" in text:
        raise UsageError("Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line "
                         "breaks (\\n).")
    if not text.startswith("#!"):
        raise UsageError("This does not look like a batch script.  The first\nline must start with #! "
                         "followed by the path to an interpreter.\nFor instance: #!/bin/sh")
    return text, name


def _options(words: list[str], where: str) -> dict[str, object]:
    """sbatch's options in `words` (a script's #SBATCH lines, or what the input variables say), each
    refusal said as coming from `where`."""
    from cli.slurm.entry import SlurmParser, getopt_words

    class OtherParser(SlurmParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            if message.startswith("unknown option "):
                message = f"unrecognized option '{message.removeprefix('unknown option ')}'"
            raise UsageError(f"{where}: {message}")

    parser = OtherParser(prog="sbatch", add_help=False)
    declare(parser, "sbatch")
    try:
        own = parser.parse_args(getopt_words(parser, [*words, "--"], True))
    except UsageError as exc:
        message = str(exc)
        raise UsageError(message if message.startswith(where) else f"{where}: {message}") from None
    stray = [word for word in own.script if word != "--"]
    if stray:
        raise UsageError(f"{where}: Invalid argument: {stray[0][:40]}")
    return {k: v for k, v in vars(own).items() if k != "script"}


def _merged(args: argparse.Namespace, text: str, environ: dict[str, str]) -> argparse.Namespace:
    """The options as Slurm ranks them: the command line's over the input variables' (SBATCH_*) over
    the script's #SBATCH lines."""
    merged = _options(directives(text), "#SBATCH")
    given = input_words(environ)
    if given:
        names = ", ".join(name for name in [*INPUT_VARIABLES, *INPUT_FLAGS] if name in environ
                          and (name in INPUT_FLAGS or environ[name]))
        merged.update({k: v for k, v in _options(given, names).items() if v is not None})
    merged.update({k: v for k, v in vars(args).items() if v is not None and k in merged})
    return argparse.Namespace(**{**vars(args), **merged})


def build(args: argparse.Namespace, submitter: dict[str, str], here: str,
          now: datetime.datetime | None = None) -> api.JobSpec:
    """The job sbatch asks for (pure but for what it is given: the script, the environment, the time)."""
    now = now or datetime.datetime.now()
    if args.script and args.script[0] == "--":
        args.script = args.script[1:]
    text, source = _read(args)
    notes: list[str] = []  # warnings for sbatch to print
    args.notes = notes
    args = _merged(args, text, submitter)
    name = args.name or source
    command = script.command(text, source)
    command += list(args.script[1:])  # the script's own arguments ($1 ...)
    cwd = os.path.join(os.getcwd(), os.path.expanduser(args.chdir)) if args.chdir else _here(submitter)
    spec = api.JobSpec(command=command, name=name, queue=args.partition or "", project=args.account or "",
                       cwd=cwd, rerunnable=args.requeue is not False)
    if args.array:
        try:
            _, array = array_spec.parse_name(f"x[{args.array.split('%')[0]}]" + (
                f"%{args.array.split('%', 1)[1]}" if "%" in args.array else ""), lowest=0)
        except array_spec.ArraySpecError as exc:
            raise UsageError(f"--array: {exc}") from None
        assert array is not None
        spec.array.CopyFrom(array)
    _size(spec, args)
    default = "slurm-%A_%a.out" if args.array else "slurm-%j.out"
    spec.stdout_path = output_pattern(args.output or default)
    spec.stderr_path = output_pattern(args.error) if args.error else spec.stdout_path
    if args.open_mode not in (None, "append", "truncate"):
        raise UsageError(f"--open-mode {args.open_mode[:20]!r}: append or truncate")
    # Slurm truncates by default (JobFileAppend=0): XCE's worker overwrites at each start.
    spec.stdout_overwrite = spec.stderr_overwrite = args.open_mode != "append"
    spec.comment = args.comment or ""
    if args.time and args.time.strip() != "0":  # (0: no limit, as Slurm's)
        try:
            spec.run_limit_s = formats.minutes_of(args.time)
        except formats.TimeError as exc:
            raise UsageError(str(exc)) from None
    if args.signal:
        _warning(spec, args.signal, notes)
    if args.dependency:
        spec.depend = dependency(args.dependency)
    if args.begin:
        spec.begin_time_ms = begin_ms(args.begin, now)
    spec.hold = bool(args.hold)
    spec.exclusive = bool(args.exclusive)
    if args.nodelist:
        spec.hosts.extend(dict.fromkeys(args.nodelist.replace(",", " ").split()))
    _mail(spec, args)
    spec.env.update(_environment(args.export, submitter))
    spec.env.update(SLURM_SUBMIT_DIR=cwd if not args.chdir else _here(submitter), SLURM_SUBMIT_HOST=here,
                    SLURM_NTASKS=str(args.ntasks or spec.slots // (args.cpus or 1)))
    if args.cpus:
        spec.env["SLURM_CPUS_PER_TASK"] = str(args.cpus)
    return spec


def _warning(spec: api.JobSpec, text: str, notes: list[str]) -> None:
    """--signal: the job's warning before its run limit (sent by its worker: worker/monitor.py)."""
    whom, number, seconds = warning_signal(text)
    spec.warning_signal, spec.warning_time_s = number, seconds
    spec.warning_to = api.WARNING_TO_SHELL if whom == "B" else api.WARNING_TO_TASKS
    if "R" in _signal_flags(text)[0]:
        notes.append(f"--signal={text}: R: (overlapping a reservation's MaxStartDelay) does not apply to "
                     "XCE; the signal is sent as without it")


def _size(spec: api.JobSpec, args: argparse.Namespace) -> None:
    """Slots, their layout and memory: tasks times CPUs per task."""
    cpus = args.cpus or 1
    tasks = args.ntasks or ((args.per_node or 1) * (args.nodes or 1))
    spec.slots = tasks * cpus
    requirement = []
    if args.nodes == 1 or (tasks == 1 and not args.nodes):  # a task's CPUs are on one host
        requirement.append("span[hosts=1]")
    elif args.per_node:
        requirement.append(f"span[ptile={args.per_node * cpus}]")
    elif args.nodes and args.nodes > 1:
        requirement.append(f"span[ptile={-(-tasks // args.nodes) * cpus}]")
    elif cpus > 1:  # (XCE's layouts cannot keep each task whole elsewise: a task a host)
        requirement.append(f"span[ptile={cpus}]")
    if args.gres and getattr(args, "gpus_per_node", None):
        raise UsageError("--gres=gpu and --gpus-per-node: one of them")
    if args.gres:
        found = re.fullmatch(r"gpu(?::[\w.-]+)?:(\d+)", args.gres)
        if found is None:
            raise UsageError(f"--gres {args.gres[:40]!r}: XCE takes gpu:N (or gpu:type:N)")
        requirement.append(f"rusage[gpu={found[1]}]")
    elif getattr(args, "gpus_per_node", None):  # (Slurm's --gres=gpu:N is per node too)
        found = re.fullmatch(r"(?:[\w.-]+:)?(\d+)", args.gpus_per_node)
        if found is None:
            raise UsageError(f"--gpus-per-node {args.gpus_per_node[:40]!r}: XCE takes N (or type:N)")
        if int(found[1]):
            requirement.append(f"rusage[gpu={found[1]}]")
    spec.resource_req = " ".join(requirement)
    if args.mem and args.mem_per_cpu:
        raise UsageError("--mem and --mem-per-cpu are mutually exclusive")
    if args.mem:
        spec.mem_limit_mb = memory_mb(args.mem, "--mem")
    elif args.mem_per_cpu:
        spec.mem_limit_mb = memory_mb(args.mem_per_cpu, "--mem-per-cpu") * spec.slots


def _mail(spec: api.JobSpec, args: argparse.Namespace) -> None:
    kinds = {k.strip().upper() for k in (args.mail_type or "").split(",") if k.strip()}
    unknown = kinds - {"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL"}
    if unknown:
        raise UsageError(f"--mail-type: invalid type {sorted(unknown)[0]}")
    spec.mail_begin = bool(kinds & {"BEGIN", "ALL"})
    spec.mail_end = bool(kinds & {"END", "FAIL", "ALL"})
    spec.mail_user = args.mail_user or ""


def _environment(export: str | None, submitter: dict[str, str]) -> dict[str, str]:
    """--export: ALL (Slurm's default), NONE, or names and NAME=value (ALL among them: all too)."""
    try:
        if export is None or export.upper() == "ALL":
            return environment.job_environment(None, _without_slurm(submitter))
        if export.upper() == "NONE":
            return {}
        items = [item.strip() for item in export.split(",") if item.strip()]
        everything = any(item.upper() == "ALL" for item in items)
        rest = [item for item in items if item.upper() != "ALL"]
        spec = ", ".join(["all", *rest] if everything else rest)
        return environment.job_environment(spec, _without_slurm(submitter)) if rest or everything else {}
    except environment.EnvError as exc:
        raise UsageError(str(exc).replace("-env", "--export")) from None


def _without_slurm(submitter: dict[str, str]) -> dict[str, str]:
    """A job's SLURM_* variables name that job: a job it submits gets its own (worker/spawn.py)."""
    return {k: v for k, v in submitter.items() if not k.startswith("SLURM_")}


def _here(submitter: dict[str, str]) -> str:
    pwd = submitter.get("PWD", "")
    try:
        return pwd if pwd and os.path.samefile(pwd, ".") else os.getcwd()
    except OSError:
        return os.getcwd()


def prepare(args: argparse.Namespace) -> bool:
    if args.version:
        print("slurm 22.05.8 (XCE's sbatch over an XCE cluster)")
        return False
    args.spec = build(args, dict(os.environ), socket.gethostname())
    for note in args.notes:
        print(f"sbatch: warning: {note}", file=sys.stderr)
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    spec = args.spec
    if "singleton" in spec.depend:
        spec.depend = _singleton(client, spec)
    try:
        job = client.submit([spec]).jobs[0]
    except XceError as exc:  # in Slurm's words where Slurm has its own
        if exc.code_name == "INVALID_ARGUMENT" and exc.message.startswith("unknown queue"):
            print(f"sbatch: error: invalid partition specified: {shown(spec.queue)}", file=sys.stderr)
            print("sbatch: error: Batch job submission failed: Invalid partition name specified",
                  file=sys.stderr)
        else:
            print(f"sbatch: error: Batch job submission failed: {shown(exc.message)}", file=sys.stderr)
        return 1
    print(job.id if args.parsable else f"Submitted batch job {job.id}", flush=True)
    if args.wait:
        return _wait(client, job)
    return 0


def _singleton(client: Client, spec: api.JobSpec) -> str:
    """singleton: every unfinished job of the caller's with this name ended first."""
    me = client.who_am_i().name
    earlier = [job for job in client.list_jobs([f"user:eq:{me}", "state:in:PEND,PSUSP,RUN,USUSP,SSUSP,UNKWN"])
               if job.spec.name == spec.name and not job.array_id]
    ended = " && ".join(f"ended({job.id})" for job in sorted(earlier, key=lambda j: j.id))
    words = [t for t in re.split(r" (?:&&|\|\|) ", spec.depend) if t != "singleton"]
    joiner = " || " if " || " in spec.depend else " && "
    return joiner.join([*words, *([ended] if ended else [])])


def _wait(client: Client, job: api.Job) -> int:
    """-W: wait for the job's end; its exit code (Slurm: the job's)."""
    import time

    while True:
        try:
            current = client.get_job(str(job.id))
        except XceError:
            time.sleep(1.0)
            continue
        if current.state in (api.DONE, api.EXIT):
            return current.exit_code if current.state == api.EXIT else 0
        time.sleep(0.5)
