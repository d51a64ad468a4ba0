"""Operating Tickwork from a shell: status, actions, dead-letter redrive (`tickwork ...`)."""
