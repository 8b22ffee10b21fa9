"""What the phone sees, and the live channel that keeps it current (features D1–D5; phone-api.md).

Its one job: turn what the readers and the hub know into the rows, sections, Needs you list and numbered
events a phone shows, and carry them over `GET /api/events` (its routes are `collie.lead.routes.events`).

- `core`: the live channel's decisions, no trio, no I/O (`EventLog`, `FeedState`, the event builders);
- `dashboard`: the dashboard's rows and sections, plain functions;
- `needs`, `needs_file`: the Needs you list, and when each open ask was first seen (kept on disk);
- `reads`: the reads of the conversations phones view (`ConversationReads`);
- `events`: the running feed (`Feed`, `Channel`).
"""
