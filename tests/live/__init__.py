"""One process: trio (its virtual clock where time matters) with real sockets, no program started."""
