#!/usr/bin/env bash
# ns_init.sh DIR - process 1 of the peer's own pid namespace (up.sh starts it under
# `unshare --pid --fork --kill-child --mount-proc`). It starts the daemons, then only reaps: every
# process of the peer (daemons, slurmstepd, the jobs' processes) lives in this namespace, so when this
# process dies (down.sh kills the unshare process, whose death SIGKILLs it) the kernel kills them all.
set -uo pipefail
PEER_DIR="$1"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/common.sh"

# The daemons get a clean environment, tagged (down.sh's sweep), not the caller's.
daemon_env=(env -i "PATH=/usr/sbin:/usr/bin:/sbin:/bin" "HOME=/root" "LANG=C.UTF-8"
	"SLURM_CONF=$SLURM_CONF" "SLURM_PEER_TAG=$PEER_TAG")

# start NAME CMD...: CMD in the background, its output to $LOG/NAME.out, its pid (in this namespace) noted
start() {
	local name="$1"
	shift
	"${daemon_env[@]}" "$@" >>"$LOG/$name.out" 2>&1 </dev/null &
	echo $! >"$RUN/$name.nspid"
}

if [[ "$(cat "$RUN/munge.mode")" == own ]]; then
	start munged munged --foreground --force --socket="$PEER_DIR/munge/munge.socket" \
		--key-file="$PEER_DIR/munge/munge.key" --pid-file="$PEER_DIR/munge/munged.pid" \
		--log-file="$LOG/munged.log" --seed-file="$PEER_DIR/munge/munged.seed"
	for ((i = 0; i < 100; i++)); do [[ -S "$PEER_DIR/munge/munge.socket" ]] && break; sleep 0.05; done
fi
start slurmctld slurmctld -D -f "$SLURM_CONF"
for node in $(cat "$RUN/nodes"); do
	start "slurmd-$node" slurmd -D -N "$node" -f "$SLURM_CONF"
done
# slurmrestd: as an unprivileged user (it refuses root and SlurmUser), authenticating its own calls to
# slurmctld with JWT (SLURM_JWT=daemon: no MUNGE of its own) and each request by the caller's token.
start slurmrestd setpriv --reuid="$REST_USER" --regid="$(id -g "$REST_USER")" --clear-groups \
	env SLURM_JWT=daemon slurmrestd -f "$SLURM_CONF" -a rest_auth/jwt -s openapi/v0.0.38 "127.0.0.1:$(cat "$RUN/rest.port")"

# Reap forever: orphans (slurmstepd, the jobs' processes) are re-parented to us; bash reaps any child
# in its SIGCHLD handler while it waits.
trap 'exit 0' TERM INT
while :; do
	sleep 3600 &
	wait $!
done
