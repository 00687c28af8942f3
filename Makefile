# The two commands: `make demo` (a local three-replica cluster doing work) and
# `make test`. Each creates .venv and installs the project on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The product's packages: mypy --strict checks them in `make test` (ruff checks everything, C901 at 15).
PACKAGES := xce client controller scheduler worker ops cli gateway simulator soak

.PHONY: demo test unit test-slow test-faults cluster bench bench-htc bench-scale bench-etcd crossval lint proto soak soak-long tlc clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[dev]' --config-settings editable_mode=compat  # a path entry, not an import hook: 10 ms off every start
	$(BIN)/python -m compileall -q xce client ops cli controller scheduler worker gateway >/dev/null  # bytecode, as an install has
	sh scripts/install_munge.sh
	sh scripts/install_netfault.sh
	sh scripts/install_faketime.sh
	sh scripts/install_openmpi.sh
	sh scripts/install_chromium.sh
	sh scripts/install_exim.sh
	sh scripts/install_slurmrestd.sh
	sh scripts/install_tmux.sh
	sh scripts/install_prometheus.sh
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/xce demo

# The tests that start real processes (on two pytest-xdist workers), and beside them (nice 10) the ones
# that compute: scripts/run_tests.py.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy --strict $(PACKAGES)
	$(BIN)/python scripts/run_tests.py

# The pure tier alone (tests/unit: no process, no socket, no cluster; under a minute).
unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

# The tests marked slow (longer model checks and runs, ~12 min), which `make test` skips.
test-slow: $(STAMP)
	XCE_SLOW=1 $(BIN)/python -m pytest -q -m slow tests

# Each fault kind of soak/README.md in a short soak of its own, the checker against the injected bugs,
# and the targeted disk, clock and network fault tests (tests marked faults; about 18 minutes on two cores).
test-faults: $(STAMP)
	XCE_FAULTS=1 $(BIN)/python -m pytest -q -m faults tests

cluster: $(STAMP)
	$(BIN)/xce cluster up

bench: $(STAMP)
	$(BIN)/python bench/run.py; $(BIN)/python bench/htc.py

# Only the high-throughput part, beside Slurm (bench/htc.py; --no-slurm without it).
bench-htc: $(STAMP)
	$(BIN)/python bench/htc.py $(HTC_ARGS)

# 1,000,000 finished jobs, 100,000 pending and 10,000 hosts on a real cluster (bench/history_scale.py; ~10 min).
bench-scale: $(STAMP)
	$(BIN)/python bench/history_scale.py $(SCALE_ARGS)

# xce sim against AccaSim, job by job, on every shared trace and twenty wide-job traces (~3 min).
crossval: $(STAMP)
	$(BIN)/python bench/crossval_accasim.py $(CROSSVAL_ARGS)

# The larger TLC models of tla/README.md (tens of minutes each on 2 cores).
tlc: $(STAMP)
	$(BIN)/python -m tests.tlc MCTwoSchedulers MCTwoFaults MCInit MCAlloc MCPreempt

soak: $(STAMP)
	$(BIN)/python -m soak $(SOAK_ARGS)

# Two hours, every fault kind mixed, a fault every 15 s (soak/README.md).
soak-long: $(STAMP)
	$(BIN)/python -m soak --duration 7200 --kill-every 15 --faults all --max-unknown 0.02 --out soak-out/long $(SOAK_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy --strict $(PACKAGES)

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

clean:
	rm -rf $(VENV) xce-data soak-out .pytest_cache .ruff_cache .mypy_cache
