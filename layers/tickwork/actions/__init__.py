"""Scheduled actions: the model and state machine, the store, and scheduling."""
