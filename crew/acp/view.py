"""How ACP `session/update`s and permission requests become durable items and asks (docs/acp.md table).

Plain code, no trio: `SessionView.apply(update)` takes one validated update model and changes the pane
through the SDK's synchronous item calls; the adapter feeds it in the order the agent sent them.

- `agent_message_chunk` grows one `reply` (a new one after anything else was posted in between, so
  the chat reads in the agent's order); `agent_thought_chunk` grows one `thinking` the same way;
  `user_message_chunk` grows one `user` item.
- One `toolCallId` is one `tool` item (issue 24 item 5): the first `tool_call` posts it; a repeated
  `tool_call` (Claude Code sends each twice) and every `tool_call_update` change it — status
  (`pending`/`in_progress` → running, `completed`, `failed`; a refused permission → `denied`), title
  and output. What the agent tells of a call is merged field by field, as ACP says.
- A tool's output shows what it did (issue 24 item 6): the command line (`$ …`, from `rawInput`), its
  text content, a compact diff of each edit, a terminal's output, and `rawOutput` where the content
  says nothing (Codex puts a command's output only there). At most `OUTPUT_MAX` characters: the start
  and the end are kept, the middle is left out and says how much.
- `plan` becomes progress steps; `current` is the first entry not completed; the next turn clears it.
- `finish(how)` ends a turn: growing items are closed, and every call still running is closed
  `failed` with a line saying why (stopped, the agent exited, …) — ACP leaves that to the client.
- A permission ask shows what it approves (issue 24 item 3): the command line, the file and a
  compact diff, else the call's other content or its `rawInput`. A body over the card's limit is
  handed on one character over it, so that Collie cuts it and says `Text shortened` (no Always
  allow, features Q6).
- The session's modes (`session/new`'s `modes`, `current_mode_update`) are the conversation's
  buttons, one per mode (at most 4, C7), the current one dimmed; the subtitle names the current one.
- `usage_update` (Codex sends it) adds `context N% used` to the subtitle (one kept without a field that
  broke the schema, claude-agent-acp's `"used": null`, changes nothing).
- `quiet(seconds)`: a turn silent for a while says `No output for 45 s` (issue 38) beside the running
  plan step, else in the subtitle; `quiet(None)` takes it away.
- Anything else (config options, cost…) is not shown here.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Callable
from typing import Any

from acp import schema

from collie.crew.asks import ACTION_LABEL_MAX, ACTIONS_MAX, BODY_MAX, LABEL_MAX

OUTPUT_MAX = 8000
TITLE_MAX = 200
PUSH_TITLE_MAX, PUSH_LINE_MAX = 60, 120  # features P2: what a notification shows of an ask
DIFF_CONTEXT = 1
DIFF_LINES_MAX = 2000
CALLS_KEPT = 256
MODES_MAX = ACTIONS_MAX  # the phone draws at most 4 of the agent's buttons (C7): the first 4 modes
MODES_KEPT = 32  # for naming the current mode in the subtitle
TOOL_STATUS = {"pending": "running", "in_progress": "running", "completed": "completed", "failed": "failed"}
ROLE_OF_KIND = {"allow_once": "allow", "allow_always": "always_allow", "reject_once": "deny", "reject_always": "deny"}
ENDED = {
    "stopped": "Stopped before it finished.",
    "crashed": "The agent exited before this call finished.",
    "error": "The turn ended with an error before this call finished.",
    "ended": "The turn ended without the agent saying this call finished.",
}
OUTPUT_KEYS = ("formatted_output", "aggregated_output", "output", "stdout", "result", "content", "text")


def block_text(block: Any) -> str:
    """The text of one content block; other kinds show as a short marker."""
    if isinstance(block, schema.TextContentBlock):
        return block.text
    if isinstance(block, schema.ResourceContentBlock):
        return f"[{block.name}]({block.uri})"
    kind = getattr(block, "type", "content")
    return f"[{kind}]"


def shorten(text: str, limit: int = OUTPUT_MAX) -> str:
    """At most `limit` characters: the start and the end, the middle left out (and said so)."""
    if len(text) <= limit:
        return text
    head = limit // 4
    note = f"\n… ({len(text) - limit} characters left out) …\n"
    tail = limit - head - len(note)
    return text[:head] + note + text[len(text) - tail:]


def compact_diff(path: str, old: str | None, new: str) -> str:
    """`edit <path>` (or `new file <path>`) and the changed lines with one line of context. Past
    `DIFF_LINES_MAX` lines (difflib's cost grows faster than the size) the common start and end are
    cut off in linear time and the rest shown as one hunk."""
    if old is None:
        lines = new.splitlines()
        return "\n".join([f"new file {path}", *(f"+{line}" for line in lines)])
    a, b = old.splitlines(), new.splitlines()
    if len(a) + len(b) > DIFF_LINES_MAX:
        start = 0
        while start < min(len(a), len(b)) and a[start] == b[start]:
            start += 1
        end = 0
        while end < min(len(a), len(b)) - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
            end += 1
        gone, came = a[start:len(a) - end], b[start:len(b) - end]
        if not gone and not came:
            return f"edit {path} (no change)"
        head = f"@@ -{start + 1},{len(gone)} +{start + 1},{len(came)} @@"
        return "\n".join([f"edit {path}", head, *(f"-{x}" for x in gone), *(f"+{x}" for x in came)])
    body = [line.rstrip("\n") for line in difflib.unified_diff(a, b, lineterm="", n=DIFF_CONTEXT)][2:]
    return "\n".join([f"edit {path}", *body]) if body else f"edit {path} (no change)"


def command_of(raw_input: Any) -> str | None:
    """The command line a tool call runs, from its `rawInput` (`command`/`cmd`: a string or argv; a
    `sh -c LINE` argv shows LINE)."""
    if not isinstance(raw_input, dict):
        return None
    cmd = raw_input.get("command", raw_input.get("cmd"))
    if isinstance(cmd, str) and cmd:
        return cmd
    if isinstance(cmd, list) and cmd and all(isinstance(w, str) for w in cmd):
        if len(cmd) == 3 and cmd[0].rsplit("/", 1)[-1] in ("sh", "bash", "zsh", "dash") and cmd[1] in ("-c", "-lc"):
            return cmd[2]
        return shlex.join(cmd)
    return None


def raw_text(raw: Any, depth: int = 0) -> str | None:
    """What a `rawOutput` says, as text: a string as it is; content blocks' texts; a dict's output
    field (Codex: `formatted_output`, `aggregated_output`, `stdout` + `stderr`, `exit_code`) — nothing
    when every such field is empty, or `exit N` when N ≠ 0; compact JSON only for a shape that has none
    of these fields."""
    if raw is None or depth > 3:
        return None
    if isinstance(raw, str):
        return raw or None
    if isinstance(raw, list):
        texts = [t for t in (raw_text(x, depth + 1) for x in raw) if t]
        return "\n".join(texts) or None
    if isinstance(raw, dict):
        if raw.get("type") == "text" and isinstance(raw.get("text"), str):
            return raw["text"] or None
        for key in OUTPUT_KEYS:
            if raw.get(key):
                text = raw_text(raw[key], depth + 1)
                if text:
                    text = text.rstrip("\n")
                    if key == "stdout" and isinstance(raw.get("stderr"), str) and raw["stderr"]:
                        text = f"{text}\n{raw['stderr'].rstrip()}"
                    code = raw.get("exit_code", raw.get("exitCode"))
                    if type(code) is int and code != 0:
                        text = f"{text}\nexit {code}"
                    return text
        if isinstance(raw.get("stderr"), str) and raw["stderr"]:
            return raw["stderr"]
        if any(key in raw for key in (*OUTPUT_KEYS, "stderr", "exit_code", "exitCode")):
            # a command's result whose every output field is empty (Codex: `"stdout": ""` beside its
            # call_id, process_id, duration…): nothing to show but a failing exit status (issue 38)
            code = raw.get("exit_code", raw.get("exitCode"))
            return f"exit {code}" if type(code) is int and code != 0 else None
    try:
        text = json.dumps(raw, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        return None
    return None if text in ("{}", "[]", "null", '""') else text


def edits_of_raw_input(raw_input: Any) -> list[str]:
    """Claude Code's Edit/Write/MultiEdit inputs (`file_path` with `old_string`/`new_string`, `content`
    or `edits`) and opencode's (`filePath` with `oldString`/`newString`; its ask's `filepath` with a
    unified `diff`) as compact diffs, for asks whose content carries none."""
    if not isinstance(raw_input, dict):
        return []
    path = next((raw_input[k] for k in ("file_path", "filePath", "filepath") if isinstance(raw_input.get(k), str)), None)
    if path is None:
        return []
    if isinstance(raw_input.get("diff"), str) and raw_input["diff"].strip():
        lines = raw_input["diff"].splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
        return ["\n".join([f"edit {path}", *lines[start:]])]
    new, old = raw_input.get("new_string", raw_input.get("newString")), raw_input.get("old_string", raw_input.get("oldString"))
    if isinstance(new, str):
        return [compact_diff(path, old if isinstance(old, str) else "", new)]
    if isinstance(raw_input.get("content"), str):
        return [compact_diff(path, None, raw_input["content"])]
    if isinstance(raw_input.get("edits"), list):
        return [compact_diff(path, e.get("old_string") or "", e["new_string"]) for e in raw_input["edits"]
                if isinstance(e, dict) and isinstance(e.get("new_string"), str)]
    return []


class Call:
    """What the agent has told of one tool call so far (ACP merges updates field by field)."""

    def __init__(self, handle: Any, call_id: str) -> None:
        self.handle, self.id = handle, call_id
        self.status = "running"
        self.kind: str | None = None
        self.title: str | None = None
        self.content: list = []
        self.raw_input: Any = None
        self.raw_output: Any = None
        self.output: str | None = None
        self.note: str | None = None  # why the client closed it
        self.terminal_seen: dict[str, str] = {}  # terminal id -> its last output (kept after release)

    def merge(self, u: Any) -> None:
        sent = u.model_fields_set
        if "kind" in sent and u.kind:
            self.kind = u.kind
        if "title" in sent and u.title is not None:
            self.title = u.title
        if "content" in sent and u.content is not None:
            self.content = list(u.content)
        if "raw_input" in sent:
            self.raw_input = u.raw_input
        if "raw_output" in sent:
            self.raw_output = u.raw_output


def render(call: Call, terminal_output: Callable[[str], str | None] | None = None) -> str | None:
    """A call's output: `$ command`, text content, diffs, terminal output, else rawOutput."""
    parts: list[str] = []
    cmd = command_of(call.raw_input)
    if cmd:
        parts.append(f"$ {cmd}")
    said = False
    for c in call.content:
        if isinstance(c, schema.ContentToolCallContent):
            text = block_text(c.content)
            if text and text != cmd:
                parts.append(text)
                said = True
        elif isinstance(c, schema.FileEditToolCallContent):
            parts.append(compact_diff(c.path, c.old_text, c.new_text))
            said = True
        elif isinstance(c, schema.TerminalToolCallContent):
            out = terminal_output(c.terminal_id) if terminal_output else None
            if out is not None:
                call.terminal_seen[c.terminal_id] = out
            out = call.terminal_seen.get(c.terminal_id)
            if out:
                parts.append(out.rstrip("\n"))
                said = True
    if not said:
        raw = raw_text(call.raw_output)
        if raw:
            parts.append(raw.rstrip("\n"))
    if call.note:
        parts.append(call.note)
    text = "\n".join(p for p in parts if p)
    return shorten(text) if text else None


