"""LSF's commands (cli/lsf/) on PATH against a live cluster, run as LSF's users and tools run them:
bsub with command lines, job scripts on stdin and as files, the submitter's environment, every LSB_*
variable in a job, an array's element and a blaunch task; bjobs' views and messages; bkill, bstop,
bresume, brequeue; bhist, bqueues, bhosts, lsid, lsclusters and badmin showconf as the workflow tools
parse them; another user's refusals, as a real unprivileged uid."""

from __future__ import annotations

import itertools
import json
import os
import pwd
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import lsf_site
import pytest
from conftest import FAST_HOSTS, wait_until
from lsf_site import SUBMITTED, Site

from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

# A fair-share queue that gives user groups shares (this user is in staff; nobody in guests).
USER_GROUPS = f"""
[user_groups]
staff = ["{pwd.getpwuid(os.geteuid()).pw_name}"]
guests = ["nobody"]
everyone = ["staff", "guests"]

[[queues]]
name = "shared"
priority = 25
job_pick_plugin = "fairshare"
fairshare = {{ groups = {{ staff = 3, guests = 1 }} }}

[[queues]]
name = "chunky"
priority = 25
chunk_job_size = 3
"""


@pytest.fixture(scope="module")
def site(reachable_by_nobody: None) -> Iterator[Site]:
    with lsf_site.site(FAST_HOSTS + USER_GROUPS) as made:
        yield made


def test_bsub_runs_a_command_line_through_the_shell_with_the_submitter_s_environment(site: Site) -> None:
    env = site.env(MY_SETTING="42")
    job = site.submit("bsub -o out.%J 'echo $MY_SETTING; echo err >&2; echo $LSB_JOBNAME'", env=env)
    assert site.finished(job).state == api.DONE
    assert (site.home / "shared" / f"out.{job}").read_text().splitlines() == \
        ["42", "err", "echo $MY_SETTING; echo err >&2; echo $LSB_JOBNAME"]  # -o alone: both streams
    bare = site.submit("bsub -env none -o bare.%J 'echo ${MY_SETTING:-unset} $PATH'", env=env)
    site.finished(bare)
    assert (site.home / "shared" / f"bare.{bare}").read_text().strip() == "unset /usr/local/bin:/usr/bin:/bin"


def test_bsub_takes_a_job_script_on_stdin_and_as_a_file_the_command_line_winning(site: Site) -> None:
    script = ("#!/bin/bash\n#BSUB -J scripted\n#BSUB -q idle\n#BSUB -n 2\n#BSUB -R \"span[hosts=1]\"\n"
              "#BSUB -o script.%J.out\n#BSUB -W 00:30\n#BSUB -M 100\n#BSUB -P \"proj1\"\n"
              'echo "$0 $LSB_JOBNAME $LSB_QUEUE $LSB_DJOB_NUMPROC $LSB_PROJECT_NAME ${BASH_VERSION:+bash}"\n')
    (site.home / "shared" / "job.sh").write_text(script)
    piped = site.submit("bsub< job.sh 2> /dev/null")  # what dask-jobqueue runs
    as_file = site.submit("bsub -q normal job.sh")
    for job, queue, name in ((piped, "idle", "job_script"), (as_file, "normal", "job.sh")):
        done = site.finished(job)
        assert done.state == api.DONE and done.spec.queue == queue
        assert (done.spec.slots, done.spec.run_limit_s, done.spec.mem_limit_mb) == (2, 1800, 100)
        out = (site.home / "shared" / f"script.{job}.out").read_text().split()
        assert out == [name, "scripted", queue, "2", "proj1", "bash"]


