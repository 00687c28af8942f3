"""Advance reservations on a live cluster (cli/lsf/brsv.py, controller/fsm/reservations.py): brsvadd
keeps a host for one user; another user's jobs (a real unprivileged uid) stay off it while they wait;
the user's `bsub -U` jobs run there, before and after a leader's failover; brsvs shows what they use;
brsvdel gives the host back and the waiting job takes it at once."""

from __future__ import annotations

import datetime
import os
import pwd
from collections.abc import Iterator

import lsf_site
import pytest
from conftest import FAST_HOSTS, wait_until
from lsf_site import Site

from xce.v1 import api_pb2 as api

pytestmark = pytest.mark.cluster

SPAN = '-n 2 -R "span[hosts=1]"'


@pytest.fixture(scope="module")
def site(reachable_by_nobody: None) -> Iterator[Site]:
    with lsf_site.site(FAST_HOSTS, workers=(("w1", 2), ("w2", 2))) as made:
        yield made


def test_a_reservation_keeps_others_out_and_lets_its_users_in_across_a_leader_kill(site: Site) -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    now = datetime.datetime.now()
    window = f"-b {now:%H:%M} -e {now + datetime.timedelta(hours=1):%H:%M}"
    theirs = site.lsf(f"brsvadd -n 2 -m w1 -u nobody {window} -N mine", as_nobody=True)
    assert theirs.returncode == 255 and "hosts.control" in theirs.stderr  # administrators' (LSF's too)
    made = site.lsf(f"brsvadd -n 2 -m w1 -u {me} {window} -N maint")
    assert (made.returncode, made.stdout) == (0, 'Reservation "maint" is created\n'), made.stderr
    waiting = [site.submit(f"bsub {SPAN} sleep 600", as_nobody=True) for _ in range(2)]
    refused = site.lsf(f"bsub -U maint {SPAN} true", as_nobody=True)
    assert refused.returncode == 255 and "User not in the advance reservation's user list" in refused.stderr
    with site.cluster.client() as client:
        wait_until(lambda: client.get_job(waiting[0]).state == api.RUN, "nobody's first job running")
        assert client.get_job(waiting[0]).host == "w2"
        wait_until(lambda: client.get_job(waiting[1]).pending_reason, "the second looked at and left pending")
        first = site.finished(site.submit(f"bsub -U maint {SPAN} 'sleep 1'"))
        assert (first.state, first.host) == (api.DONE, "w1")
        old = site.cluster.leader()
        site.cluster.kill(old)
        wait_until(lambda: site.cluster.leader() != old, "a new leader")
        site.cluster.restart(old)
        again = site.finished(site.submit(f"bsub -U maint {SPAN} true"))
        assert (again.state, again.host) == (api.DONE, "w1")
        stuck = client.get_job(waiting[1])
        assert stuck.state == api.PEND and not stuck.host, stuck
        w1 = site.lsf("bhosts w1").stdout.splitlines()[1].split()
        assert (w1[1], w1[4], w1[-1]) == ("closed_Full", "0", "2")  # no job there: its 2 slots kept (RSV)
        rows = site.lsf("brsvs").stdout.splitlines()
        assert rows[0].split()[:3] == ["RSVID", "TYPE", "USER"]
        assert rows[1].split()[:5] == ["maint", "user", me, "0/2", "w1:0/2"]
        assert site.lsf("brsvdel maint").stdout == "Reservation maint is being deleted\n"
        taken = wait_until(lambda: (j := client.get_job(waiting[1])).state == api.RUN and j,
                           "the waiting job took the host given back")
        assert taken.host == "w1"
    assert site.lsf("bkill 0", as_nobody=True).returncode == 0
    gone = site.lsf("brsvs")
    assert (gone.returncode, gone.stderr) == (255, "No reservation found\n")
