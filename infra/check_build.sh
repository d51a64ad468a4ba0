#!/usr/bin/env bash
# sam validate --lint, then two clean `sam build`s that must give the same layer (CI runs
# this; no AWS credentials needed). SAM CLI comes from PyPI into .sam-cli/.
set -euo pipefail
cd "$(dirname "$0")/.."

SAM_CLI_VERSION="1.170.0"
SAM_VENV=".sam-cli"
if ! "$SAM_VENV/bin/sam" --version 2>/dev/null | grep -q "$SAM_CLI_VERSION"; then
    python3 -m venv "$SAM_VENV"
    "$SAM_VENV/bin/pip" install --quiet "aws-sam-cli==$SAM_CLI_VERSION"
fi
export SAM_CLI_TELEMETRY=0
"$SAM_VENV/bin/sam" validate --lint
hashes=()
for run in first second; do
    rm -rf "build/sam-$run" build/layer-wheel
    make build SAM="$SAM_VENV/bin/sam" SAM_BUILD_FLAGS="--build-dir build/sam-$run"
    hashes+=("$("$SAM_VENV/bin/python" infra/layer_hash.py "build/sam-$run/TickworkLayer")")
done
echo "layer hashes: ${hashes[*]}"
echo "layer size: $(du -sh build/sam-first/TickworkLayer | cut -f1)"
if [ "${hashes[0]}" != "${hashes[1]}" ]; then
    echo "two builds of the same source gave different layers" >&2
    exit 1
fi
