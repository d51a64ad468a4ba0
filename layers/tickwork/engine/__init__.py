"""The engine: tick, dispatch, admission, the resolver, the expander, deploy checks."""
