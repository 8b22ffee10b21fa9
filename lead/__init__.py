"""The lead: serves the phone's dashboard and API, gathers members, routes writes, keeps the inbox."""
