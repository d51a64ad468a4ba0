# Tickwork: every command the README, the docs and CI use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

# (screenshots: the console's pictures in docs/images/console, taken by its browser tests)
.PHONY: screenshots install dev demo status reset test unit integration e2e test-unit test-slow pr lint docs format bench bench-tenants bench-scale cost fuzz chaos build deploy layer-lock clean

# A virtualenv with tickwork (editable) and the dev tools; redone when pyproject.toml changes.
# pip prints a line per package it collects and installs, so the first run is not silent.
$(STAMP): pyproject.toml
	@echo "installing Tickwork and its tools into $(VENV) (first run or pyproject.toml changed: 1-2 min)..."
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --progress-bar off -e '.[dev]' \
		| grep --line-buffered -E '^(Collecting|Successfully installed)' | cut -c1-100 || true
	@$(BIN)/python -c 'import tickwork' || { echo "install failed: run $(BIN)/python -m pip install -e '.[dev]' to see why"; exit 1; }
	@rm -f $(VENV)/.installed-* && touch $@
	@echo "installed."

install: $(STAMP)

# Runs Tickwork locally: embedded Postgres (unless DATABASE_URL is set), tick, queues,
# dispatchers, API and a webhook receiver.
# Options pass through ARGS, e.g. make dev ARGS='--api-port 9788 --receiver-port 9787'.
dev: $(STAMP)
	$(BIN)/tickwork dev $(ARGS)

# Options pass through ARGS, e.g. make demo ARGS='--count 30 --last 60'.
demo: $(STAMP)
	$(BIN)/tickwork demo $(ARGS)

status: $(STAMP)
	$(BIN)/tickwork status $(ARGS)

# Deletes the local data directory's database and JWT key (asks first; `tickwork reset --yes`
# does not).
reset: $(STAMP)
	$(BIN)/tickwork reset

# The whole suite on a real Postgres: DATABASE_URL if set, else an embedded one.
# Options pass through ARGS, e.g. make test ARGS='-x -k webhook', or ARGS='-n 2': two
# processes (pytest-xdist), each with its own database, in a little over half the time.
test: $(STAMP)
	$(BIN)/pytest $(ARGS)

# One layer of the suite each (ARGS as for test): unit has no I/O; integration runs on a
# real Postgres with moto and loopback fakes; e2e drives the local runtime over HTTP.
unit: $(STAMP)
	$(BIN)/pytest tests/unit $(ARGS)

integration: $(STAMP)
	$(BIN)/pytest tests/integration $(ARGS)

e2e: $(STAMP)
	$(BIN)/pytest tests/e2e $(ARGS)

test-unit: unit

# The slow scale tests the suite leaves out (marked `slow`), e.g. a bulk cancel of 100,000
# actions of one tag beside another workspace's tick; each prints what it measured.
test-slow: $(STAMP)
	$(BIN)/pytest -m slow -s $(ARGS)

# Before a pull request: what CI runs on it, less the SAM builds (lint, then the whole suite).
pr: $(STAMP)
	$(MAKE) lint
	$(MAKE) test

