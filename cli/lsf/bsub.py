"""bsub: submit a job, a job array or a job script, as LSF 10.1 does.

`bsub [options] command [arguments]` runs the command line through /bin/sh
on the execution host, as LSF's job file does (`bsub "a; b"` is two
commands); the job's name, unless -J names it, is that command line.
`bsub < script` takes a job script, and so does `bsub script` when the
file has `#BSUB` lines (as LSF with LSB_BSUB_PARSE_SCRIPT=Y; else the file
is the command, run where the job runs): its `#BSUB` lines are options (the
command line's win), its text runs as the job (cli/lsf/script.py). The
submitter's environment goes with the job unless -env says otherwise
(cli/lsf/environment.py). -M counts in lsf.conf's
LSF_UNIT_FOR_LIMITS (MB: xce/lsf_bin.py) unless it names a unit. -o without -e
sends stderr to the -o file. -K waits for the job and exits with its code.

An option of LSF's that XCE does not carry out yet is refused by name and
nothing is submitted; so is one LSF does not have. Times are taken as LSF
takes them (-W [hour:]minute).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import socket
import sys
import time

from cli import job_spec
from cli.lsf import depend, environment, formats, not_yet, script, times
from cli.parser import UsageError
from client.channel import Client, XceError
from xce.printable import shown
from xce.v1 import api_pb2 as api

MAX_JOB_NAME = 4094  # LSF's bound on a job name (worker/spawn.py)
# LSF 10.1 options XCE does not carry out yet: each refused by name, nothing submitted.
NOT_YET_WITH_VALUE = ("-i", "-is", "-L", "-app",
                      "-gpu", "-k", "-outdir", "-Jd", "-C", "-c", "-D", "-F", "-p", "-S", "-T",
                      "-v", "-s", "-ext", "-data", "-hostfile", "-jsdl", "-jsdl_strict", "-ptl",
                      "-R2", "-stage", "-f", "-rnc", "-cn_cu", "-cn_mem", "-core_isolation", "-csm",
                      "-alloc_flags",
                      "-ln_mem", "-ln_slots", "-nnodes", "-smt", "-step_cgroup", "-network", "-Q", "-XF")
NOT_YET_FLAGS = ("-IS", "-ISp", "-ISs", "-IX", "-Zs", "-pack", "-ar", "-tty")
UNITS_MB = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2, "P": 1024.0 ** 3,
            "E": 1024.0 ** 4}


def declare(p: argparse.ArgumentParser, name: str) -> None:
    # Every default is None (argparse's): a script's #BSUB value is taken where the line gave none.
    p.add_argument("-J", dest="name", metavar="job_name",
                   help='the job name; name[1-100:2]%%10 makes a job array')
    p.add_argument("-q", dest="queue", metavar="queue_name", help="the queue")
    p.add_argument("-n", dest="slots", metavar="min[,max]", type=job_spec.slot_range, help="slots")
    p.add_argument("-R", dest="resource_req", metavar="res_req", action="append",
                   help="resource requirement (several -R are joined)")
    p.add_argument("-W", dest="run_limit", metavar="[hour:]minute", type=job_spec.minutes,
                   help="run limit")
    p.add_argument("-We", dest="estimate", metavar="[hour:]minute", type=job_spec.minutes,
                   help="estimated run time")
    p.add_argument("-wa", dest="warning_action", metavar="signal",
                   help="the signal sent to the job -wt before its run limit (URG, USR2, 12 ...)")
    p.add_argument("-wt", dest="warning_time", metavar="[hour:]minute", type=warning_time,
                   help="how long before its run limit the job gets its -wa signal")
    p.add_argument("-M", dest="mem_limit", metavar="mem_limit[unit]",
                   help="memory limit per host, in LSF_UNIT_FOR_LIMITS (MB) or with a unit: 4GB")
    p.add_argument("-o", dest="stdout", metavar="output_file",
                   help="append the job's output (and its errors, without -e); %%J %%I")
    p.add_argument("-e", dest="stderr", metavar="error_file", help="append the job's errors")
    p.add_argument("-oo", dest="stdout_over", metavar="output_file",
                   help="as -o, the file overwritten at each start")
    p.add_argument("-eo", dest="stderr_over", metavar="error_file", help="as -e, the file overwritten")
    p.add_argument("-cwd", dest="cwd", metavar="current_working_directory",
                   help="the job's working directory (default: this one)")
    p.add_argument("-P", dest="project", metavar="project_name", help="the project charged")
    p.add_argument("-w", dest="depend", metavar="dependency_expression",
                   help="run once this holds: done(12) && ended(13) ...")
    p.add_argument("-ti", dest="kill_on_invalid_dep", action="store_const", const=True,
                   help="kill the job once its -w condition can never hold")
    p.add_argument("-env", dest="env", metavar='"none" | "all [, ~var] [, var=value]" | "var[=value], ..."',
                   help="the submitter's variables the job gets (default: all)")
    p.add_argument("-m", dest="hosts", metavar='"host_name ..."', help="hosts or host groups")
    p.add_argument("-x", dest="exclusive", action="store_const", const=True, help="exclusive")
    p.add_argument("-r", dest="rerunnable", action="store_const", const=True,
                   help="rerun the job if its host is lost")
    p.add_argument("-rn", dest="rerunnable", action="store_const", const=False, help="never rerun it")
    p.add_argument("-H", dest="hold", action="store_const", const=True,
                   help="submit the job held: it pends (PSUSP) until bresume releases it")
    p.add_argument("-b", dest="begin", metavar="[[[year:]month:]day:]hour:minute",
                   help="dispatch the job no earlier than this (local time)")
    p.add_argument("-t", dest="term", metavar="[[[year:]month:]day:]hour:minute",
                   help="kill the job if it still runs at this time (exit reason TERM_DEADLINE)")
    p.add_argument("-E", dest="pre_exec", metavar='"pre_exec_command [arguments ...]"',
                   help="run this first, on the job's host, as the job does; if it fails the job pends again")
    p.add_argument("-Ep", dest="post_exec", metavar='"post_exec_command [arguments ...]"',
                   help="run this after the job, whatever its end (LSB_JOBEXIT_STAT: its wait status)")
    p.add_argument("-g", dest="job_group", metavar="job_group_name",
                   help="its job group, /a/b (bgadd -L limits the group's running jobs)")
    p.add_argument("-B", dest="mail_begin", action="store_true", help="mail when the job starts")
    p.add_argument("-N", dest="mail_end", action="store_true", help="mail the job report when it ends")
    p.add_argument("-u", dest="mail_user", metavar="mail_user", help="where the mail goes (default: you)")
    p.add_argument("-U", dest="reservation", metavar="reservation_ID",
                   help="run in this advance reservation's slots (brsvadd), while it is active")
    p.add_argument("-G", dest="user_group", metavar="user_group",
                   help="the user group (of yours) its fair share is charged to")
    p.add_argument("-sp", dest="priority", metavar="priority", type=job_spec.int32,
                   help="the job's priority among the queue's (1 to the queue's MAX_USER_PRIORITY)")
    p.add_argument("-I", dest="interactive", action="store_const", const="plain",
                   help="interactive: the job's stdin and output here; Ctrl-C kills it")
    p.add_argument("-Ip", dest="interactive", action="store_const", const="pty",
                   help="interactive, on a terminal of its own")
    p.add_argument("-Is", dest="interactive", action="store_const", const="pty",
                   help="interactive on a terminal, as a shell wants it (bsub -Is bash)")
    p.add_argument("-K", dest="wait", action="store_const", const=True,
                   help="wait for the job to end; exit with its exit code")
    p.add_argument("-V", dest="version", action="store_true", help="the version")
    not_yet.declare(p, NOT_YET_WITH_VALUE, NOT_YET_FLAGS)
    p.add_argument("cmd", nargs=argparse.REMAINDER,
                   help="command [argument ...], or none: a job script on stdin")


def _parser_for_script() -> argparse.ArgumentParser:
    from cli.lsf.entry import LsfParser

    class ScriptParser(LsfParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise UsageError(message)

    parser = ScriptParser(prog="bsub", add_help=False)
    declare(parser, "bsub")
    return parser


MAX_WARNING_TIME_S = 0xFFFF  # XCE's bound (Slurm's): 18:12


def warning_time(text: str) -> int:
    """An argparse type for -wt: LSF's [hour:]minute, in seconds (0 to 18:12)."""
    hours, colon, mins = text.partition(":")
    if not re.fullmatch(r"[0-9]{1,5}(:[0-9]{1,2})?", text):
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: [hour:]minute, as 5 or 1:30")
    total = (int(hours) * 60 + int(mins)) if colon else int(hours)
    if total < 0 or colon and not 0 <= int(mins) < 60 or total * 60 > MAX_WARNING_TIME_S:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: [hour:]minute from 0 to 18:12 (minutes below 60 "
                                         "after a colon)")
    return total * 60


