# common.sh - settings and helpers shared by up.sh, down.sh and ns_init.sh. Sourced, never run.
# Derived from /work/shared/peers/slurm/common.sh; here every path lives under the peer's directory
# (up.sh's and down.sh's first argument) and every port is the caller's (no fixed port).

[[ -n "${PEER_DIR:-}" ]] || { echo "PEER_DIR is not set" >&2; exit 2; }
PEER_DIR="$(cd "$PEER_DIR" && pwd)"
export SLURM_CONF="$PEER_DIR/slurm.conf"    # clients and daemons read this file
PEER_TAG="$PEER_DIR"                        # SLURM_PEER_TAG in the daemons' environment alone (ns_init.sh)
RUN="$PEER_DIR/run"                         # pid files
LOG="$PEER_DIR/log"                         # daemons' logs and their stdout/stderr
PARTITION=normal                            # XCE's default queue's name, so that goldens compare
REST_USER="${SLURM_PEER_REST_USER:-nobody}" # slurmrestd refuses root and SlurmUser

# now: wall clock in seconds with ns resolution; elapsed START: seconds since START, 3 decimals
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN{printf "%.3f", b-a}'; }

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

# wait_until SECONDS CMD...: run CMD every 0.1 s until it succeeds; fail after SECONDS, or as soon as
# a daemon's output says it died (`fatal:`).
wait_until() {
	local limit="$1" deadline
	shift
	deadline=$(awk -v a="$(now)" -v l="$limit" 'BEGIN{printf "%.3f", a+l}')
	while :; do
		"$@" >/dev/null 2>&1 && return 0
		grep -qs "fatal:" "$LOG"/*.out && return 1
		awk -v d="$deadline" -v n="$(now)" 'BEGIN{exit !(n > d)}' && return 1
		sleep 0.1
	done
}

# tagged_pids: pids (as this pid namespace sees them) whose environment carries our tag
tagged_pids() {
	local p
	for p in /proc/[0-9]*; do
		{ tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_PEER_TAG=$PEER_TAG" && echo "${p#/proc/}"
	done
	return 0
}
