"""How ACP `session/update`s and permission requests become durable items and asks (docs/acp.md table).

Plain code, no trio: `SessionView.apply(update)` takes one validated update model and changes the pane
through the SDK's synchronous item calls; the adapter feeds it in the order the agent sent them.

- `agent_message_chunk` grows one `reply` (a new one after anything else was posted in between, so
  the chat reads in the agent's order); `agent_thought_chunk` grows one `thinking` the same way;
  `user_message_chunk` grows one `user` item.
- `tool_call` posts a `tool` item; `tool_call_update` changes its status, title and output
  (`pending`/`in_progress` → running, `completed`, `failed`; a refused permission → `denied`).
- `plan` becomes progress steps; `current` is the first entry not completed.
- Anything else (commands, modes, usage…) is not shown.
`finish()` closes every growing item at the end of a turn.
"""

from __future__ import annotations

from typing import Any

from acp import schema

OUTPUT_MAX = 2000
TITLE_MAX = 200
TOOL_STATUS = {"pending": "running", "in_progress": "running", "completed": "completed", "failed": "failed"}
ROLE_OF_KIND = {"allow_once": "allow", "allow_always": "always_allow", "reject_once": "deny", "reject_always": "deny"}


def block_text(block: Any) -> str:
    """The text of one content block; other kinds show as a short marker."""
    if isinstance(block, schema.TextContentBlock):
        return block.text
    if isinstance(block, schema.ResourceContentBlock):
        return f"[{block.name}]({block.uri})"
    kind = getattr(block, "type", "content")
    return f"[{kind}]"


def tool_output(content: list | None) -> str | None:
    if not content:
        return None
    parts = []
    for c in content:
        if isinstance(c, schema.ContentToolCallContent):
            parts.append(block_text(c.content))
        elif isinstance(c, schema.FileEditToolCallContent):
            parts.append(f"edit {c.path}")
        elif isinstance(c, schema.TerminalToolCallContent):
            parts.append(f"terminal {c.terminal_id}")
    text = "\n".join(parts)
    return text[:OUTPUT_MAX] if text else None


class SessionView:
    def __init__(self, pane) -> None:
        self.pane = pane
        self._growing: tuple[str, Any] | None = None  # (kind, handle) of the item that grows now
        self.tools: dict[str, Any] = {}  # tool_call_id -> handle
        self.tool_names: dict[str, str] = {}

    def _grow(self, kind: str, text: str) -> None:
        if self._growing is not None and self._growing[0] == kind:
            self._growing[1].append(text)
            return
        self._close_growing()
        if kind == "user":
            handle = self.pane.post("user", text=text)
        else:
            handle = self.pane.post(kind, text=text, final=False)
        self._growing = (kind, handle)

    def _close_growing(self) -> None:
        if self._growing is not None:
            kind, handle = self._growing
            if kind != "user":
                handle.finish()
            self._growing = None

    def apply(self, update: Any) -> None:
        if isinstance(update, schema.AgentMessageChunk):
            self._grow("reply", block_text(update.content))
        elif isinstance(update, schema.AgentThoughtChunk):
            self._grow("thinking", block_text(update.content))
        elif isinstance(update, schema.UserMessageChunk):
            self._grow("user", block_text(update.content))
        elif isinstance(update, schema.ToolCallStart):
            self._close_growing()
            name = update.kind or "tool"
            handle = self.pane.tool(update.tool_call_id, name, (update.title or "")[:TITLE_MAX] or None,
                                    status=TOOL_STATUS.get(update.status or "pending", "running"))
            output = tool_output(update.content)
            if output:
                handle.update(output=output)
            self.tools[update.tool_call_id] = handle
            self.tool_names[update.tool_call_id] = (update.title or name)[:80]
        elif isinstance(update, schema.ToolCallProgress):
            handle = self.tools.get(update.tool_call_id)
            if handle is None:  # an update for a call we never saw starts it
                self._close_growing()
                name = update.kind or "tool"
                handle = self.pane.tool(update.tool_call_id, name, (update.title or "")[:TITLE_MAX] or None)
                self.tools[update.tool_call_id] = handle
                self.tool_names[update.tool_call_id] = (update.title or name)[:80]
            fields: dict[str, Any] = {}
            if update.status is not None:
                fields["status"] = TOOL_STATUS.get(update.status, "running")
            if update.title is not None:
                fields["title"] = update.title[:TITLE_MAX]
                self.tool_names[update.tool_call_id] = update.title[:80]
            output = tool_output(update.content)
            if output is not None:
                fields["output"] = output
            if fields:
                handle.update(**fields)
        elif isinstance(update, schema.AgentPlanUpdate):
            entries = update.entries
            current = next((i for i, e in enumerate(entries) if e.status != "completed"), len(entries))
            self.pane.progress(steps=[e.content[:TITLE_MAX] for e in entries], current=current)

    def tool_denied(self, tool_call_id: str) -> None:
        handle = self.tools.get(tool_call_id)
        if handle is not None:
            handle.update(status="denied")

    def finish(self) -> None:
        self._close_growing()


def permission_ask(request: schema.RequestPermissionRequest, tool_name: str | None,
                   item_id: str | None) -> tuple[dict, dict[str, str]]:
    """The ask for one `session/request_permission`, and our option id → the agent's option id.

    Our ids are `o0`, `o1`, … so that nothing the agent chose reaches the wire as an id; a kind we do
    not know is left out (an ask must not offer what it cannot name)."""
    options, back = [], {}
    call = request.tool_call
    for i, opt in enumerate(request.options):
        role = ROLE_OF_KIND.get(opt.kind)
        if role is None:
            continue
        oid = f"o{i}"
        options.append({"id": oid, "label": opt.name[:60] or opt.kind, "role": role})
        back[oid] = opt.option_id
    title = (call.title or tool_name or "Allow the tool call?")[:TITLE_MAX]
    tool = (tool_name or call.title or call.kind or "tool")[:80]
    spec = {"kind": "permission", "title": title, "tool_call_id": call.tool_call_id, "item_id": item_id,
            "tool": tool, "options": options}
    body = tool_output(call.content)
    if body:
        spec["body"] = body
    return spec, back
