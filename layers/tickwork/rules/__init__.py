"""Automation rules (docs/rules.md): an app's events and reference dates become ordinary
scheduled_actions rows, made, moved and withdrawn through tickwork.actions.

- `model`: rules, triggers, idempotency keys, structured results;
- `templating`: the sandboxed templates payloads are rendered with (reusable);
- `metering`: what a template's render may use (operations, sizes, CPU time), and budgets
  several renders share;
- `conditions`: conditions on a context;
- `events`: the event producer (`emit_event`);
- `entities`: entities' reference dates, the time producer (`put_dates`, ...);
- `store`: rules themselves and what their changes do to their actions;
- `produce`: what the producers share (fire, withdraw, sync one entity).
"""
