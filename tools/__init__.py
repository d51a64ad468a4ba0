"""Tools beside the product: benchmarks and fault injection (not in the Lambda layer)."""
