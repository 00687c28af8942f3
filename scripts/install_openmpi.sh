#!/bin/sh
# Open MPI (Debian's openmpi-bin) for tests/test_mpirun.py, which runs mpirun with `xce launch` as its
# remote shell. Part of the install step; it needs root and apt-get, and without them that test is skipped.
command -v mpirun >/dev/null 2>&1 && command -v orted >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "openmpi-bin is not installed (needs root and apt-get): the mpirun test will be skipped"
    exit 0
fi
echo "installing openmpi-bin (Open MPI's mpirun, for the mpirun test)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q openmpi-bin >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q openmpi-bin >/dev/null 2>&1; } ||
    echo "openmpi-bin could not be installed: the mpirun test will fail (run sh scripts/install_openmpi.sh as root)"
exit 0
