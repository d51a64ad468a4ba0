# Sourced by the examples' scripts. `call METHOD PATH [BODY_FILE]` sends one request to the
# Tickwork API and prints its answer; an HTTP error (4xx, 5xx) prints the error and stops
# the script. It reads:
#   TOKEN, WS  a token and its workspace: eval "$(.venv/bin/tickwork token --workspace Acme
#              --create --admin --export)" prints both (12 hours; make dev must be running)
#   API_URL    the API, default http://127.0.0.1:8788 (`make dev` prints where it is)
: "${TOKEN:?set TOKEN and WS first: eval \"\$(.venv/bin/tickwork token --workspace Acme --create --admin --export)\"}"
: "${WS:?set TOKEN and WS first: eval \"\$(.venv/bin/tickwork token --workspace Acme --create --admin --export)\"}"
API_URL="${API_URL:-http://127.0.0.1:8788}"

call() {
    local method=$1 path=$2 body=${3:-}
    local data=()
    if [ -n "$body" ]; then data=(--data-binary "@$body"); fi
    curl -sS --fail-with-body -X "$method" "$API_URL$path" \
        -H "Authorization: Bearer $TOKEN" -H "X-Workspace-Id: $WS" \
        -H 'Content-Type: application/json' "${data[@]}"
    echo
}

# The "id" of a JSON answer on stdin.
id_of() {
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}