# The web console's pictures in the docs, taken by its browser tests on the demo data
# (Debian's chromium).
screenshots: $(STAMP)
	TICKWORK_CONSOLE_SCREENSHOTS=docs/images/console TICKWORK_REQUIRE_BROWSER=1 \
		$(BIN)/pytest -q tests/browser/test_console_views.py $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	PYTHONPATH=. $(BIN)/lint-imports
	@for fn in functions/*/app.py; do $(BIN)/mypy --no-error-summary "$$fn" || exit 1; done
	$(BIN)/cfn-lint template.yaml
	@$(MAKE) --no-print-directory docs

# The documentation site (docs/, mkdocs.yml) into site/, strictly: a broken link or anchor,
# a page left out of the navigation or a route the API reference cannot place fails it.
# The API reference is generated from the OpenAPI document at build time.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Options pass through ARGS: make bench ARGS='--ledger-compare 3' (the ledger's cost).
bench: $(STAMP)
	$(BIN)/python -m tools.bench $(ARGS)

# One workspace's hostile template and burst beside another's API calls and webhooks: the
# quiet workspace's API answer times and webhook lateness, alone and under each.
# Options pass through ARGS: make bench-tenants ARGS='--rounds 1 --seconds 10'.
bench-tenants: $(STAMP)
	$(BIN)/python -m tools.bench_tenants $(ARGS)

# The hot statements at 10k rows and at a large backlog (SCALE_FUTURE future rows and
# SCALE_TERMINAL finished ones): each should stay within 2x.
SCALE_FUTURE ?= 10000000
SCALE_TERMINAL ?= 1000000
# Then the removal scenario (docs/retention.md): this many finished rows past a 30-day
# retention removed while a burst and the spread run beside it (full size: 10000000).
SCALE_REMOVAL ?= 200000
bench-scale: $(STAMP)
	$(BIN)/python -m tools.bench_scale --future $(SCALE_FUTURE) --terminal $(SCALE_TERMINAL) --removal $(SCALE_REMOVAL)

# What a million actions cost (Lambda, SQS, NAT, logs, X-Ray) from template.yaml's settings:
# the table of docs/cost.md.
cost: $(STAMP)
	$(BIN)/python -m tools.cost

# Schemathesis, every check, every operation, random cases (about 2,300 at 60 examples per
# operation); prints the case count by status. CI runs a small derandomized set.
FUZZ_EXAMPLES ?= 60
fuzz: $(STAMP)
	TICKWORK_FUZZ_RANDOM=1 TICKWORK_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) \
		$(BIN)/pytest -s -q -p no:cacheprovider tests/e2e/test_api_fuzz.py

# Fault injection (not a test): processes, duplicate deliveries, kill -9, a restart of its own
# embedded Postgres, a hostile receiver; prints its figures. `tools/tests/test_chaos.py`
# runs the small variant (`python -m tools.chaos --small`).
chaos: $(STAMP)
	$(BIN)/python -m tools.chaos

# --- AWS --------------------------------------------------------------------------------
# samconfig.toml (at the root) holds the region, capabilities and build options.
SAM ?= sam
SAM_BUILD_FLAGS ?=
LAYER_PLATFORM := --platform manylinux2014_aarch64 --implementation cp --python-version 3.12 \
	--only-binary=:all:

build:
	$(SAM) build $(SAM_BUILD_FLAGS)

deploy: build
	@if grep -q REPLACE_ME samconfig.toml; then \
		echo "samconfig.toml still has REPLACE_ME values: fill them in, or run sam deploy --guided"; \
		exit 1; fi
	$(SAM) deploy

# `sam build` calls this for the layer (BuildMethod: makefile): the package, its pinned
# runtime dependencies for Lambda's arm64 Python 3.12 (infra/layer-requirements.txt), and
# the migrations. Deterministic: no .pyc (they would be the build machine's Python's), no
# install records, no bin/ scripts, so the same commit gives the same layer hash and an
# unchanged layer is neither republished nor migrated again.
build-TickworkLayer:
	rm -rf build/layer-wheel
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir build/layer-wheel .
	$(PYTHON) -m pip install --quiet --no-compile --no-deps --require-hashes \
		--target "$(ARTIFACTS_DIR)/python" $(LAYER_PLATFORM) -r infra/layer-requirements.txt
	$(PYTHON) -m pip install --quiet --no-compile --no-deps \
		--target "$(ARTIFACTS_DIR)/python" build/layer-wheel/*.whl
	rm -rf "$(ARTIFACTS_DIR)/python/bin"
	find "$(ARTIFACTS_DIR)/python" -name __pycache__ -prune -exec rm -rf {} +
	find "$(ARTIFACTS_DIR)/python" -path '*.dist-info/*' \( -name RECORD -o -name INSTALLER \
		-o -name REQUESTED -o -name direct_url.json \) -delete
	cp -r migrations "$(ARTIFACTS_DIR)/python/tickwork/migrations"
	# What Lambdas run, only: the CLI and the local runtime install with the package's
	# `local` extra on a person's machine; the tools (bench, chaos) are not in the package.
	rm -rf "$(ARTIFACTS_DIR)/python/tickwork/cli" "$(ARTIFACTS_DIR)/python/tickwork/local"

# Re-resolves infra/layer-requirements.txt after a dependency change in pyproject.toml.
layer-lock: $(STAMP)
	$(BIN)/python infra/lock_layer.py

clean:
	rm -rf $(VENV) .aws-sam .sam-cli build site .pytest_cache .mypy_cache .ruff_cache
