"""Suppression: the (channel, address) pairs of a workspace that must not be messaged.

`model` holds the values (channels, reasons, address normalization), `store` the table."""
