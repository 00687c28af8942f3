#!/bin/sh
# Chromium (Debian's chromium) for the dashboard's test, which drives it headless over the DevTools
# protocol. Part of the install step; it needs root and apt-get, and without them that test is skipped.
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium is not installed (needs root and apt-get): the dashboard test will be skipped"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q chromium >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } ||
    echo "chromium could not be installed: the dashboard test will be skipped"
exit 0
