"""Schedule intents: what the app declares, and the reconciliation that keeps rows in step."""
