# Tickwork: every command the README and CI use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install dev demo test test-unit lint format bench chaos build deploy clean

# A virtualenv with tickwork (editable) and the dev tools; redone when pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# Runs Tickwork locally: embedded Postgres (unless DATABASE_URL is set), tick, queues,
# dispatchers, API and a webhook receiver.
dev: $(STAMP)
	$(BIN)/tickwork dev

demo: $(STAMP)
	$(BIN)/tickwork demo

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

# Fault injection (not a test): processes, duplicate deliveries, kill -9, a restart of its own
# embedded Postgres, a hostile receiver; prints its figures. `tests/integration/test_chaos.py`
# runs the small variant (`python -m tickwork.chaos --small`).
chaos: $(STAMP)
	$(BIN)/python -m tickwork.chaos

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
