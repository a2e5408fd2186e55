# A thin wrapper over the CLI. Every target installs what it needs first, so each one
# works on a fresh machine: host packages (Debian), then the project's virtualenv.

PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
CLI         := $(BIN)/kuberay-conformance
PROVIDER    ?= local
PROFILE     ?= default
WORKERS     ?= auto
TIER        ?= full
SHARD       ?=
PYTEST_ARGS ?=
RUN_ARGS    ?=
KUBERAY_SOURCE ?=
HOST_PACKAGES := runc containernetworking-plugins iptables iproute2 util-linux procps \
                 debootstrap buildah busybox-static gcc libc6-dev \
                 chromium chromium-driver

RUN_DIR     ?= reports/latest
.PHONY: help host-deps venv test unit conformance cluster-up cluster-down cluster-status report lint bench sensitivity

help:
	@echo "make conformance    run the conformance suites on PROVIDER=$(PROVIDER), WORKERS=$(WORKERS) at once (writes reports/<run-id>/)"
	@echo "                    KUBERAY_SOURCE=DIR: KubeRay built from that checkout, with its own chart"
	@echo "                    TIER=smoke: a few checks per area (default full); SHARD=K/N: shard K of N only"
	@echo "make test           the harness's own tests: unit + end-to-end on the local provider"
	@echo "make unit           unit tests only (no cluster, no root)"
	@echo "make cluster-up     bring the local cluster up, nodes as PROFILE=$(PROFILE) says (builds what is missing)"
	@echo "make cluster-down   stop it and undo every host change"
	@echo "make cluster-status each component and the node"
	@echo "make report         rebuild the reports of RUN_DIR=$(RUN_DIR) (exit code: its verdict)"
	@echo "make lint           ruff"
	@echo "make bench          record the figures in benchmarks/README.md (local provider, main job, upgrades)"
	@echo "make sensitivity    seed KubeRay faults; each must be caught by its check and no other (local cluster)"

# Debian packages the local provider uses (runc, CNI plugins, iptables, image tooling), and the
# report's: chromium for its browser tests; node and npm (Debian's, unless a node is already
# there) to fetch Chart.js and run Allure Report 3, which needs node 20 or newer.
host-deps:
	@missing=$$(for p in $(HOST_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing host packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

unit: venv
	$(BIN)/pytest tests/unit -q $(PYTEST_ARGS)

# pytest exits 5 when it collected nothing: a broken suite, never a pass.
test: host-deps venv
	@$(BIN)/pytest tests -q -ra $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The main job. The CLI exits 0 conformant, 1 conformance failures, 2 harness/environment errors
# (also: another run holds the cluster), 3 usage; make itself exits 2 whenever it fails, so a caller
# that needs the difference (CI) runs the CLI. WORKERS=N|auto checks at once (auto: what the cluster can hold).
# TIER=smoke|full, SHARD=K/N: which checks (docs/parallel-runs.md; `report merge` joins the shards' reports).
# kind and eks clusters need none of the local provider's host packages (and CI runners are not root).
conformance: $(if $(filter local,$(PROVIDER)),host-deps) venv
	$(CLI) run --provider $(PROVIDER) --profile $(PROFILE) --workers $(WORKERS) --tier $(TIER) $(if $(SHARD),--shard $(SHARD)) $(if $(KUBERAY_SOURCE),--kuberay-source $(KUBERAY_SOURCE)) $(RUN_ARGS)

cluster-up: host-deps venv
	$(CLI) cluster up --provider local --profile $(PROFILE)

cluster-down: venv
	$(CLI) cluster down --provider local

cluster-status: venv
	$(CLI) cluster status --provider local

# Rebuilds index.html and the Allure page from a run's results; nothing is re-run.
report: venv
	$(CLI) report $(RUN_DIR)

lint: venv
	$(BIN)/ruff check conformance tests benchmarks
	$(BIN)/ruff format --check conformance tests benchmarks

# Seeded KubeRay faults, each caught by the check that names it (tests/sensitivity/; not part of
# `make test`). KRC_CLUSTER_LOCK=/path/to/lock takes that flock(1) lock per fault, not for the whole suite.
sensitivity: host-deps venv
	@$(BIN)/pytest tests/sensitivity -m sensitivity -q -ra $(PYTEST_ARGS); rc=$$?; \
	$(BIN)/python benchmarks/sensitivity.py; exit $$rc

# Figures, not tests: the local provider's bring-up and footprint, a warm main job, the report build,
# and RayService upgrades under load (areas rayservice and upgrade).
bench: host-deps venv
	$(BIN)/python benchmarks/local_provider.py
	$(BIN)/python benchmarks/conformance_run.py
	$(BIN)/python benchmarks/report_build.py
	$(BIN)/python benchmarks/upgrades.py
	$(CLI) cluster down --provider local