def test_every_lsb_variable_in_an_element_and_a_blaunch_task(site: Site) -> None:
    probe = ("import json, os, sys; json.dump({k: v for k, v in os.environ.items() "
             "if k.startswith(('LSB_', 'LSF_'))}, open(sys.argv[1], 'w'))")
    (site.home / "shared" / "probe.py").write_text(probe)
    line = (f"bsub -J 'vars[1-3]' -n 2 -R 'span[hosts=1]' -P chem -o vars.%J.%I.out -e vars.%J.%I.err "
            f"'{sys.executable} probe.py job.$LSB_JOBINDEX.json && "
            f"$LSF_BINDIR/blaunch ${{LSB_HOSTS%% *}} {sys.executable} probe.py task.$LSB_JOBINDEX.json'")
    array = site.submit(line)
    with site.cluster.client() as client:
        wait_until(lambda: client.get_job(array).array.counts[api.DONE] == 3, "3 elements done", timeout_s=90)
    shared = site.home / "shared"
    for where in ("job", "task"):
        got = json.loads((shared / f"{where}.2.json").read_text())
        host = got["LSB_HOSTS"].split()[0]
        assert (got["LSB_JOBID"], got["LSB_JOBINDEX"], got["LSB_JOBINDEX_END"]) == (str(array), "2", "3")
        assert got["LSB_BATCH_JID"] == f"{array}[2]" and got["LSB_JOBNAME"] == "vars[2]"
        assert (got["LSB_QUEUE"], got["LSB_PROJECT_NAME"]) == ("normal", "chem")
        assert (got["LSB_SUBCWD"], got["LSB_SUB_HOST"]) == (str(shared), socket.gethostname())
        assert (got["LSB_HOSTS"], got["LSB_MCPU_HOSTS"], got["LSB_DJOB_NUMPROC"]) == \
            (f"{host} {host}", f"{host} 2", "2")
        assert Path(got["LSB_DJOB_HOSTFILE"]).name and got["LSF_BINDIR"] == site.bin
        assert (got["LSB_OUTPUTFILE"], got["LSB_ERRORFILE"]) == (f"vars.{array}.2.out", f"vars.{array}.2.err")


def test_bjobs_views_and_messages_as_the_tools_parse_them(site: Site) -> None:
    job = site.submit("bsub -J 'Snakemake_rule_a:s=1___(3f2e-aa)' true")
    site.finished(job)
    running = site.submit("bsub -J long sleep 300")
    with site.cluster.client() as client:
        wait_until(lambda: client.get_job(running).state == api.RUN, "the long job runs")
    # Snakemake's LSF executor's poll, verbatim: finished jobs stay listed under -a.
    polled = site.lsf("bjobs -noheader -o 'jobid stat' -aJ '*3f2e-aa*'")
    assert (polled.returncode, polled.stdout) == (0, f"{job} DONE\n")
    table = site.lsf("bjobs").stdout.splitlines()
    assert table[0] == "JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME"
    assert any(row.startswith(f"{running:<7} root    RUN   normal     ") and " long " in row for row in table)
    assert not any(row.startswith(f"{job} ") for row in table)  # finished: only with -a
    records = json.loads(site.lsf(f"bjobs -json -o 'jobid stat exec_host' {running}").stdout)
    assert records["JOBS"] == 1 and records["RECORDS"][0]["STAT"] == "RUN"
    missing = site.lsf("bjobs 99999")
    assert (missing.returncode, missing.stderr) == (255, "Job <99999> is not found\n")
    nothing = site.lsf("bjobs", as_nobody=True)
    assert (nothing.returncode, nothing.stdout, nothing.stderr) == (255, "", "No unfinished job found\n")
    killed = site.lsf(f"bkill {running}")
    assert (killed.returncode, killed.stdout) == (0, f"Job <{running}> is being terminated\n")
    assert site.finished(running).state == api.EXIT


def test_bkill_bstop_bresume_and_their_refusals(site: Site) -> None:
    job = site.submit("bsub sleep 300")
    with site.cluster.client() as client:
        wait_until(lambda: client.get_job(job).state == api.RUN, "it runs")
        assert site.lsf(f"bstop {job}").stdout == f"Job <{job}> is being stopped\n"
        wait_until(lambda: client.get_job(job).state == api.USUSP, "it is stopped")
        assert site.lsf(f"bresume {job}").stdout == f"Job <{job}> is being resumed\n"
        wait_until(lambda: client.get_job(job).state == api.RUN, "it runs again")
    theirs = site.lsf(f"bkill {job}", as_nobody=True)
    assert (theirs.returncode, theirs.stderr) == (255, f"Job <{job}>: User permission denied\n")
    assert site.lsf(f"bkill -s TERM {job}").stdout == f"Job <{job}> is being signaled\n"
    site.finished(job)
    again = site.lsf(f"bkill {job} 99999")
    assert again.returncode == 255
    assert again.stderr == f"Job <{job}>: Job has already finished\nJob <99999>: No matching job found\n"


