"""The delivery ledger: every provider call an action had (`action_attempts`), and the
resolver that settles "may have arrived" (`ambiguous`, `stuck`) with the provider."""
