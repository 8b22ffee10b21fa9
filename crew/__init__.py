"""Collie crew: supervise durable AI coding agents on many machines from a phone.

`crew` holds what every layer shares: models, wire codecs, configuration and the `collie` command.
It imports nothing from `bridge`, `member` or `lead`.
"""

__version__ = "0.1.0"
