# fabricsched developer entry points. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
PY := .venv/bin/python
# The virtualenv is made (and refreshed when pyproject.toml changes) by any target that needs it,
# so `make demo` and `make test` work on a fresh clone.
VENV := .venv/.installed
CLUSTER_DIR ?= .cluster
BENCH_DIR ?= out/bench-cluster
# pytest exits 5 when it collected nothing: a test target that ran no test has failed.
define pytest
	$(PY) -m pytest $(1) || { rc=$$?; if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests in $(1)" >&2; fi; exit $$rc; }
endef

.PHONY: help venv tools crds crds-check examples lint test test-unit test-integration demo demo-kueue demo-down bench \
	bench-cluster kind-e2e

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

venv: $(VENV) ## create .venv and install fabricsched with its dev tools (Python 3.11+)

$(VENV): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	  || { echo "error: Python 3.11+ required; $(PYTHON) is $$($(PYTHON) --version 2>&1). Try: make PYTHON=python3.11 ..." >&2; exit 1; }
	@test -x $(PY) || { echo "creating .venv with $$($(PYTHON) --version)"; $(PYTHON) -m venv .venv; }
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

tools: ## build etcd, the Kubernetes control plane, kubectl, kwok, the JobSet controller, helm (Go 1.26+; cached)
	bash hack/build-tools.sh

crds: $(VENV) ## regenerate the CRD YAML in crds/ from the pydantic models
	$(PY) -m fabricsched.api.crd --write crds/
	$(PY) -m fabricsched.api.crd --write charts/fabricsched/crds/
	$(PY) -m fabricsched.api.values_schema --write charts/fabricsched/values.schema.json

crds-check: $(VENV) ## check that crds/, the chart's CRDs and values schema are what the pydantic models generate
	$(PY) -m fabricsched.api.crd --check crds/
	$(PY) -m fabricsched.api.crd --check charts/fabricsched/crds/
	$(PY) -m fabricsched.api.values_schema --check charts/fabricsched/values.schema.json

examples: $(VENV) ## regenerate examples/demo-nodes.yaml and examples/demo-topology.yaml
	$(PY) -m fabricsched.cluster.samples --write examples/

lint: $(VENV) crds-check ## ruff, mypy --strict, layer contracts, no import cycles, size limits, dead code, CRDs
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m mypy --strict hack/checks/
	$(PY) hack/checks/test_sleeps.py tests/integration
	.venv/bin/lint-imports
	$(PY) hack/checks/structure.py operator/fabricsched
	.venv/bin/vulture

test: lint test-unit test-integration ## lint, then unit and integration tests

test-unit: $(VENV) ## unit tests (no binaries needed)
	$(call pytest,tests/unit)

test-integration: $(VENV) ## integration tests against a local control plane (needs `make tools`)
	$(call pytest,tests/integration)

demo: $(VENV) tools ## the tour: a local cluster with a 32-node fabric, fabricsched, three jobs; left running
	$(PY) -m fabricsched.cluster.demo up --dir $(CLUSTER_DIR)

demo-kueue: $(VENV) tools ## Kueue queues two JobSets, fabricsched places each, on the demo's cluster (started if none runs)
	$(PY) hack/demo_kueue.py --dir $(CLUSTER_DIR)

demo-down: $(VENV) ## stop the demo (fabricsched run and the control plane)
	$(PY) -m fabricsched.cluster.demo down --dir $(CLUSTER_DIR)

bench: $(VENV) bench-cluster ## engine benchmarks and the `cluster up` timing
	@for script in bench/*_bench.py; do echo "== $$script"; $(PY) $$script; done

bench-cluster: $(VENV) ## time `cluster up` with 150 nodes (3 spines x 5 leaves x 10 hosts), then stop it
	@mkdir -p $(BENCH_DIR)
	$(PY) -m fabricsched.cluster.samples --fabric 3x5x10 --out $(BENCH_DIR)/nodes-150.yaml
	$(PY) -m fabricsched.cli cluster up --dir $(BENCH_DIR)/cluster --nodes $(BENCH_DIR)/nodes-150.yaml
	$(PY) -m fabricsched.cli cluster down --dir $(BENCH_DIR)/cluster

kind-e2e: $(VENV) ## end-to-end on kind (needs Docker with a running engine, kind; not run in CI here)
	bash hack/kind-e2e.sh
