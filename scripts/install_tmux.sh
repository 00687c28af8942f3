#!/bin/sh
# tmux, the terminal multiplexer, for the test of `srun --pty bash` (tests/cluster/test_slurm_commands.py),
# which types into the job's terminal and reads its screen through it. Part of the install step; it needs
# root and apt-get, and without them that test is skipped.
command -v tmux >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "tmux is not installed (needs root and apt-get): the srun --pty test will be skipped"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q tmux >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q tmux >/dev/null 2>&1; } ||
    echo "tmux could not be installed: the srun --pty test will be skipped"
exit 0
