#!/bin/sh
# libfaketime (Debian's faketime) for the clock-fault tests (soak/clockfault.py), which fake one process's wall clock.
# Part of the install step; it needs root and apt-get, and without them the clock-fault tests are skipped.
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "libfaketime is not installed (needs root and apt-get): the clock-fault tests will be skipped"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q libfaketime >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libfaketime >/dev/null 2>&1; } ||
    echo "libfaketime could not be installed: the clock-fault tests will be skipped"
exit 0
