"""Capture this directory's goldens from a real Slurm 22.05 (tests/slurm_peer.py): slurmrestd's JSON
(rest/), the commands' output (cli/), slurmrestd's OpenAPI document, and INDEX.md / index.json (what
ran, as whom, with which body, what it answered). As root, from the repository:

    .venv/bin/python tests/golden/slurm22/capture.py [--no-timeout]

--no-timeout skips the job that reaches its time limit (alone 60 to 90 s: Slurm checks limits every
30 s). Every file is rewritten. Ids, times, paths (/tmp/xce-slurm-*) and the host's name differ from
run to run; the shapes, field names, states, reasons and messages do not."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent.parent.parent)]  # tests/ and the repository

from slurm_peer import API, SlurmPeer, slurm_peer  # noqa: E402

USER = "nobody"  # the REST jobs' owner (a user's own token); the sbatch jobs are root's
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY",
         "DEADLINE", "PREEMPTED")
Trim = Callable[[dict[str, Any]], str]


def wait_for(probe: Callable[[], object], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def keep_one(key: str) -> Trim:
    """Cut the answer's list `key` to its first item; say so."""
    def trim(answer: dict[str, Any]) -> str:
        items = answer.get(key) or []
        answer[key] = items[:1]
        return f"{key}: first of {len(items)} kept" if len(items) > 1 else ""
    return trim


def keep_one_of_all(answer: dict[str, Any]) -> str:
    jobs = answer.get("jobs") or []
    answer["jobs"] = jobs[:1]
    states = ", ".join(f"{j['job_id']} {j['name'] or '(no name)'} {j['job_state']}" for j in jobs)
    return f"jobs: first of {len(jobs)} kept; all were: {states}"


class Capture:
    def __init__(self, peer: SlurmPeer) -> None:
        self.peer = peer
        self.index: list[dict[str, Any]] = []
        self.tokens = {USER: peer.token(USER), "root": peer.token("root")}
        self.http = httpx.Client(base_url=peer.rest_url, timeout=60)
        for sub in ("rest", "cli"):
            (HERE / sub).mkdir(exist_ok=True)
            for old in (HERE / sub).iterdir():
                old.unlink()

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
             user: str | None = USER, token_of: str | None = USER) -> httpx.Response:
        """A request with X-SLURM-USER-NAME `user` and the token of `token_of` (a name, or the token)."""
        headers = {}
        if user is not None:
            headers["X-SLURM-USER-NAME"] = user
        if token_of is not None:
            headers["X-SLURM-USER-TOKEN"] = self.tokens.get(token_of, token_of)
        content = raw if raw is not None else json.dumps(body).encode() if body is not None else None
        if content is not None:
            headers["Content-Type"] = "application/json"
        return self.http.request(method, path, content=content, headers=headers)

    def rest(self, name: str, method: str, path: str, body: Any = None, raw: bytes | None = None,
             user: str | None = USER, token_of: str | None = USER, trim: Trim | None = None,
             note: str = "") -> dict[str, Any]:
        """One request, its answer saved as rest/NAME.json (as slurmrestd wrote it, unless trimmed:
        then re-serialized, indent 2) or rest/NAME.txt (not JSON); the JSON answer returned."""
        answer = self.call(method, path, body, raw, user, token_of)
        text = answer.text
        try:
            parsed: dict[str, Any] = answer.json()
        except ValueError:
            parsed = {}
        trimmed = ""
        if parsed and trim is not None:
            trimmed = trim(parsed)
            text = json.dumps(parsed, indent=2) + "\n"
        file = f"rest/{name}.json" if parsed else f"rest/{name}.txt"
        (HERE / file).write_text(text)
        token = {USER: f"{USER}'s", "root": "root's", None: "no"}.get(token_of, "a forged")
        self.index.append({"file": file, "kind": "rest", "method": method, "path": path,
                           "request": raw.decode() if raw is not None else body,
                           "X-SLURM-USER-NAME": user, "token": token, "status": answer.status_code,
                           "content_type": answer.headers.get("content-type", ""), "trimmed": trimmed,
                           "note": note})
        return parsed

    def job(self, job_id: int) -> dict[str, Any]:
        jobs: list[dict[str, Any]] = self.call("GET", f"{API}/job/{job_id}").json()["jobs"]
        return jobs[0]

    def state(self, job_id: int) -> str:
        return str(self.job(job_id)["job_state"])

    def ended(self, *job_ids: int) -> None:
        for job_id in job_ids:
            wait_for(lambda j=job_id: self.state(j) in ENDED, f"job {job_id} ended")  # type: ignore[misc]

    def submit(self, name: str, script: str, note: str = "", **job: Any) -> int:
        """A job of USER's through REST (not a golden itself: listed in INDEX.md's jobs)."""
        body = {"script": script, "job": {"name": name, "current_working_directory": str(self.peer.jobs_dir),
                                          "environment": ENV, **job}}
        answer = self.call("POST", f"{API}/job/submit", body)
        assert answer.status_code == 200, answer.text
        job_id: int = answer.json()["job_id"]
        self.index.append({"job": job_id, "kind": "job", "via": f"REST as {USER}", "name": name,
                           "request": body, "note": note})
        return job_id

    def cli(self, name: str, *argv: str, note: str = "",
            trim: Callable[[str], tuple[str, str]] | None = None) -> str:
        """A command as root in the jobs' directory: stdout to cli/NAME.out, stderr (if any) cli/NAME.err."""
        done = self.peer.run(*argv)
        out, trimmed = trim(done.stdout) if trim is not None else (done.stdout, "")
        (HERE / f"cli/{name}.out").write_text(out)
        files = [f"cli/{name}.out"]
        if done.stderr:
            (HERE / f"cli/{name}.err").write_text(done.stderr)
            files.append(f"cli/{name}.err")
        self.index.append({"file": ", ".join(files), "kind": "cli", "command": shlex.join(argv),
                           "rc": done.returncode, "trimmed": trimmed, "note": note})
        return done.stdout


