"""The phone API's routes, one module per resource, each with a `register(app, ...)` (lead.api calls them).

- `common`: what every group shares — the id and number rules, the one body reader (the door parsed it),
  the one error shape `{"error", "message"}`;
- `auth`: the door at the front of every request (Host/Origin, credential, matched route, body) and the
  error handlers that give every failure that shape;
- `reads`: the dashboard, conversations, a pane, its items, starters, the viewing lease;
- `writes`: send, ask answers, steer, stop, agent buttons, rename, close, reopen, a new conversation;
- `inbox`: features I3–I10, for the owner and for external senders (I10).
"""
