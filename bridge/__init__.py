"""One machine's durable agents: reaching, polling and caching them, and carrying writes to them.

Imports only `crew`.
"""