def _warning(spec: api.JobSpec, args: argparse.Namespace) -> None:
    """-wa and -wt: the signal sent to the job (its process group and its tasks) -wt before its run limit
    (worker/monitor.py). One without the other is refused: XCE's queues have no JOB_WARNING_ACTION or
    JOB_ACTION_WARNING_TIME to complete it."""
    action, time_s = getattr(args, "warning_action", None), getattr(args, "warning_time", None)
    if action is None and time_s is None:
        return
    if action is None or time_s is None:
        raise UsageError("-wa and -wt go together: the signal, and how long before the run limit it is sent "
                         "(XCE's queues have no JOB_WARNING_ACTION or JOB_ACTION_WARNING_TIME)")
    number = job_spec.signal_number(action)
    if number is None:
        raise UsageError(f"-wa {action[:20]}: not a signal (a name as USR2 or URG, or a number 1-64)")
    spec.warning_signal, spec.warning_time_s, spec.warning_to = number, time_s, api.WARNING_TO_JOB


def mem_mb(text: str) -> int:
    """-M as LSF takes it: a number in LSF_UNIT_FOR_LIMITS (MB here), or with a unit (KB MB GB TB ...)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGTPE]?)B?\s*!?\s*", text, re.IGNORECASE)
    if found is None:
        raise UsageError(f"-M {text[:40]}: a memory limit is a number of MB, or one with a unit (4GB)")
    megabytes = float(found[1]) * UNITS_MB[found[2].upper()]
    if megabytes < 1:
        raise UsageError(f"-M {text[:40]}: at least 1 MB")
    return round(megabytes)


def _read_script(args: argparse.Namespace) -> tuple[str, str] | None:
    """(text, name) of the job script bsub was given (stdin, or a file as its only argument), or None."""
    if not args.cmd:
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no command: give a command, a job script, or a job script on stdin "
                             "(bsub < job.sh)")
        data = sys.stdin.buffer.read(script.MAX_SCRIPT_BYTES + 1)
        source = "stdin"
    elif len(args.cmd) == 1 and os.path.isfile(args.cmd[0]):
        try:
            with open(args.cmd[0], "rb") as stream:
                data = stream.read(script.MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"{args.cmd[0]}: {exc.strerror}") from None
        source = args.cmd[0]
        if b"\0" in data or not script.directives(data.decode(errors="replace"), source):
            return None  # a program, or a script without #BSUB lines: run as the command it names
    else:
        return None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{source}: the job script is not UTF-8 text") from None
    if not text.strip():
        raise UsageError(f"{source}: the job script is empty. Job not submitted.")
    return text, source


def _merged(args: argparse.Namespace, text: str, source: str) -> argparse.Namespace:
    """The script's #BSUB options under the command line's (LSF: the command line wins)."""
    try:
        own = _parser_for_script().parse_args([*script.directives(text, source), "--"])
    except UsageError as exc:
        raise UsageError(f"{source}: #BSUB {exc}") from None
    if own.cmd and own.cmd != ["--"]:
        raise UsageError(f"{source}: #BSUB lines hold options only, not a command ({shown(own.cmd[0])})")
    merged = vars(own)
    merged.update({k: v for k, v in vars(args).items() if v is not None and k in merged})
    if args.resource_req and own.resource_req:  # -R on both: LSF keeps the command line's
        merged["resource_req"] = args.resource_req
    return argparse.Namespace(**{**vars(args), **merged})


def build(args: argparse.Namespace, submitter: dict[str, str], here: str,
          script_text: tuple[str, str] | None, now: datetime.datetime | None = None) -> api.JobSpec:
    """The job bsub asks for (pure but for what it is given: the environment, this host, the time)."""
    now = now or datetime.datetime.now()
    if script_text is not None:
        text, source = script_text
        args = _merged(args, text, source)
        name = os.path.basename(source) if source != "stdin" else text.split("\n", 1)[0].strip()
        command = script.command(text, name if source != "stdin" else "job_script")
    else:
        line = " ".join(args.cmd)
        if not line.strip():
            raise UsageError("no command. Job not submitted.")
        name, command = line, ["/bin/sh", "-c", line]
    options = argparse.Namespace(
        name=args.name, queue=args.queue, priority=_priority(args.priority), stdout=args.stdout,
        stderr=args.stderr if args.stderr is not None else args.stdout,
        resource_req=" ".join(args.resource_req) if args.resource_req else "",
        rerunnable=bool(args.rerunnable), cwd=_cwd(args.cwd, submitter), hosts=args.hosts, depend=args.depend,
        project=args.project, exclusive=args.exclusive, kill_on_invalid_dep=args.kill_on_invalid_dep,
        slots=args.slots, run_limit=args.run_limit, estimate=args.estimate,
        mem_limit=mem_mb(args.mem_limit) if args.mem_limit is not None else None, checkpoint=None)
    spec = job_spec.spec_from(options, command)
    if not args.name:
        spec.name = name[:MAX_JOB_NAME]
    _scheduling(spec, args, now)
    _warning(spec, args)
    env = environment.job_environment(args.env, submitter)
    env["LSB_SUB_HOST"] = here
    env["LSB_SUBCWD"] = _here(submitter)
    if spec.HasField("array"):
        env["LSB_JOBINDEX_END"] = str(max(r.end for r in spec.array.ranges))
    spec.env.update(env)
    return spec


def _scheduling(spec: api.JobSpec, args: argparse.Namespace, now: datetime.datetime) -> None:
    """-H, -b, -t, -E and -Ep."""
    spec.hold = bool(args.hold)
    for flag, text, field in (("-b", args.begin, "begin_time_ms"), ("-t", args.term, "term_time_ms")):
        if text is None:
            continue
        try:
            setattr(spec, field, times.epoch_ms(times.parse(text, now)))
        except times.TimeError as exc:
            raise UsageError(f"{flag} {exc}") from None
    if spec.begin_time_ms and spec.term_time_ms and spec.term_time_ms <= spec.begin_time_ms:
        raise UsageError("-t: the termination time must come after the begin time (-b)")
    if spec.term_time_ms and spec.term_time_ms <= times.epoch_ms(now):
        raise UsageError("-t: the termination time has passed")
    for flag, text in (("-E", args.pre_exec), ("-Ep", args.post_exec)):
        if text is not None and not text.strip():
            raise UsageError(f"{flag}: an empty command")
    spec.pre_exec = args.pre_exec or ""
    spec.post_exec = args.post_exec or ""
    spec.job_group = args.job_group or ""
    spec.user_group = args.user_group or ""
    spec.reservation = args.reservation or ""
    spec.mail_begin, spec.mail_end, spec.mail_user = bool(args.mail_begin), bool(args.mail_end), \
        args.mail_user or ""
    if args.stdout_over is not None:  # -oo (and, without -e or -eo, the errors with it)
        spec.stdout_path, spec.stdout_overwrite = args.stdout_over, True
        if args.stderr is None and args.stderr_over is None:
            spec.stderr_path, spec.stderr_overwrite = args.stdout_over, True
    if args.stderr_over is not None:
        spec.stderr_path, spec.stderr_overwrite = args.stderr_over, True
    if spec.pre_exec or spec.post_exec or spec.term_time_ms or getattr(args, "interactive", None) or \
            spec.stdout_overwrite or spec.stderr_overwrite:
        spec.resource_req = needing_workers_tag(spec.resource_req)


WORKERS_TAG = "xce_lsf"  # worker/config.py's CODE_TAGS: a worker that carries out -E, -Ep, -t and -I


def needing_workers_tag(requirement: str) -> str:
    """The requirement with `select[defined(xce_lsf)]` in it: only a worker that carries the options
    out takes the job (one older than them would run it without them)."""
    found = re.search(r"select\[([^\]]*)\]", requirement)
    if found is None:
        return f"select[defined({WORKERS_TAG})] {requirement}".strip()
    return requirement[:found.start()] + f"select[defined({WORKERS_TAG}) && ({found[1]})]" + \
        requirement[found.end():]


def _priority(value: int | None) -> int:
    """-sp as LSF takes it: from 1 (the queue's MAX_USER_PRIORITY, if it has one, bounds it above)."""
    if value is not None and value < 1:
        raise UsageError(f"-sp {value}: a job priority is from 1 to the queue's MAX_USER_PRIORITY")
    return value or 0


def _same_dir(path: str | None) -> bool:
    """Whether $PWD names this directory (as the shell spells it, links kept, as LSF records it)."""
    try:
        return bool(path) and os.path.samefile(str(path), ".")
    except OSError:
        return False


def _here(submitter: dict[str, str]) -> str:
    """Where bsub runs, as the shell names it ($PWD, links kept, as LSF records it), else the kernel."""
    pwd = submitter.get("PWD", "")
    return pwd if _same_dir(pwd) else os.getcwd()


def _cwd(cwd: str | None, submitter: dict[str, str]) -> str:
    if cwd is None:
        return _here(submitter)
    return os.path.join(os.getcwd(), os.path.expanduser(cwd))


def prepare(args: argparse.Namespace) -> bool:
    """Before connecting: the job, checked here (a bad one is refused without asking the cluster).
    False: nothing to ask the cluster (-V)."""
    if args.version:
        print("XCE's bsub: the commands of IBM Spectrum LSF 10.1 over an XCE cluster", file=sys.stderr)
        return False
    if args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    if getattr(args, "interactive", None):
        clash = [flag for flag, given in (("-o", args.stdout), ("-e", args.stderr), ("-oo", args.stdout_over),
                                          ("-eo", args.stderr_over), ("-K", args.wait),
                                          ("-Ep", args.post_exec)) if given is not None]
        if clash:
            raise UsageError(f"{clash[0]} with an interactive job (-I, -Ip, -Is): not in XCE yet")
        if not args.cmd:
            raise UsageError("an interactive job needs its command on the command line")
        if args.name and "[" in args.name:
            raise UsageError("an interactive job is one job, not an array")
    args.spec = build(args, dict(os.environ), socket.gethostname(), _read_script(args))
    return True


def run(client: Client, args: argparse.Namespace) -> int:
    spec = args.spec
    if spec.depend and depend.has_names(spec.depend):
        spec.depend = _by_name(client, spec.depend)
    if getattr(args, "interactive", None):
        from cli.lsf import interactive

        return interactive.run(client, spec, args.interactive == "pty")
    jobs = list(client.submit([spec]).jobs)
    job = jobs[0]
    default = "default " if not spec.queue else ""
    print(f"Job <{job.id}> is submitted to {default}queue <{job.spec.queue}>.", flush=True)
    if args.wait:
        return _wait(client, job)
    return 0


def _by_name(client: Client, expression: str) -> str:
    """-w's job names as the ids of the caller's jobs of those names (cli/lsf/depend.py)."""
    from cli.lsf.bjobs import name_matches

    mine = client.list_jobs([f"user:eq:{client.who_am_i().name}"])
    try:
        return depend.resolve(expression, lambda name: [
            str(job.id) for job in sorted(mine, key=lambda j: j.id)
            if not job.array_id and name_matches(name, job)])
    except depend.DependError as exc:
        raise XceError("INVALID_ARGUMENT", f"-w: {exc}") from None


def _wait(client: Client, job: api.Job) -> int:
    """-K: LSF's messages while it waits; the job's exit code (or its signal's 128+N) at the end."""
    print("<<Waiting for dispatch ...>>", file=sys.stderr, flush=True)
    started = False
    delay = 0.05
    while True:
        current = client.get_job(job.id)
        if not started and current.state not in (api.PEND, api.PSUSP):
            started = True
            print(f"<<Starting on {current.host or 'its host'}>>", file=sys.stderr, flush=True)
        if current.state in (api.DONE, api.EXIT) and not (current.spec.HasField("array") and
                                                          _array_running(current)):
            print("<<Job is finished>>", file=sys.stderr, flush=True)
            return formats.exit_status(current)
        time.sleep(delay)
        delay = min(1.0, delay * 1.5)


def _array_running(job: api.Job) -> bool:
    counts = job.array.counts
    return any(counts[s] for s in (api.PEND, api.PSUSP, api.RUN, api.USUSP, api.SSUSP) if s < len(counts))


def refused(args: argparse.Namespace, exc: XceError) -> str:
    """The cluster's refusal, as bsub says it: why, then that nothing was submitted."""
    message = shown(exc.message)
    if "unknown queue" in message:
        queue = args.queue or "?"
        return f"{shown(queue)}: No such queue. Job not submitted."
    return f"{message}. Job not submitted."
