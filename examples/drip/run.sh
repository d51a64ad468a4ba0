#!/usr/bin/env bash
# A drip (docs/sequences.md): a recipient with quiet hours and a daily cap, a three-step
# welcome campaign, and an enrollment in it. The welcome goes 20 s after enrolling (or when
# the recipient's quiet hours end); the next step is made only once it is sent. Needs a
# running `make dev`, TOKEN and WS: see examples/README.md.
set -euo pipefail
cd "$(dirname "$0")"
. ../api.sh

echo "== the recipient ann: Berlin time, quiet 22:00-07:00 (and weekend mornings), at most 3 webhooks a day"
call PUT /v1/recipients/ann recipient.json

echo "== the campaign: welcome after 20 s; tips on day 2 at 09:00 if still on the free plan; an offer 5 days later"
campaign=$(call POST /v1/campaigns campaign.json)
echo "$campaign"
campaign_id=$(echo "$campaign" | id_of)

echo "== ann enrolled (again: the same enrollment, 200)"
enrollment=$(call POST "/v1/campaigns/$campaign_id/enrollments" enrollment.json)
echo "$enrollment"
enrollment_id=$(echo "$enrollment" | id_of)

echo "== the enrollment, with the step made so far"
call GET "/v1/enrollments/$enrollment_id"
