#!/usr/bin/env bash
# A recurring schedule (docs/recurring.md): every Tuesday at 09:00 New York time, 12 times,
# 09:00 local across daylight saving time. Needs a running `make dev`, TOKEN and WS: see
# examples/README.md.
set -euo pipefail
cd "$(dirname "$0")"
. ../api.sh

echo "== the schedule: its first 14 days are queued at once"
schedule=$(call POST /v1/recurring schedule.json)
echo "$schedule"
id=$(echo "$schedule" | id_of)

echo "== its next five occurrences, in UTC and New York time"
call GET "/v1/recurring/$id?preview=5"

echo "== moved to Wednesdays: the queued Tuesdays are cancelled, the Wednesdays queued"
call PATCH "/v1/recurring/$id" edit.json

echo "== once now, besides: a one-off due now (the local receiver prints it); the next occurrence does not move"
call POST "/v1/recurring/$id/run-now"

echo "== paused for a while (resume: POST /v1/recurring/$id/resume)"
call POST "/v1/recurring/$id/pause" pause.json
