"""`make test`'s pytest: the tests that start real processes (marker `cluster`) and the rest, side by side.

The cluster tests mostly wait on daemons, a core often idle; the rest (the protocol simulations, the
model checks, the unit tests) mostly compute. So the second runs beside the first, at a lower
priority (nice 10): it takes what the daemons leave, and the daemons' timings stay theirs. Both run
every test they select; the markers partition the suite. The computing tier's output is shown when
it ends (after the cluster tier's, so the two never interleave); the exit status is the first
failure's. Extra arguments go to both (`-x`, `-k ...`).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

PYTEST = [sys.executable, "-m", "pytest", "-q", "-m"]


def main(extra: list[str]) -> int:
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as rest_output:
        rest = subprocess.Popen(["nice", "-n", "10", *PYTEST, "not cluster", "tests", *extra],
                                stdout=rest_output, stderr=subprocess.STDOUT)
        try:
            cluster = subprocess.run([*PYTEST, "cluster", "tests", *extra], check=False).returncode
            cluster_s = time.monotonic() - started
            rest_code = rest.wait()
        finally:
            if rest.poll() is None:
                rest.kill()
                rest.wait()
        rest_output.seek(0)
        print("\n===== the tests that start no cluster (beside the above, at nice 10) =====", flush=True)
        sys.stdout.write(rest_output.read())
    print(f"\nmake test: cluster tier {cluster_s:.0f} s (exit {cluster}), the rest exit {rest_code}; "
          f"{time.monotonic() - started:.0f} s in all", flush=True)
    # pytest's 5 (nothing collected) is a failure here too: a tier that lost its tests is broken.
    return cluster or rest_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
