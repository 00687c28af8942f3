#!/bin/sh
# Prometheus and promtool (Debian's prometheus) for the tests of the alert rules (promtool check rules,
# promtool test rules on deploy/prometheus/) and the test where a real Prometheus scrapes a local
# cluster. Part of the install step; it needs root and apt-get, and without them those tests are
# skipped. The package's own service is not left running: a policy-rc.d keeps its scripts from starting
# it, and it is disabled (and stopped where systemd runs). The tests start their own, on a free loopback
# port, with a configuration and storage of their own.
have() { command -v "$1" >/dev/null 2>&1; }
have promtool && have prometheus && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "prometheus is not installed (needs root and apt-get): the alert and scrape tests will be skipped"
    exit 0
fi
echo "installing prometheus (promtool and a server for the metrics tests)"
export DEBIAN_FRONTEND=noninteractive
made_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
fi
# Without its recommends: no node exporter, whose service would start too.
apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 &&
      apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; } ||
    echo "prometheus could not be installed: the alert rule and scrape tests will be skipped"
[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
# Disabled (the package enables it for the next boot; systemctl does that without a running systemd
# too), and stopped where systemd runs.
if have systemctl; then
    systemctl disable prometheus.service >/dev/null 2>&1 || true
    [ -d /run/systemd/system ] && { systemctl stop prometheus.service >/dev/null 2>&1 || true; }
fi
exit 0
