"""Sequences (docs/sequences.md, the drip variant): campaigns of ordered steps, enrollments
advanced one step at a time by optimistic lock, one ordinary scheduled_actions row per
(enrollment, step), exits that cancel the pending step at once.

- `model`: campaigns, steps, waits and contexts (no I/O);
- `store`: campaigns, enrollments, the advance pass and exits;
- `fire`: what a step must pass when it fires (claim-time admission calls it).
"""
