"""Snakemake 9 with its Slurm executor plugin (and the plugin's jobstep executor inside each job),
unmodified, on XCE's Slurm commands: at start it runs `sinfo -o %P` for the default partition and
`sacct -nu USER -o Account%256 | tail -1` (words, not a pipe: refused, so it goes on without an
account); it submits each rule with `sbatch --parsable --job-name RUN_UUID --output ... --export=ALL
--comment rule_... --ntasks=1 --cpus-per-task=1 -p normal -D ... --wrap="..."`; inside the job,
Snakemake runs the rule with `srun -n1 --cpu-bind=q --cpus-per-task=1 --nodes=1 ...`; it polls with
`sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State --starttime ... --endtime now
--name RUN_UUID`, asks `sacct -j ID.STEP --format=Reason --noheader` of a failed job, and submits it
again. A 20-job workflow (fan-out to 18, fan-in) with one job failing once runs to completion."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until
from lsf_site import serving

from xce import slurm_bin
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

pytest.importorskip("snakemake_executor_plugin_slurm")

SNAKEFILE = '''
PARTS = [f"p{i:02d}" for i in range(18)]

rule all:
    input: "total.txt"

rule start:
    output: "seed.txt"
    shell: "echo 1 > {output}"

rule work:
    input: "seed.txt"
    output: "part/{name}.txt"
    shell:
        """
        if [ {wildcards.name} = p07 ] && [ ! -e flaky.once ]; then touch flaky.once; exit 1; fi
        echo {wildcards.name} $(cat {input}) $SLURM_JOB_ID > {output}
        """

rule gather:
    input: expand("part/{name}.txt", name=PARTS)
    output: "total.txt"
    shell: "cat {input} | wc -l > {output}"
'''


def test_a_workflow_fans_out_fans_in_and_a_failed_job_is_resubmitted(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config=FAST_HOSTS)
    with serving(cluster):
        bin_dir = slurm_bin.ensure()
        work = tmp_path / "flow"
        work.mkdir()
        (work / "Snakefile").write_text(SNAKEFILE)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XCE_", "SLURM_", "SBATCH_"))}
        env.update(PATH=f"{bin_dir}:{Path(sys.executable).parent}:{env['PATH']}",
                   XCE_DATA=str(cluster.data), HOME=str(tmp_path))
        # The retry is Snakemake's own (--retries): the failed Slurm job is submitted again as a new one.
        # The plugin waits --slurm-init-seconds-before-status-checks before its first poll (40 by
        # default), then 10 s more after each poll that saw no job end.
        flags = ["--jobs", "20", "--retries", "1", "--latency-wait", "5",
                 "--slurm-init-seconds-before-status-checks", "1"]
        started = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "snakemake", "--executor", "slurm", *flags],
                             cwd=work, env=env, capture_output=True, text=True, timeout=600)
        print(f"the workflow ran {time.monotonic() - started:.1f} s")
        assert run.returncode == 0, run.stderr[-4000:]
        assert (work / "total.txt").read_text().strip() == "18"
        with cluster.client() as client:
            jobs = wait_until(lambda: client.list_jobs(), "the jobs listed")
        assert len({j.spec.name for j in jobs}) == 1  # every job named by the run's UUID
        rules = Counter((j.spec.comment, api.JobState.Name(j.state)) for j in jobs)
        flaky = "rule_work_wildcards_p07"
        assert rules == {("rule_start", "DONE"): 1, ("rule_gather", "DONE"): 1, (flaky, "EXIT"): 1,
                         (flaky, "DONE"): 1,
                         **{(f"rule_work_wildcards_p{i:02d}", "DONE"): 1 for i in range(18) if i != 7}}
        retried = [j for j in jobs if j.spec.comment == flaky and j.state == api.DONE]
        assert (work / "part" / "p07.txt").read_text().split() == ["p07", "1", str(retried[0].id)]
        assert "SLURM-job" in run.stderr and "failed, SLURM status is: 'FAILED'" in run.stderr