def squeue_json_one(text: str) -> tuple[str, str]:
    parsed = json.loads(text)
    trimmed = keep_one("jobs")(parsed)
    return json.dumps(parsed, indent=2) + "\n", trimmed


def full_cluster(c: Capture) -> dict[str, int]:
    """n1 runs two REST jobs of one CPU, n2 a 2-CPU sbatch job; three jobs wait. Their ids by name."""
    jobs = c.peer.jobs_dir
    answer = c.rest("job_submit", "POST", f"{API}/job/submit",
                    {"script": "#!/bin/sh\nsleep 300\n",
                     "job": {"name": "rest-timeout", "time_limit": 1, "current_working_directory": str(jobs),
                             "environment": ENV}},
                    note="job rest-timeout: time_limit 1 (minute), killed by Slurm at its limit")
    ids = {"rest-timeout": int(answer["job_id"])}
    c.index.append({"job": ids["rest-timeout"], "kind": "job", "via": f"REST as {USER}",
                    "name": "rest-timeout", "request": c.index[-1]["request"],
                    "note": "its answer is rest/job_submit.json"})
    ids["rest-running"] = c.submit(
        "rest-running", "#!/bin/sh\ntrap 'echo got USR1' USR1\nwhile :; do sleep 1; done\n",
        note="traps USR1; signalled, then cancelled (DELETE)",
        standard_output=str(jobs / "rest-running-%j.out"))
    wait_for(lambda: c.state(ids["rest-timeout"]) == c.state(ids["rest-running"]) == "RUNNING",
             "the REST jobs running")
    out = c.cli("sbatch", "sbatch", "-J", "cli-wide", "-N", "1", "-n", "2", "--wrap", "sleep 300",
                note="job cli-wide: both CPUs of n2; cancelled with scancel")
    ids["cli-wide"] = int(out.split()[-1])
    ids["cli-pending"] = int(c.cli("sbatch_parsable", "sbatch", "--parsable", "-J", "cli-pending",
                                   "-n", "2", "--wrap", "sleep 1",
                                   note="job cli-pending: waits for resources; cancelled"))
    ids["rest-pending"] = c.submit("rest-pending", "#!/bin/sh\nsleep 1\n", note="waits behind cli-pending")
    held = {"script": "#!/bin/sh\nsleep 1\n",
            "job": {"name": "rest-held", "hold": True, "current_working_directory": str(jobs),
                    "environment": ENV}}
    ids["rest-held"] = c.rest("job_submit_held", "POST", f"{API}/job/submit", held,
                              note="HTTP 200 and a job id, with an entry in errors (2042)")["job_id"]
    c.index.append({"job": ids["rest-held"], "kind": "job", "via": f"REST as {USER}", "name": "rest-held",
                    "request": held, "note": 'submitted held (its answer: rest/job_submit_held.json); '
                                             'released by POST {"hold": false}, held again, cancelled'})
    wait_for(lambda: c.state(ids["cli-wide"]) == "RUNNING", "cli-wide running")
    wait_for(lambda: c.job(ids["cli-pending"])["state_reason"] == "Resources", "cli-pending waiting")
    wait_for(lambda: c.job(ids["rest-pending"])["state_reason"] not in ("None", ""), "rest-pending's reason")
    return ids