class SessionView:
    def __init__(self, pane, terminal_output: Callable[[str], str | None] | None = None) -> None:
        self.pane = pane
        self.terminal_output = terminal_output
        self._growing: tuple[str, Any] | None = None  # (kind, handle) of the item that grows now
        self.calls: dict[str, Call] = {}  # tool_call_id -> what we know of it (the last CALLS_KEPT)
        self.modes: list[tuple[str, str]] = []  # the session's modes (id, name), at most MODES_KEPT
        self.mode: str | None = None
        self.context: tuple[int, int] | None = None  # (tokens used, context size) from usage_update
        self.plan: tuple[list[str], int] | None = None  # this turn's plan: (steps, the current one)
        self._quiet: str | None = None  # `No output for 45 s` while the agent is silent
        self._plain_subtitle: str | None = None  # the subtitle before the silence was said in it

    # compatibility for the adapter: the item handle and the name of a call
    @property
    def tools(self) -> dict[str, Any]:
        return {cid: c.handle for cid, c in self.calls.items()}

    @property
    def tool_names(self) -> dict[str, str]:
        return {cid: (c.title or c.kind or "tool")[:80] for cid, c in self.calls.items()}

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

    def _call(self, update: Any) -> tuple[Call, bool]:
        call = self.calls.get(update.tool_call_id)
        if call is not None:
            return call, False
        self._close_growing()
        name = update.kind or "tool"
        status = TOOL_STATUS.get(update.status or "pending", "running")
        handle = self.pane.tool(update.tool_call_id, name, (update.title or "")[:TITLE_MAX] or None, status=status)
        call = self.calls[update.tool_call_id] = Call(handle, update.tool_call_id)
        call.status = status
        while len(self.calls) > CALLS_KEPT:
            del self.calls[next(iter(self.calls))]
        return call, True

    def _apply_call(self, update: Any) -> None:
        call, new = self._call(update)
        before = (call.status, call.title, call.kind, call.output)
        call.merge(update)
        if update.status is not None and call.status != "denied":
            call.status = TOOL_STATUS.get(update.status, "running")
        call.output = render(call, self.terminal_output)
        fields: dict[str, Any] = {}
        if call.status != before[0] and not new:
            fields["status"] = call.status
        if call.title is not None and call.title != before[1] and not (new and call.title == update.title):
            fields["title"] = call.title[:TITLE_MAX]
        if call.kind is not None and call.kind != before[2] and not new:
            fields["name"] = call.kind
        if call.output != before[3]:
            fields["output"] = call.output
        if fields:
            call.handle.update(**fields)

    def apply(self, update: Any) -> None:
        if isinstance(update, schema.AgentMessageChunk):
            self._grow("reply", block_text(update.content))
        elif isinstance(update, schema.AgentThoughtChunk):
            self._grow("thinking", block_text(update.content))
        elif isinstance(update, schema.UserMessageChunk):
            self._grow("user", block_text(update.content))
        elif isinstance(update, (schema.ToolCallStart, schema.ToolCallProgress)):
            self._apply_call(update)
        elif isinstance(update, schema.CurrentModeUpdate):
            self.mode_changed(update.current_mode_id)
        elif isinstance(update, schema.UsageUpdate):
            used, size = getattr(update, "used", None), getattr(update, "size", None)  # kept without a misfit field
            if type(size) is int and type(used) is int and size > 0 and used >= 0:
                before = self.context
                self.context = (used, size)
                if before is None or round(100 * before[0] / before[1]) != round(100 * used / size):
                    self._draw_subtitle()
        elif isinstance(update, schema.AgentPlanUpdate):
            entries = update.entries
            current = next((i for i, e in enumerate(entries) if e.status != "completed"), len(entries))
            self.plan = ([e.content[:TITLE_MAX] for e in entries], current)
            self._draw_plan()

    def _draw_plan(self) -> None:
        steps, current = self.plan or ([], 0)
        if self._quiet and current < len(steps):  # a step runs: line 2 shows it, so the silence goes there
            steps = list(steps)
            steps[current] = f"{steps[current]} · {self._quiet}"[:TITLE_MAX]
        if steps:
            self.pane.progress(steps=steps, current=current)

    def quiet(self, seconds: float | None) -> None:
        """`No output for 45 s` while the agent has sent nothing for a while (issue 38), or None once it
        does: on the phone's line 2, beside the running step of the plan, else in the subtitle."""
        words = None if seconds is None else f"No output for {_duration(seconds)}"
        if words == self._quiet:
            return
        self._quiet = words
        steps, current = self.plan or ([], 0)
        if current < len(steps):
            self._draw_plan()
        else:
            self._draw_subtitle()

    def set_modes(self, state: Any) -> None:
        """The session's modes (`SessionModeState`) as the conversation's buttons: one per mode, the
        current one dimmed, and the subtitle naming it."""
        if state is None:
            return
        self.modes = [(m.id, m.name) for m in state.available_modes][:MODES_KEPT]
        self.mode = state.current_mode_id
        self._draw_modes()

    def mode_changed(self, mode_id: str) -> None:
        if self.modes and mode_id != self.mode:
            self.mode = mode_id
            self._draw_modes()

    def mode_of_action(self, action_id: str) -> str | None:
        if action_id.startswith("mode-") and action_id[5:].isdigit() and int(action_id[5:]) < min(len(self.modes), MODES_MAX):
            return self.modes[int(action_id[5:])][0]
        return None

    def _draw_modes(self) -> None:
        self.pane.set_actions([{"id": f"mode-{i}", "label": name[:ACTION_LABEL_MAX] or mid[:ACTION_LABEL_MAX],
                                "disabled": mid == self.mode} for i, (mid, name) in enumerate(self.modes[:MODES_MAX])])
        self._draw_subtitle()

    def _draw_subtitle(self) -> None:
        """`Mode: <name> · context 34% used` — what of the two the agent reports — and `No output for
        45 s` while the agent is silent with no plan step running (the subtitle it had comes back)."""
        parts = []
        name = dict(self.modes).get(self.mode)
        if name:
            parts.append(f"Mode: {name}")
        if self.context is not None:
            used, size = self.context
            parts.append(f"context {min(100, round(100 * used / size))}% used")
        steps, current = self.plan or ([], 0)
        said = self._quiet if current >= len(steps) else None
        if said and not parts and self._plain_subtitle is None:
            self._plain_subtitle = self.pane._conv.subtitle or ""
        if said:
            parts.append(said)
        if parts:
            self.pane.set_subtitle(" · ".join(parts)[:TITLE_MAX])
        elif self._plain_subtitle is not None:
            self.pane.set_subtitle(self._plain_subtitle or None)
        if not said:
            self._plain_subtitle = None

    def terminal_changed(self, terminal_id: str) -> None:
        """A terminal's output grew: the calls showing it show it again."""
        for call in self.calls.values():
            if any(isinstance(c, schema.TerminalToolCallContent) and c.terminal_id == terminal_id for c in call.content):
                output = render(call, self.terminal_output)
                if output != call.output:
                    call.output = output
                    call.handle.update(output=output)

    def tool_denied(self, tool_call_id: str) -> None:
        call = self.calls.get(tool_call_id)
        if call is not None:
            call.status = "denied"
            call.handle.update(status="denied")

    def finish(self, how: str = "ended") -> None:
        """The turn ended (`how`: ended, stopped, crashed, error): close what grows and every call still
        running (`failed`, with a line saying why)."""
        self._close_growing()
        for call in self.calls.values():
            if call.status == "running":
                call.status = "failed"
                call.note = ENDED.get(how, ENDED["ended"])
                call.output = render(call, self.terminal_output)
                call.handle.update(status="failed", output=call.output)

    def begin(self) -> None:
        """A new turn: the last turn's plan no longer labels it (it stays shown until then)."""
        self.plan = None
        if self.pane._conv.progress is not None:
            self.pane.progress()


