"""Tickwork: a scheduler engine for user-scheduled future actions."""

__version__ = "0.1.0"