def views_of_a_full_cluster(c: Capture, ids: dict[str, int]) -> None:
    c.cli("squeue", "squeue")
    c.cli("squeue_format", "squeue", "-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R")
    c.cli("squeue_json", "squeue", "--json", trim=squeue_json_one)
    c.cli("sinfo", "sinfo")
    c.cli("sinfo_N", "sinfo", "-N")
    c.cli("scontrol_show_job_pending", "scontrol", "show", "job", str(ids["cli-pending"]))
    c.cli("scontrol_show_job_running", "scontrol", "show", "job", str(ids["cli-wide"]))
    c.cli("scontrol_show_job_held", "scontrol", "show", "job", str(ids["rest-held"]))
    c.cli("scontrol_show_node_n1", "scontrol", "show", "node", "n1")
    c.cli("scontrol_show_partition", "scontrol", "show", "partition")
    c.rest("job_pending", "GET", f"{API}/job/{ids['rest-pending']}")
    c.rest("job_pending_resources", "GET", f"{API}/job/{ids['cli-pending']}", note="root's sbatch job")
    c.rest("job_held", "GET", f"{API}/job/{ids['rest-held']}")
    c.rest("job_running", "GET", f"{API}/job/{ids['rest-running']}")
    c.rest("jobs", "GET", f"{API}/jobs", trim=keep_one("jobs"))
    c.rest("nodes", "GET", f"{API}/nodes", note="n1 and n2, both allocated")
    c.rest("node_n1", "GET", f"{API}/node/n1")
    c.rest("partitions", "GET", f"{API}/partitions")
    c.rest("partition_normal", "GET", f"{API}/partition/normal")
    c.rest("ping", "GET", f"{API}/ping")
    c.rest("diag", "GET", f"{API}/diag")


def update_signal_cancel(c: Capture, ids: dict[str, int]) -> None:
    pending, held, running, wide = ids["rest-pending"], ids["rest-held"], ids["rest-running"], ids["cli-wide"]
    c.rest("job_update_time_limit", "POST", f"{API}/job/{pending}", {"time_limit": 5})
    c.rest("job_after_update", "GET", f"{API}/job/{pending}", note="time_limit now 5")
    c.rest("job_release", "POST", f"{API}/job/{held}", {"hold": False})
    c.rest("job_released", "GET", f"{API}/job/{held}")
    c.rest("job_hold_again", "POST", f"{API}/job/{held}", {"hold": True})
    c.rest("job_held_again", "GET", f"{API}/job/{held}")
    c.rest("job_update_priority", "POST", f"{API}/job/{pending}", {"priority": "100"}, note="by a user")
    c.rest("job_update_unknown", "POST", f"{API}/job/999999", {"time_limit": 5})
    c.rest("job_signal", "DELETE", f"{API}/job/{running}?signal=USR1")
    c.rest("job_signal_bad", "DELETE", f"{API}/job/{running}?signal=NOPE")
    output = c.peer.jobs_dir / f"rest-running-{running}.out"
    try:  # the trap runs when the loop's `sleep 1` returns
        wait_for(lambda: output.exists() and "got USR1" in output.read_text(), "USR1 trapped", timeout_s=5)
    except AssertionError:
        c.index[-2]["note"] = "the job's shell did not see USR1 within 5 s"
    c.rest("job_cancel", "DELETE", f"{API}/job/{running}")
    wait_for(lambda: c.state(running) == "CANCELLED", "rest-running cancelled")
    c.rest("job_cancelled", "GET", f"{API}/job/{running}")
    c.rest("job_cancel_again", "DELETE", f"{API}/job/{running}", note="a job already cancelled")
    c.rest("job_cancel_unknown", "DELETE", f"{API}/job/999999")
    c.rest("job_cancel_other_user", "DELETE", f"{API}/job/{wide}", note=f"root's job, by {USER}")
    c.cli("scancel", "scancel", str(wide), note="silent when it succeeds")
    c.cli("scancel_bad_id", "scancel", "999999",
          note="silent, rc 0: 22.05 reports an unknown id only with -v or a signal")
    c.cli("scancel_v_bad_id", "scancel", "-v", "999999", note="the error printed, rc still 0")
    c.cli("scancel_signal_bad_id", "scancel", "--signal=USR1", "999999")
    c.cli("scancel_not_an_id", "scancel", "abc")
    c.cli("scancel_pending", "scancel", str(ids["cli-pending"]), str(pending), str(held))
    wait_for(lambda: c.state(wide) == "CANCELLED", "cli-wide cancelled")
    c.cli("scontrol_show_job_cancelled", "scontrol", "show", "job", str(wide))


