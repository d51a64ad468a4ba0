#!/usr/bin/env bash
# A rule set for a podcast app (docs/rules.md, "Worked example"): five rules, then what the
# app tells Tickwork. Needs a running `make dev`, TOKEN and WS: see examples/README.md.
set -euo pipefail
cd "$(dirname "$0")"
. ../api.sh

echo "== the rules: a confirmation when a booking is confirmed; a reminder 24 h before the"
echo "   recording and a thank-you 1 h after it; a teaser 48 h before an episode, an announcement 1 h after"
for rule in confirmation reminder thank-you teaser announce; do
    call POST /v1/rules "$rule.json"
done

echo "== a booking is confirmed: the confirmation is made, due now (sent again the same day: a duplicate, skipped)"
call POST /v1/events booking-confirmed.json

echo "== its recording date: the reminder at 14:00 CET the day before (the clocks change that night), the thank-you at 16:00 CEST"
call PUT /v1/entities/booking/bk_42/dates booking-dates.json

echo "== the recording moves to 15:45: both are cancelled and made again, linked by rescheduled_from"
call PUT /v1/entities/booking/bk_42/dates booking-moved.json

echo "== an episode's publication date: the teaser and the announcement"
call PUT /v1/entities/episode/ep_9/dates episode-dates.json

echo "== the booking as Tickwork sees it, with every action its rules made"
call GET /v1/entities/booking/bk_42/dates
