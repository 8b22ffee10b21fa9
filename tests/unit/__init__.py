"""Pure tests: no process, no socket, no event loop, no browser; the whole layer runs in seconds."""