def ends(c: Capture, ids: dict[str, int]) -> None:
    ids["rest-done"] = c.submit("rest-done", "#!/bin/sh\necho hello\n", note="prints hello",
                                standard_output=str(c.peer.jobs_dir / "rest-done-%j.out"))
    ids["rest-exit3"] = c.submit("rest-exit3", "#!/bin/sh\necho failing >&2\nexit 3\n", note="exits 3")
    ids["cli-done"] = int(c.cli("sbatch_done", "sbatch", "--parsable", "-J", "cli-done",
                                "--wrap", "echo done"))
    ids["cli-exit3"] = int(c.cli("sbatch_exit3", "sbatch", "--parsable", "-J", "cli-exit3",
                                 "--wrap", "exit 3"))
    c.ended(ids["rest-done"], ids["rest-exit3"], ids["cli-done"], ids["cli-exit3"])
    c.rest("job_completed", "GET", f"{API}/job/{ids['rest-done']}")
    c.rest("job_failed_exit3", "GET", f"{API}/job/{ids['rest-exit3']}")
    c.cli("scontrol_show_job_completed", "scontrol", "show", "job", str(ids["cli-done"]))
    c.cli("scontrol_show_job_failed", "scontrol", "show", "job", str(ids["cli-exit3"]))
    c.cli("scancel_ended_job", "scancel", str(ids["cli-done"]), note="an ended job: silent, rc 0")
    c.cli("scancel_v_ended_job", "scancel", "-v", str(ids["cli-done"]))
    ids["rest-array"] = c.submit("rest-array", "#!/bin/sh\necho element $SLURM_ARRAY_TASK_ID\n", array="0-2",
                                 note="an array of 3 elements")
    wait_for(lambda: all(j["job_state"] in ENDED
                         for j in c.call("GET", f"{API}/job/{ids['rest-array']}").json()["jobs"]),
             "the array's elements ended")
    c.rest("job_array", "GET", f"{API}/job/{ids['rest-array']}", note="the array's id: every element")
    c.rest("job_array_element", "GET", f"{API}/job/{ids['rest-array']}_1", note="ARRAYID_INDEX: that element")
    c.cli("squeue_after", "squeue", note="ended jobs leave squeue's default view")
    c.cli("squeue_all_states", "squeue", "-t", "all")
    c.rest("jobs_all", "GET", f"{API}/jobs", trim=keep_one_of_all,
           note="every job still in slurmctld's memory (MinJobAge=600)")
    c.rest("jobs_not_modified", "GET", f"{API}/jobs?update_time={int(time.time()) + 3600}",
           note="nothing changed since update_time: HTTP 304, no body")


