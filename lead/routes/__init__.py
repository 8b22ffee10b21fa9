"""The phone API's routes, one module per resource, each with a `register(app, ...)` (collie.lead.routes.api calls them).

- `rules`, `bodies`: plain functions, no Quart — the id and number rules, the door's order, the one error
  shape, who may touch an inbox item (`rules`); what each route's body must hold and the request it makes
  (`bodies`);
- `common`: what every group shares around them — the one body reader, the one error response;
- `auth`: the door at the front of every request (Host/Origin, credential, matched route, body) and the
  error handlers that give every failure that shape;
- `reads`: the dashboard, conversations, a pane, its items, starters, the viewing lease;
- `writes`: send, ask answers, steer, stop, agent buttons, rename, close, reopen, a new conversation;
- `inbox`: features I3–I10, for the owner and for external senders (I10);
- `pairing`: the pairing page, `POST /pair`, a paired phone's live-channel ticket;
- `push`, `turns`: the Web Push key and subscriptions; each phone's turn-end settings;
- `events`: the live channel's stream and its viewing reports (the feed itself is `collie.lead.feed`);
- `api`: `create_api`, which registers the groups in order (the door first).
"""