def test_bkill_0_ends_every_job_of_the_caller_only(site: Site) -> None:
    mine = [site.submit("bsub sleep 300") for _ in range(2)]
    theirs = site.lsf("bsub sleep 300", as_nobody=True)
    assert theirs.returncode == 0, theirs.stderr
    their_job = int(SUBMITTED.match(theirs.stdout.strip())[1])  # type: ignore[index]
    killed = site.lsf("bkill 0", as_nobody=True)
    assert killed.stdout == f"Job <{their_job}> is being terminated\n"
    assert site.finished(their_job).state == api.EXIT
    with site.cluster.client() as client:
        assert all(client.get_job(j).state in (api.PEND, api.RUN) for j in mine)
    said = sorted(site.lsf("bkill 0").stdout.splitlines())
    assert said == sorted(f"Job <{j}> is being terminated" for j in mine)


def test_wait_returns_the_job_s_exit_code(site: Site) -> None:
    waited = site.lsf("bsub -K 'exit 3'")
    assert waited.returncode == 3 and "<<Job is finished>>" in waited.stderr


@pytest.mark.parametrize("line", ["bsub -n4 true", "bsub -R1 true", "bsub -env all -outdi /tmp true",
                                  "bsub --queue normal true", "bsub -L /bin/csh true", "bsub -q nope true",
                                  "bsub -M lots true", "bsub -env 'all, ~' true", "bsub < /dev/null"])
def test_a_misparse_is_refused_in_one_line_and_nothing_is_submitted(site: Site, line: str) -> None:
    with site.cluster.client() as client:
        before = client.list_jobs()
        result = site.lsf(line)
        assert result.returncode == 255 and result.stdout == ""
        assert result.stderr.startswith(("bsub: ", "nope: No such queue")), result.stderr
        assert "Job not submitted." in result.stderr or "illegal option" in result.stderr
        assert len(result.stderr.splitlines()) == 1 or "Usage: bsub" in result.stderr
        assert client.list_jobs() == before


def test_what_snakemake_and_dask_read_at_start(site: Site) -> None:
    conf = site.lsf("badmin showconf mbd")
    assert conf.returncode == 0, conf.stderr
    lines = conf.stdout.strip().split("\n")
    # Snakemake's parse, verbatim:
    config = {x[0]: x[1] for x in [tuple(line.strip().split(" = ")) for line in lines][1:]}
    cluster = site.lsf("lsclusters").stdout.split("\n")[1].split()[0]
    params = Path(config["LSF_CONFDIR"]) / "lsbatch" / cluster / "configdir" / "lsb.params"
    assert "DEFAULT_QUEUE = normal" in params.read_text()
    assert config["LSF_UNIT_FOR_LIMITS"] == "MB" and Path(config["LSB_SHAREDIR"]).is_dir()
    profile = Path(site.bin).parent / "conf" / "lsf.conf"
    assert "LSF_UNIT_FOR_LIMITS=MB" in profile.read_text().splitlines()  # dask-jobqueue's lsf_detect_units
    job = site.submit("bsub -P genomics true")
    site.finished(job)
    history = site.lsf("bhist -l -a | grep Project").stdout
    assert re.findall(r"Project <([^<>]+)>", history).count("genomics") == 1
    assert site.lsf("lsid").stdout.startswith("IBM Spectrum LSF Standard 10.1")
    queues = site.lsf("bqueues normal").stdout.splitlines()
    assert queues[0].split() == ["QUEUE_NAME", "PRIO", "STATUS", "MAX", "JL/U", "JL/P", "JL/H", "NJOBS",
                                 "PEND", "RUN", "SUSP"]
    assert queues[1].split()[:3] == ["normal", "30", "Open:Active"]
    hosts = site.lsf("bhosts").stdout.splitlines()
    assert [row.split()[:2] for row in hosts[1:]] == [["w1", "ok"], ["w2", "ok"]]


