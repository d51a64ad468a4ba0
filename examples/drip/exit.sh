#!/usr/bin/env bash
# Ends ann's drips: an event whose type is one of a campaign's exit_events, naming the
# recipient. Each enrollment's pending step is cancelled at once. See examples/README.md.
set -euo pipefail
cd "$(dirname "$0")"
. ../api.sh

echo "== ann unsubscribes"
call POST /v1/events exit-event.json
