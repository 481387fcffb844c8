# Two commands on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test test-loaded test-readme lint typecheck unit install install-demo sysdeps clean

## The demo needs only the runtime dependencies (and the OpenAI SDK its printed snippet uses).
$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[demo]'
	touch $(DEMO_STAMP)

## Tests, linters and benchmarks: the dev and bench extras on top.
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bench]'
	@# opentelemetry-exporter-otlp-common ships a stale copy of opentelemetry-proto's common_pb2.py;
	@# put the real one back so the OTLP exporter imports (docs/configuration.md)
	$(BIN)/pip install -q --force-reinstall --no-deps \
	  "opentelemetry-proto==$$($(BIN)/python -c 'from importlib.metadata import version; print(version("opentelemetry-proto"))')"
	touch $(STAMP)

install: $(STAMP)

install-demo: $(DEMO_STAMP)

## Things the tests start for real: redis-server (and hyperfine/wrk for benches) from Debian.
sysdeps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server (Debian package)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >/dev/null; }

## Extra options go in DEMO_ARGS, e.g. `make demo DEMO_ARGS="--load --duration 60"`.
demo: install-demo
	$(BIN)/fleetgate demo $(DEMO_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

unit: install sysdeps
	$(BIN)/pytest -q

test: install sysdeps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -q

## The README's commands pasted into a fresh shell on a fresh copy (installs a second venv: minutes).
test-readme: install
	FLEETGATE_README_FRESH=1 $(BIN)/pytest -q tests/docs/test_readme_commands_run.py

## The global-router tests with one CPU hog beside them (they must not race wall-clock windows).
test-loaded: install sysdeps
	@$(BIN)/python -c 'while 1: pass' & hog=$$!; \
	  $(BIN)/pytest -q tests/global_router; rc=$$?; kill $$hog; exit $$rc

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