def errors(c: Capture, ids: dict[str, int]) -> None:
    jobs = str(c.peer.jobs_dir)
    submit = f"{API}/job/submit"
    c.rest("error_unknown_job", "GET", f"{API}/job/999999")
    c.rest("error_job_id_not_a_number", "GET", f"{API}/job/abc")
    c.rest("error_submit_not_json", "POST", submit, raw=b"{not json")
    c.rest("error_submit_no_environment", "POST", submit,
           {"script": "#!/bin/sh\ntrue\n", "job": {"current_working_directory": jobs}})
    c.rest("error_submit_no_script", "POST", submit,
           {"job": {"current_working_directory": jobs, "environment": ENV}})
    c.rest("error_submit_no_job", "POST", submit, {"script": "#!/bin/sh\ntrue\n"})
    c.rest("error_submit_unknown_key", "POST", submit,
           {"script": "#!/bin/sh\ntrue\n", "job": {"environment": ENV, "bogus": 1}})
    c.rest("error_submit_unknown_partition", "POST", submit,
           {"script": "#!/bin/sh\ntrue\n",
            "job": {"environment": ENV, "partition": "nope", "current_working_directory": jobs}})
    ids["no-shebang"] = c.rest(
        "submit_no_shebang", "POST", submit,
        {"script": "echo no interpreter line\n",
         "job": {"name": "no-shebang", "environment": ENV, "current_working_directory": jobs}},
        note="accepted (sbatch refuses such a script): see rest/job_no_shebang.json")["job_id"]
    c.rest("error_no_auth", "GET", f"{API}/jobs", user=None, token_of=None)
    c.rest("error_token_without_user_name", "GET", f"{API}/ping", user=None, note="X-SLURM-USER-TOKEN alone")
    c.rest("error_bad_token", "GET", f"{API}/jobs", token_of="eyJhbGciOiJIUzI1NiJ9.e30.forged")
    c.rest("error_user_token_as_root", "GET", f"{API}/jobs", user="root",
           note="a user's token with another user's name: refused by slurmctld")
    c.rest("error_user_token_as_root_submit", "POST", submit,
           {"script": "#!/bin/sh\nid -un\n",
            "job": {"name": "not-impersonated", "environment": ENV, "current_working_directory": jobs}},
           user="root", note="the same, a submit")
    ids["impersonated"] = c.rest(
        "root_token_as_user_submit", "POST", submit,
        {"script": "#!/bin/sh\nid -un\n",
         "job": {"name": "impersonated", "environment": ENV, "current_working_directory": jobs}},
        token_of="root", note=f"root's token, X-SLURM-USER-NAME {USER}: the job is {USER}'s")["job_id"]
    c.rest("error_unknown_path", "GET", f"{API}/nothing")
    c.rest("error_unknown_version", "GET", "/slurm/v0.0.39/jobs")
    c.cli("sbatch_bad_option", "sbatch", "--bogus-option", "--wrap", "true")
    c.cli("sbatch_unknown_partition", "sbatch", "-p", "nope", "--wrap", "true")
    c.cli("sbatch_no_shebang", "sh", "-c", "echo 'echo no interpreter line' | sbatch")
    c.cli("sacct", "sacct", note="AccountingStorageType=accounting_storage/none")
    c.cli("sacct_j", "sacct", "-j", str(ids["cli-done"]))
    c.cli("squeue_bad_id", "squeue", "-j", "999999")
    c.ended(ids["no-shebang"], ids["impersonated"])
    c.rest("job_no_shebang", "GET", f"{API}/job/{ids['no-shebang']}")
    c.rest("job_impersonated", "GET", f"{API}/job/{ids['impersonated']}",
           note=f"submitted with root's token for {USER}: user_name {USER}")


def main() -> None:
    with slurm_peer() as peer:
        c = Capture(peer)
        print(f"peer up in {peer.started_s:.2f} s at {peer.dir}", file=sys.stderr)
        started = time.monotonic()
        ids = full_cluster(c)
        views_of_a_full_cluster(c, ids)
        update_signal_cancel(c, ids)
        ends(c, ids)
        errors(c, ids)
        if "--no-timeout" in sys.argv:
            c.call("DELETE", f"{API}/job/{ids['rest-timeout']}")
        else:
            wait_for(lambda: c.state(ids["rest-timeout"]) == "TIMEOUT", "rest-timeout timed out",
                     timeout_s=150)
            c.rest("job_timeout", "GET", f"{API}/job/{ids['rest-timeout']}")
            c.cli("scontrol_show_job_timeout", "scontrol", "show", "job", str(ids["rest-timeout"]))
        (HERE / "openapi_v3.json").write_text(c.call("GET", "/openapi/v3").text)
        outputs = {p.name: p.read_text() for p in sorted(peer.jobs_dir.glob("rest-*.out"))}
        for job_id in (ids["no-shebang"], ids["impersonated"]):
            output = peer.jobs_dir / f"slurm-{job_id}.out"
            outputs[output.name] = output.read_text() if output.exists() else "(no file)"
        write_index(c, peer, outputs, time.monotonic() - started)


