"""The lead's door (phone-api.md): who may come in, over what, and how the HTTP server holds up.

Its one job: let in only paired phones, the local credential and API-token senders, over TLS the phone
can trust, within a budget of connections, and serve them with hypercorn's fixes applied.

- `pairing`, `devices`: the pairing page's guards and paired phones' credentials (`Door`, `Devices`);
- `policy`: which route a credential opens and what a body must be (`opens_to_senders`, `parse_body`);
- `jar`: a browser's oversized cookie jar, read and cleared of what is not the lead's;
- `tls`, `trust`: the lead's own certificate authority and served certificate; `/trust` and its CA file;
- `connections`: the connection budget (`ConnectionBudget`);
- `packing`: gzip and ETags on answers;
- `http`, `hypercorn_fix`: the HTTP server (`create_app`, `serve_http`) and the hypercorn fixes it needs.
"""
