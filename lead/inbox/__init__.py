"""The inbox (features I1–I11; crew.md §4): work that waits for a machine, runs once, in approval order.

Its one job: keep every send, starter and relayed write the owner queued — across a sleeping member and
a lead restart — and run each exactly once when its agent can take it.

- `item`: an item and the one table of its states (`TRANSITIONS`, `transition`, `IllegalTransition`);
- `core`: the decisions, no I/O (`InboxCore`, `Items`, `item_id`, the limits);
- `texts`: what the sender and the owner read of an item, and its receipts;
- `pace`: when the loop looks again and when a held item is tried again;
- `sight`: what the inbox sees of machines and agents (read-only);
- `store`: the SQLite record (`InboxStore`, `Record`);
- `dispatch`: the trio side of running one item (`Dispatcher`);
- `service`: the running inbox (`Inbox`) that ties them together.
"""
