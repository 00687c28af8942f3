#!/bin/sh
# MUNGE (Debian's munge) for the tests of MUNGE authentication, which start a munged of their own.
# Part of the install step; it needs root and apt-get, and without them the MUNGE tests are skipped.
command -v munged >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "munge is not installed (needs root and apt-get): the MUNGE tests will be skipped"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q munge >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q munge >/dev/null 2>&1; } ||
    echo "munge could not be installed: the MUNGE tests will be skipped"
exit 0
