"""The Python durable SDK (agent side of durable wire v1). See `collie.crew.sdk.agent` and docs/sdk.md."""

from collie.crew.sdk.agent import Answer, Collie, ItemHandle, Pane, open_collie

__all__ = ["Answer", "Collie", "ItemHandle", "Pane", "open_collie"]