def test_held_begin_termination_pre_and_post_exec(site: Site) -> None:
    shared = site.home / "shared"
    held = site.submit("bsub -H -o held.%J 'echo released'")
    with site.cluster.client() as client:
        assert client.get_job(held).state == api.PSUSP
        said = site.lsf(f"bjobs -o 'stat pend_reason' -noheader {held}").stdout
        assert said.startswith("PSUSP held at submission")
        assert site.lsf(f"bresume {held}").stdout == f"Job <{held}> is being resumed\n"
        assert site.finished(held).state == api.DONE

        # -b and -t as their times (bsub takes minutes; the job's fields, milliseconds).
        now = int(time.time() * 1000)
        begins = client.submit([api.JobSpec(command=["true"], cwd="/tmp", begin_time_ms=now + 1500)])
        ends = client.submit([api.JobSpec(command=["sleep", "60"], cwd="/tmp", term_time_ms=now + 1500)])
        warned = shared / f"warned.{os.getpid()}"  # a job that saves its work on LSF's SIGUSR2, and ends
        saves = client.submit([api.JobSpec(command=["sh", "-c", f'trap "echo saved > {warned}; exit 0" USR2; '
                                                    "while :; do sleep 0.1; done"], cwd="/tmp",
                                           term_time_ms=now + 1500)])
        begins, ends, saves = begins.jobs[0].id, ends.jobs[0].id, saves.jobs[0].id
        begun = site.finished(begins)
        assert begun.state == api.DONE and begun.start_time_ms >= now + 1500
        killed = site.finished(ends)
        assert (killed.state, killed.exit_reason, killed.term_signal) == (api.EXIT, "DEADLINE", 12)  # USR2
        assert site.lsf(f"bjobs -o 'exit_reason' -noheader {ends}").stdout == "TERM_DEADLINE\n"
        saved = site.finished(saves)
        assert (saved.state, saved.exit_reason, warned.read_text()) == (api.DONE, "DEADLINE", "saved\n")

        # -E: the job pends again while its pre-exec fails, and runs once it passes.
        flag = shared / f"ready.{os.getpid()}"
        pre = site.submit(f"bsub -E 'test -e {flag}' -o pre.%J 'echo ran'")
        waiting = wait_until(lambda: (j := client.get_job(pre)).pending_code == api.PEND_START_RETRY and j,
                             "the pre-exec failed once")
        assert waiting.state == api.PEND and "pre-exec (-E): exited 1" in waiting.pending_reason
        flag.touch()
        assert site.finished(pre).state == api.DONE
        assert (shared / f"pre.{pre}").read_text() == "ran\n"

        # -Ep: after the job, whatever its end, with its wait status.
        post = site.submit(f"bsub -Ep 'echo post $LSB_JOBEXIT_STAT > post.{os.getpid()}' 'exit 3'")
        done = site.finished(post)
        assert (done.state, done.exit_code) == (api.EXIT, 3)
        assert (shared / f"post.{os.getpid()}").read_text() == f"post {3 << 8}\n"


def test_dependencies_by_job_name(site: Site) -> None:
    tag = os.getpid()
    first = site.submit(f"bsub -J prep{tag} -o dep.%J 'sleep 1; echo first'")
    second = site.submit(f"bsub -J prep{tag} 'sleep 1'")
    after = site.submit(f"bsub -w 'done(prep{tag})' -o dep.%J 'echo after'")
    with site.cluster.client() as client:
        assert client.get_job(after).spec.depend == f"(done({first}) && done({second}))"
        done = site.finished(after)
        assert done.state == api.DONE
        ends = [client.get_job(j).end_time_ms for j in (first, second)]
        assert done.start_time_ms >= max(ends)
    refused = site.lsf(f"bsub -w 'done(nope{tag})' true")
    said = f"-w: nope{tag}: No matching job found. Job not submitted.\n"
    assert (refused.returncode, refused.stderr) == (255, said)