HEADER = """\
# Goldens of a real Slurm 22.05.8 (Debian 12's slurm-wlm and slurmrestd)

Captured by `capture.py` (as root: `.venv/bin/python tests/golden/slurm22/capture.py`) from the peer
of `tests/slurm_peer.py`: one slurmctld, nodes n1 and n2 of 2 CPUs (RealMemory=1000), partition
`normal` (Default=YES, MaxTime=INFINITE), `SchedulerParameters=batch_sched_delay=0,bf_interval=1`,
`SelectType=select/cons_tres` (`CR_Core`), no accounting (`accounting_storage/none`), `KillWait=2`,
`MinJobAge=600` (the slurm.conf is `tests/peers/slurm/up.sh`'s); slurmrestd runs
`-a rest_auth/jwt -s openapi/v0.0.38`. Files are raw (what Slurm printed, byte for byte) unless the
table says trimmed: then the JSON was parsed, an array cut to its first item, and re-serialized
(indent 2, so `/` is no longer escaped as `\\/`). `index.json` holds what this file does, with the
request bodies whole. What the answers mean: `REST_NOTES.md`.

Capture took {seconds:.0f} s (the time limit's job alone takes 60 to 90 s); the peer started in
{started:.2f} s.

## The jobs

REST jobs are `{user}`'s (submitted with {user}'s own token and `X-SLURM-USER-NAME: {user}`), in
`current_working_directory` = the peer's jobs directory (mode 1777), with `environment` =
`{env}`; sbatch jobs are root's, submitted from that directory. In order: `rest-timeout` and
`rest-running` fill n1, `cli-wide` fills n2, so `cli-pending` waits (Resources), `rest-pending`
behind it (Priority), `rest-held` held; then updates, a signal, cancels; then `rest-done`,
`rest-exit3`, `cli-done`, `cli-exit3` on the freed CPUs; errors; `rest-timeout` reaches its limit
last.

| job | via | name | script, options | note |
|---|---|---|---|---|
"""


def _notes(entry: dict[str, Any]) -> str:
    return "; ".join(x for x in (entry["trimmed"], entry["note"]) if x)


def write_index(c: Capture, peer: SlurmPeer, outputs: dict[str, str], seconds: float) -> None:
    (HERE / "index.json").write_text(json.dumps(c.index, indent=1) + "\n")
    text = HEADER.format(seconds=seconds, started=peer.started_s, user=USER, env=json.dumps(ENV))
    lines = text.rstrip("\n").split("\n")
    for entry in c.index:
        if entry["kind"] == "job":
            job = entry["request"]["job"]
            options = {k: v for k, v in job.items()
                       if k not in ("name", "environment", "current_working_directory")}
            script = json.dumps(entry["request"]["script"])
            lines.append(f"| {entry['job']} | {entry['via']} | {entry['name']} | `{script}` "
                         f"{json.dumps(options) if options else ''} | {entry['note']} |")
        elif entry["kind"] == "cli" and entry["command"].startswith("sbatch") and entry["rc"] == 0:
            lines.append(f"| id in {entry['file']} | sbatch as root | | `{entry['command']}` | "
                         f"{entry['note']} |")
    lines += ["", "## Files", "", "| file | what ran | answer | trimmed, note |", "|---|---|---|---|"]
    for entry in c.index:
        if entry["kind"] == "rest":
            body = "" if entry["request"] is None else f" `{json.dumps(entry['request'])[:150]}`"
            who = f"user `{entry['X-SLURM-USER-NAME']}`, {entry['token']} token"
            lines.append(f"| {entry['file']} | `{entry['method']} {entry['path']}`{body} ({who}) | "
                         f"HTTP {entry['status']} `{entry['content_type']}` | {_notes(entry)} |")
        elif entry["kind"] == "cli":
            lines.append(f"| {entry['file']} | `{entry['command']}` (root) | rc {entry['rc']} | "
                         f"{_notes(entry)} |")
    lines += ["| openapi_v3.json | `GET /openapi/v3` (user nobody, nobody's token) | HTTP 200 | "
              "the whole OpenAPI 3.0.2 document of openapi/v0.0.38 |", "",
              "## The REST jobs' output files", ""]
    for name, output in outputs.items():
        lines += [f"`{name}`:", "", "```", output.rstrip("\n"), "```", ""]
    (HERE / "INDEX.md").write_text("\n".join(lines).rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
