"""The `collie` command: one module per verb; each returns an exit status."""
