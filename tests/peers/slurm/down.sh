#!/usr/bin/env bash
# down.sh DIR - stop everything up.sh DIR started; idempotent, and safe after a failed or partial up.
# Killing the unshare process kills the namespace's process 1 (--kill-child), and the kernel then
# kills every process of the namespace: slurmctld, slurmd, slurmstepd, the jobs, slurmrestd and our
# munged (the system's munged, if we used it, is not ours and is left alone). Then a sweep of /proc for
# a process still tagged with DIR (none is expected) kills it by pid. DIR itself is kept (the caller's).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
[[ -d "$1" ]] || exit 0
PEER_DIR="$1"
source "$HERE/common.sh"

f="$RUN/unshare.pid"
if [[ -f "$f" ]]; then
	pid="$(cat "$f")"
	# only the unshare we started (guards against pid reuse): its command line names our directory
	if pid_alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "ns_init.sh $PEER_DIR"; then
		kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$f"
fi
# The namespace's processes die asynchronously after their process 1; wait (bounded) for the last.
for ((i = 0; i < 100; i++)); do
	left="$(tagged_pids)"
	[[ -z "$left" ]] && break
	((i == 50)) && kill -KILL $left 2>/dev/null
	sleep 0.1
done
if [[ -n "$left" ]]; then
	echo "slurm peer: processes still alive after down: $left" >&2
	exit 1
fi
exit 0
