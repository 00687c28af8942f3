"""Snakemake 9 with its LSF executor plugin, unmodified, on XCE's LSF commands: at start it reads
`badmin showconf mbd`, `lsclusters`, lsb.params and `bhist -l -a`; it submits each rule's job with
bsub (-J, -o/-e, -env all, -n, -R twice, -cwd, a command line of its own), polls with `bjobs -noheader
-o 'jobid stat' -aJ '*UUID*'`, and resubmits a job that failed. A 20-job workflow (fan-out to 18,
fan-in) with one job failing once runs to completion."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import FAST_HOSTS, wait_until
from lsf_site import serving

from xce import lsf_bin
from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

pytest.importorskip("snakemake_executor_plugin_lsf")

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
        echo {wildcards.name} $(cat {input}) $LSB_JOBID > {output}
        """

rule gather:
    input: expand("part/{name}.txt", name=PARTS)
    output: "total.txt"
    shell: "cat {input} | wc -l > {output}"
'''


def test_a_workflow_fans_out_fans_in_and_a_failed_job_is_resubmitted(make_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(extra_config=FAST_HOSTS)
    with serving(cluster):
        bin_dir = lsf_bin.ensure()
        work = tmp_path / "flow"
        work.mkdir()
        (work / "Snakefile").write_text(SNAKEFILE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("XCE_")}
        env.update(PATH=f"{bin_dir}:{Path(sys.executable).parent}:{env['PATH']}",
                   XCE_DATA=str(cluster.data), LSF_ENVDIR=str(Path(bin_dir).parent / "conf"),
                   HOME=str(tmp_path))
        # The retry is Snakemake's own (--retries): the failed LSF job is submitted again as a new one.
        flags = ["--jobs", "20", "--retries", "1", "--seconds-between-status-checks", "1",
                 "--latency-wait", "5"]
        run = subprocess.run([sys.executable, "-m", "snakemake", "--executor", "lsf", *flags],
                             cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-4000:]
        assert (work / "total.txt").read_text().strip() == "18"
        with cluster.client() as client:
            jobs = wait_until(lambda: client.list_jobs(), "the jobs listed")
        rules = Counter((j.spec.name.split("___")[0], api.JobState.Name(j.state)) for j in jobs)
        flaky = "Snakemake_rule_work:name=p07"
        assert rules == {("Snakemake_rule_start", "DONE"): 1, ("Snakemake_rule_gather", "DONE"): 1,
                         (flaky, "EXIT"): 1, (flaky, "DONE"): 1,
                         **{(f"Snakemake_rule_work:name=p{i:02d}", "DONE"): 1 for i in range(18) if i != 7}}
        retried = [j for j in jobs if j.spec.name.startswith(flaky) and j.state == api.DONE]
        assert (work / "part" / "p07.txt").read_text().split() == ["p07", "1", str(retried[0].id)]
