#!/bin/sh
# iptables (with the NFQUEUE target, nf_tables backend) for the soak's network faults: soak/netfault.py,
# a user-space netem bound to an NFQUEUE queue over its own netlink client (no library to build), and
# the one-way partitions (plain DROP rules). The kernel needs nfnetlink_queue and xt_NFQUEUE.
# Part of the install step; it needs root and apt-get, and without them the network fault tests are skipped.
command -v iptables >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "iptables is not installed (needs root and apt-get): the network fault tests will be skipped"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q iptables >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q iptables >/dev/null 2>&1; } ||
    echo "iptables could not be installed: the network fault tests will be skipped"
exit 0
