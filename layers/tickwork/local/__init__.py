"""The local runtime: Tickwork whole on one machine, with no AWS account."""
