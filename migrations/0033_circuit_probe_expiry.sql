-- Provider circuits: when a half-open circuit's probe was taken, so that a probe whose
-- dispatcher died (or handed the row back unsent) expires and another row probes, instead
-- of the circuit staying half-open with its probe out for ever (docs/failover.md).
-- `probing` stays the truth of whether a probe is out (written as `probe_taken_at is not
-- null`), so a dispatcher of the previous release still running during a deploy reads and
-- writes it as before; a probe such a dispatcher took has no time and is read as taken
-- when the circuit was last written (`updated_at`), and a time it left behind when it
-- closed the circuit is ignored.
alter table provider_circuits add column if not exists probe_taken_at timestamptz;

-- Probes out now: taken when their circuit was last written (the probe's own write).
update provider_circuits set probe_taken_at = updated_at where probing and probe_taken_at is null;
