"""The crew's members as the lead holds them (crew.md §2–§3): links, sessions, views and routing.

Its one job: let members in, keep what their frames say, and carry a phone's reads and writes to the
member that owns the agent — under the lead's one lock per conversation.

- `session`: a member's session, no I/O (`Member`, `admit_hello`, `apply_frame`, `FrameQueue`);
- `link`: one member's WebSocket as the lead holds it (`Conn`, `LinkStuck`);
- `views`, `views_file`: what view frames build and cost, and the last views on disk;
- `records`: the crew's records (member tokens) on disk, off the event loop (`CrewRecords`);
- `routing`, `refusals`: reads and writes to members' agents (`Routing`) and the refusals remembered;
- `hub`: the adapter that accepts links and carries out what the pieces above decide (`Hub`).
"""
