"""Recipients (docs/sequences.md#recipients): a time zone, quiet hours and frequency caps.

- `model`: recipients, quiet windows, caps and the time arithmetic (no I/O);
- `store`: recipients themselves;
- `policy`: quiet hours applied where a message's time is decided (its creation).

Caps and the quiet-hours re-check run at claim, in `tickwork.admission`.
"""
