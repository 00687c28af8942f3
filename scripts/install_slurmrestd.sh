#!/bin/sh
# Slurm 22.05 (Debian's slurm-wlm) and slurmrestd, Slurm's REST daemon, for the tests that start a real
# Slurm beside XCE (tests/slurm_peer.py, tests/peers/slurm/: the gateway's Slurm backend, golden output).
# Part of the install step; it needs root and apt-get (without them those tests are skipped). No daemon
# is started: a policy-rc.d keeps the packages' scripts from starting one (the tests start their own, on
# ports of their own).
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
have slurmrestd && have slurmctld && have slurmd && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "slurmrestd is not installed (needs root and apt-get): the Slurm peer tests will be skipped"
    exit 0
fi
echo "installing slurm-wlm and slurmrestd (a real Slurm for the Slurm peer tests)"
export DEBIAN_FRONTEND=noninteractive
made_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
fi
apt-get install -y -q slurm-wlm slurmrestd >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q slurm-wlm slurmrestd >/dev/null 2>&1; } ||
    echo "slurm-wlm or slurmrestd could not be installed: the Slurm peer tests will be skipped"
[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
exit 0
