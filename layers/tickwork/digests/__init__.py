"""Digests and debounce: events of one (producer, recipient, target, key) collected into one
action whose template sees them all (docs/digests.md)."""
