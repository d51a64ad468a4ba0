# Tickwork: every command the README and CI use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install dev demo status reset test test-unit lint format bench build deploy clean

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

demo: $(STAMP)
	$(BIN)/tickwork demo

status: $(STAMP)
	$(BIN)/tickwork status $(ARGS)

# Deletes the local data directory's database and JWT key (asks first; `tickwork reset --yes`
# does not).
reset: $(STAMP)
	$(BIN)/tickwork reset

# The whole suite on a real Postgres: DATABASE_URL if set, else an embedded one.
test: $(STAMP)
	$(BIN)/pytest

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	@for fn in functions/*/app.py; do $(BIN)/mypy --no-error-summary "$$fn" || exit 1; done
	$(BIN)/cfn-lint template.yaml

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python -m tickwork.bench

# --- AWS --------------------------------------------------------------------------------
build: $(STAMP)
	sam build --build-in-source

deploy: build
	sam deploy --config-file infra/samconfig.toml

# `sam build` calls this for the layer (BuildMethod: makefile): the package, its runtime
# dependencies for Lambda's arm64 Python 3.12, and the migrations.
build-TickworkLayer:
	rm -rf build/layer-wheel
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir build/layer-wheel .
	$(PYTHON) -m pip install --quiet --target "$(ARTIFACTS_DIR)/python" \
		--platform manylinux2014_aarch64 --implementation cp --python-version 3.12 \
		--only-binary=:all: build/layer-wheel/*.whl
	rm -rf "$(ARTIFACTS_DIR)/python/boto3" "$(ARTIFACTS_DIR)/python/botocore"
	cp -r migrations "$(ARTIFACTS_DIR)/python/tickwork/migrations"

clean:
	rm -rf $(VENV) .aws-sam build .pytest_cache .mypy_cache .ruff_cache
