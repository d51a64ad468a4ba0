"""Migrates the database schema; run by the stack as a custom resource, or invoked by hand."""

from tickwork.lambdas.migrate import handler

__all__ = ["handler"]
