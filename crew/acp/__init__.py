"""An adapter from the Agent Client Protocol (ACP) to the durable wire (issue 14, docs/acp.md)."""