def test_bmod_bswitch_brun_and_the_information_commands(site: Site) -> None:
    job = site.submit("bsub -b 1:1:00:00 -q normal true")  # pending till new year, but for brun
    assert site.lsf(f"bmod -sp 5 -R 'rusage[mem=10]' {job}").stdout == \
        f"Parameters of job <{job}> are being changed\n"
    assert site.lsf(f"bswitch idle {job}").stdout == f"Job <{job}> is switched to queue <idle>\n"
    refused = site.lsf(f"bmod -n 4 {job}")
    assert refused.returncode == 255
    assert "-n: this option of LSF's is not carried out by XCE yet" in refused.stderr
    with site.cluster.client() as client:
        changed = client.get_job(job)
        assert (changed.spec.priority, changed.spec.queue, changed.spec.resource_req) == \
            (5, "idle", "rusage[mem=10]")
        assert site.lsf(f"brun -m w2 {job}").stdout == f"Job <{job}> is being forced to run.\n"
        ran = site.finished(job)
        assert (ran.state, ran.host) == (api.DONE, "w2")
    theirs = site.lsf(f"bmod -sp 9 {job}", as_nobody=True)
    assert theirs.returncode == 255 and theirs.stderr.startswith(f"Job <{job}>: ")
    hosts = site.lsf("lshosts").stdout.splitlines()
    assert hosts[0].split()[:5] == ["HOST_NAME", "type", "model", "cpuf", "ncpus"]
    assert [row.split()[0] for row in hosts[1:]] == ["w1", "w2"]
    load = site.lsf("lsload").stdout.splitlines()
    assert load[0].split()[:3] == ["HOST_NAME", "status", "r15s"] and load[1].split()[:2] == ["w1", "ok"]
    account = site.lsf("bacct").stdout
    assert "SUMMARY:" in account and "Total number of done jobs:" in account
    none = site.lsf("bmgroup")
    assert (none.returncode, none.stderr) == (255, "No host group found\n")


def test_btop_bbot_and_a_killed_job_s_reason(site: Site) -> None:
    later = [site.submit("bsub -b 1:1:00:00 -q idle true") for _ in range(3)]  # pending till new year
    assert site.lsf(f"btop {later[2]}").stdout == f"Job <{later[2]}> has been moved to position 1 from top.\n"
    said = site.lsf(f"bbot {later[0]}").stdout
    assert said == f"Job <{later[0]}> has been moved to position 1 from bottom.\n"
    with site.cluster.client() as client:
        priorities = [client.get_job(j).spec.priority for j in later]
    assert priorities[2] > priorities[1] > priorities[0]
    assert site.lsf(f"bkill {later[1]}").returncode == 0
    site.finished(later[1])
    assert site.lsf(f"bjobs -o 'stat exit_reason' -noheader {later[1]}").stdout == "EXIT TERM_OWNER\n"
    for job in (later[0], later[2]):
        site.lsf(f"bkill {job}")


def test_job_groups_and_their_limits(site: Site) -> None:
    group = f"/sims{os.getpid()}"
    assert site.lsf(f"bgadd -L 1 {group}").stdout == f"Job group {group} was added.\n"
    again = site.lsf(f"bgadd {group}")
    assert (again.returncode, again.stderr) == (255, f"Job group {group} already exists\n")
    jobs = [site.submit(f"bsub -g {group}/part{i} 'sleep 1'") for i in range(3)]  # subgroups count too
    ended = [site.finished(j) for j in jobs]
    spans = sorted((j.start_time_ms, j.end_time_ms) for j in ended)
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans)), spans  # one at a time
    assert all(j.state == api.DONE and j.spec.job_group.startswith(group) for j in ended)
    rows = site.lsf(f"bjgroup {group}").stdout.splitlines()
    assert rows[0].split()[:3] == ["GROUP_NAME", "NJOBS", "PEND"]
    assert rows[1].split()[0] == group and rows[1].split()[-2:] == ["0/1", "root"]
    listed = site.lsf(f"bjobs -a -g {group} -o 'jobid' -noheader").stdout.split()
    assert sorted(int(j) for j in listed) == sorted(jobs)
    theirs = site.lsf(f"bgmod -L 5 {group}", as_nobody=True)
    assert theirs.returncode == 255 and "jobs.control.all" in theirs.stderr
    assert site.lsf(f"bgdel {group}").stdout == f"Job group {group} was deleted.\n"
    gone = site.lsf(f"bgmod -L 2 {group}")
    assert (gone.returncode, gone.stderr) == (255, f"Job group {group} does not exist\n")


def test_output_files_overwritten_or_appended(site: Site) -> None:
    tag = os.getpid()
    for word in ("first", "second"):
        site.finished(site.submit(f"bsub -oo over.{tag} -eo over-err.{tag} 'echo {word}; echo {word} >&2'"))
        site.finished(site.submit(f"bsub -o app.{tag} 'echo {word}'"))
    shared = site.home / "shared"
    assert (shared / f"over.{tag}").read_text() == "second\n"
    assert (shared / f"over-err.{tag}").read_text() == "second\n"
    assert (shared / f"app.{tag}").read_text() == "first\nsecond\n"


