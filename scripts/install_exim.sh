#!/bin/sh
# A local MTA (Debian's exim4, local delivery only) for the test of LSF's job mail (bsub -B -N), which
# sends through its sendmail and reads the mailbox it delivered to. Part of the install step; it needs
# root and apt-get, and without them that test is skipped. No daemon is started: the test's sendmail
# delivers in its own process (-odi), and a policy-rc.d keeps the package's scripts from starting one.
[ -x /usr/sbin/exim4 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "exim4 is not installed (needs root and apt-get): the job mail test will be skipped"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
made_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
fi
apt-get install -y -q exim4-daemon-light >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q exim4-daemon-light >/dev/null 2>&1; } ||
    echo "exim4 could not be installed: the job mail test will be skipped"
[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
exit 0
