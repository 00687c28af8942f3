"""A job's warning signal before its run limit (sbatch --signal, bsub -wa/-wt): what a spec may ask.

Checked by apply at submit (controller/fsm/validation.py, from entry format 26) and again by the worker
before it keeps one (an older leader stores the fields unread, as unknown ones: a worker must not act
on what was never checked). Pure.
"""

from __future__ import annotations

from xce.v1 import api_pb2 as api

MAX_WARNING_TIME_S = 0xFFFF  # Slurm's bound on --signal's @TIME
# The signals a shim (worker/shim.py: it leads the job's process group, and each task's) outlives, and
# so does the wrapper beside a job's command (post-exec, an interactive job's relay): the five they
# catch and those ignored by default (CHLD, URG, WINCH). Any other sent to a group would end its shim
# before the job (which would end as killed by it), and CONT would continue a job XCE stopped; the
# batch shell alone (WARNING_TO_SHELL) may be sent any signal.
GROUP_WARNING_SIGNALS = {1: "HUP", 2: "INT", 10: "USR1", 12: "USR2", 15: "TERM", 17: "CHLD", 23: "URG",
                         28: "WINCH"}


def problem(spec: api.JobSpec) -> str:
    """What is wrong with the spec's warning, in words; "" if nothing (or it has none)."""
    if not (spec.warning_signal or spec.warning_time_s or spec.warning_to):
        return ""
    if spec.warning_to not in api.WarningTarget.values():
        return f"warning target {spec.warning_to}: the job (0), its batch shell (1) or its tasks (2)"
    if not spec.warning_signal:
        return "a warning time or target (--signal, -wt) without a warning signal"
    if not 1 <= spec.warning_signal <= 64:
        return f"warning signal (--signal, -wa) {spec.warning_signal}: a signal is a number from 1 to 64"
    if spec.warning_to != api.WARNING_TO_SHELL and spec.warning_signal not in GROUP_WARNING_SIGNALS:
        names = ", ".join(GROUP_WARNING_SIGNALS.values())
        return (f"warning signal (--signal, -wa) {spec.warning_signal}: one the shims that lead a job's "
                f"processes outlive ({names}); any to the batch shell alone (--signal=B:)")
    if spec.warning_to == api.WARNING_TO_SHELL and (spec.post_exec or "XCE_INTERACTIVE" in spec.env):
        return ("a warning to the batch shell alone (--signal=B:) with a post-exec command or an "
                "interactive job: the job's command is not the shim's child there")
    if not 0 <= spec.warning_time_s <= MAX_WARNING_TIME_S:
        return (f"warning time (--signal @TIME, -wt) {spec.warning_time_s} s: from 0 to {MAX_WARNING_TIME_S} "
                "seconds before the run limit")
    return ""