def _duration(seconds: float) -> str:
    """`45 s` under two minutes, then `3 min`."""
    whole = int(round(seconds))
    return f"{whole} s" if whole < 120 else f"{whole // 60} min"


def permission_body(call: Any, known: Call | None) -> str | None:
    """What an ask approves: the command line, each edit as a compact diff, else the other content
    or the `rawInput` (the request's own tool call first, then what the agent said of the call before)."""
    raw_input = call.raw_input if call.raw_input is not None else (known.raw_input if known else None)
    content = list(call.content or []) or (known.content if known else [])
    parts: list[str] = []
    cmd = command_of(raw_input)
    if cmd:
        parts.append(f"$ {cmd}")
    diffs = [compact_diff(c.path, c.old_text, c.new_text) for c in content
             if isinstance(c, schema.FileEditToolCallContent)]
    parts += diffs or edits_of_raw_input(raw_input)
    texts = [block_text(c.content) for c in content if isinstance(c, schema.ContentToolCallContent)]
    parts += [t for t in texts if t and t != cmd]
    if len(parts) == 0 and raw_input is not None:
        raw = raw_text(raw_input)
        if raw:
            parts.append(raw)
    text = "\n".join(parts)
    if not text:
        return None
    return text if len(text) <= BODY_MAX else text[:BODY_MAX + 1]  # Collie cuts it and says so (Q6)


def permission_ask(request: schema.RequestPermissionRequest, tool_name: str | None,
                   item_id: str | None, known: Call | None = None) -> tuple[dict, dict[str, str]]:
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
        options.append({"id": oid, "label": opt.name[:LABEL_MAX + 1] or opt.kind, "role": role})
        back[oid] = opt.option_id
    # over a limit by one character at most: Collie cuts it and says `Text shortened` (Q6), never silently
    title = (call.title or tool_name or "Allow the tool call?")[:TITLE_MAX + 1]
    tool = (tool_name or call.title or call.kind or "tool")[:80]
    spec = {"kind": "permission", "title": title, "tool_call_id": call.tool_call_id, "item_id": item_id,
            "tool": tool, "options": options}
    body = permission_body(call, known)
    if body:
        spec["body"] = body
    # the notification shows what the card shows: the title and the command or change, on one line, within
    # P2's limits — whole, it offers Allow (B5, issue 42.4); cut or spread over lines, only Open
    spec["push"] = {"title": _one_line(title, PUSH_TITLE_MAX)}
    if body:
        spec["push"]["line"] = _one_line(body, PUSH_LINE_MAX)
    return spec, back


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