def test_user_groups_charge_fair_share_and_g_is_checked(site: Site) -> None:
    rows = site.lsf("bugroup").stdout.splitlines()
    assert rows[0].split() == ["GROUP_NAME", "USERS"]
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert {row.split()[0]: row.split()[1:] for row in rows[1:]} == {
        "everyone": sorted(["nobody", me]), "guests": ["nobody"], "staff": [me]}
    job = site.submit("bsub -G staff -q shared 'sleep 0.2'")
    assert "User Group <staff>" in site.lsf(f"bjobs -l {job}").stdout.replace("\n" + " " * 21, "")
    assert site.finished(job).spec.user_group == "staff"
    for group, words in (("guests", "User not in the specified user group"), ("nope", "Bad user group name")):
        refused = site.lsf(f"bsub -G {group} -q shared true")
        assert (refused.returncode, refused.stdout) == (255, ""), refused
        assert refused.stderr.strip().endswith(f"{words}. Job not submitted."), refused.stderr
    theirs = site.lsf("bsub -G staff -q shared true", as_nobody=True)
    assert theirs.returncode == 255 and "User not in the specified user group" in theirs.stderr
    with site.cluster.client() as client:  # the end charged the group's node, under the project
        usage = wait_until(lambda: [(u.project, u.user) for u in client.list_queues().share_usage
                                    if u.queue == "shared"], "the usage credited")
    assert usage == [("default/@staff", me)]
    tree = site.lsf(f"{sys.executable} -m cli fairshare shared").stdout
    assert "@staff" in tree and "@guests" not in tree  # only consumers that ran or wait appear


EXIM = "/usr/sbin/exim4"


@pytest.mark.skipif(not os.path.exists(EXIM), reason="no local MTA (scripts/install_exim.sh: root, apt)")
def test_job_mail_at_start_and_end_reaches_the_local_mta_s_mailbox(site: Site) -> None:
    routed = subprocess.run([EXIM, "-bt", "nobody"], capture_output=True, text=True, check=True).stdout
    mailbox = Path(re.search(r"-> (/\S+)", routed)[1])  # type: ignore[index]  # where the MTA delivers it
    before = mailbox.stat().st_size if mailbox.exists() else 0
    job = site.submit("bsub -B -N -J mailed 'exit 3'", as_nobody=True)
    assert site.finished(job).exit_code == 3

    def delivered() -> str:
        if not mailbox.exists():  # a fresh machine's first mail creates it
            return ""
        with mailbox.open("rb") as box:
            box.seek(before)
            text = box.read().decode(errors="replace")
        return text if text.count(f"X-XCE-Job: {job}\n") == 2 else ""

    text = wait_until(delivered, "the start and end mail delivered")
    assert f"Subject: Job {job}: <mailed> started on <" in text
    assert f"Subject: Job {job}: <mailed> Exited" in text and "Exited with exit code 3." in text
    assert "To: nobody" in text and "as user <nobody>" in text
    refused = site.lsf("bsub -u 'a b' true")
    assert refused.returncode == 255 and "a mail address is" in refused.stderr


def test_a_chunk_queue_runs_jobs_alike_one_after_another_on_one_slot(site: Site) -> None:
    array = site.submit('bsub -q chunky -J "chunked[1-4]" "sleep 1"')
    with site.cluster.client() as client:
        def elements() -> list[api.Job]:
            return [j for j in client.list_jobs([f"array:eq:{array}"]) if not j.spec.HasField("array")]

        waiting = wait_until(lambda: [j for j in elements() if j.chunk_lead], "elements waiting in a chunk")
        lead = waiting[0].chunk_lead
        shown = site.lsf(f"bjobs -o 'jobid stat' -noheader {array}").stdout.split()
        assert "WAIT" in shown or all(j.state != api.PEND for j in elements()), shown
        ended = wait_until(lambda: (found := elements()) and all(j.state == api.DONE for j in found)
                           and len(found) == 4 and found, "every element done")
    chunk = [j for j in ended if j.id == lead or j.id in {w.id for w in waiting}]
    assert len(chunk) == 3 and len({j.host for j in chunk}) == 1, chunk
    spans = sorted((j.start_time_ms, j.end_time_ms) for j in chunk)
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans)), spans  # one slot
