"""Web Push to the owner's phones (features P1–P4, X1; crew.md §5; docs/push.md).

Its one job: tell a phone that an ask waits or a turn ended — once per ask across restarts, within the
per-machine limits, end-to-end encrypted, never to a private or local address.

- `pusher`: subscriptions, the VAPID key, the limits and the sending (`Pusher`, `PushStore`);
- `turn_ends`: which turns ended and whether their push may go now, no I/O (`TurnEnds`);
- `turns`: the adapter that feeds `TurnEnds` and sends what it decided (`TurnPusher`).
Its routes are `collie.lead.routes.push` and `collie.lead.routes.turns`.
"""
