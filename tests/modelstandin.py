"""A model server stand-in for the real-agent tests (issue 24): the tests decide what the model says.

One small HTTP server on 127.0.0.1 (port 0) that speaks just enough of two streaming APIs:
- the OpenAI **Responses** API (`POST …/responses`, server-sent events `response.created`,
  `response.output_item.added`, `response.output_text.delta`, `response.output_item.done`,
  `response.completed`), as Codex reads it through a `model_provider` with a `base_url`;
- the Anthropic **Messages** API (`POST …/v1/messages`, events `message_start`, `content_block_start`,
  `content_block_delta` (`text_delta`, `input_json_delta`), `content_block_stop`, `message_delta`,
  `message_stop`), as Claude Code and claude-agent-acp read it through `ANTHROPIC_BASE_URL`;
- the Gemini API (`POST …/models/<model>:streamGenerateContent?alt=sse`, each event a
  `GenerateContentResponse` whose candidate's parts carry `text` or a `functionCall`, the last one a
  `finishReason` and `usageMetadata`; `:generateContent` answers whole, a JSON one for a request that
  asks for JSON; `:countTokens`), as Gemini CLI reads it through `GOOGLE_GEMINI_BASE_URL`;
- the OpenAI **Chat Completions** API (`POST …/chat/completions`, with `"stream": true` server-sent
  `chat.completion.chunk`s whose `delta` carries `content` or `tool_calls`, a `finish_reason`, a usage
  chunk and `data: [DONE]`; without it one `chat.completion`), as Qwen Code (`OPENAI_BASE_URL`) and
  opencode (an OpenAI-compatible provider) read it.
Tool calls are made with the tools the request offers, their arguments filled from each tool's own
JSON schema (the command, path, old and new text under whatever names the agent chose).

A test scripts the model per prompt: `standin.script("make the file", [Shell("touch x"), Text("Made.")])`.
Which step answers a request is read from the request itself (how many tool results follow the user's
last text), so retries and the agents' side requests (titles, token counts) never shift the script.
Steps: `Text` (a reply, streamed in chunks), `Shell` (a command-line tool call), `Edit` (a file edit
tool call), `Read` (a read-file tool call: Qwen Code and claude-agent-acp edit only a file read first), `Plan` (the agent's plan tool: Codex's update_plan, Claude Code's TodoWrite), `Fail` (an
HTTP error such as 401 or 500 with the API's error body), `Hang` (a reply that streams a first chunk
and then stalls until the client goes away, for stop). A prompt with no script
gets `Text("stand-in reply")`; a request without tools (a side request) gets a short plain reply.
Every request is kept (`requests`) so that a test can check what the agent sent, e.g. a tool's output.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import attrs

HANG_MAX = 60.0
BODY_MAX = 16 * 1024 * 1024


@attrs.frozen
class Text:
    text: str
    chunks: int = 3


@attrs.frozen
class Shell:
    command: str


@attrs.frozen
class Edit:
    path: str  # absolute
    old: str
    new: str


@attrs.frozen
class Read:
    path: str  # absolute: the agent's read-file tool (Qwen Code edits only a file read first)


@attrs.frozen
class Plan:
    steps: tuple[str, ...]  # the first in progress, the others pending


@attrs.frozen
class Fail:
    status: int
    message: str


@attrs.frozen
class Hang:
    first: str


def _chunks(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


class StandIn:
    """The server; `with StandIn() as s:` starts it in a thread and stops it (and any stalled stream)."""

    def __init__(self) -> None:
        self.scripts: dict[str, list] = {}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.standin = self
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def script(self, prompt: str, steps: list) -> None:
        """What the model does for a user prompt containing `prompt`: the n-th model call of that turn
        (n = tool results seen since the prompt) answers with steps[n]; past the end, the last step."""
        with self.lock:
            self.scripts[prompt] = list(steps)

    def step_for(self, prompt: str, n: int):
        with self.lock:
            for key, steps in self.scripts.items():
                if key in prompt:
                    return steps[min(n, len(steps) - 1)]
        return Text("stand-in reply")

    def record(self, api: str, path: str, body: dict, headers: dict[str, str]) -> None:
        with self.lock:
            self.requests.append({"api": api, "path": path, "body": body, "headers": headers,
                                  "at": time.monotonic()})

    def main_requests(self, api: str) -> list[dict]:
        """The requests that carried tools (the agent's turns, not its side requests)."""
        with self.lock:
            return [r["body"] for r in self.requests if r["api"] == api and r["body"].get("tools")]


# --- reading a request: the prompt and how far the turn is -------------------------------------

def responses_turn(body: dict) -> tuple[str, int]:
    """(the user's last text, function/custom call outputs after it) of a Responses request."""
    prompt, n = "", 0
    for item in body.get("input") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message" and item.get("role") == "user":
            texts = [c.get("text", "") for c in item.get("content") or [] if isinstance(c, dict)]
            text = next((t for t in reversed(texts) if isinstance(t, str)), "")
            if text.startswith("<environment_context>") or text.startswith("<user_instructions>") \
                    or text.startswith("# AGENTS.md"):
                continue
            prompt, n = text, 0
        elif item.get("type") in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            n += 1
    return prompt, n


def messages_turn(body: dict) -> tuple[str, int]:
    """(the user's last text, tool results after it) of a Messages request."""
    prompt, n = "", 0
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        texts = [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"
                 and not str(b.get("text", "")).startswith("<system-reminder>")]
        results = sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result")
        if texts:  # a new prompt, even beside the results of a refused call; the last block because after
            prompt, n = texts[-1], 0  # a stop Claude Code sends "[Request interrupted by user]" first
        else:
            n += results
    return prompt, n


def tool_names(body: dict) -> set[str]:
    return {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}


# --- the server ------------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: the tests read `requests`
        pass

    def do_GET(self) -> None:  # model lists and health checks: an empty, valid answer
        self._json(200, {"object": "list", "data": [], "models": []})

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        standin: StandIn = self.server.standin
        length = int(self.headers.get("content-length") or 0)
        if length > BODY_MAX:
            self._json(413, {"error": {"message": "too large"}})
            return
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        if self.headers.get("content-encoding") == "zstd" or not isinstance(body, dict):
            body = {}
        path = self.path.split("?")[0]
        try:
            if path.endswith("/responses"):
                standin.record("responses", path, body, self._headers())
                self._responses(standin, body)
            elif path.endswith("/messages/count_tokens"):
                self._json(200, {"input_tokens": 10})
            elif path.endswith("/messages"):
                standin.record("messages", path, body, self._headers())
                self._messages(standin, body)
            elif path.endswith(":countTokens"):
                self._json(200, {"totalTokens": 10})
            elif path.endswith(":streamGenerateContent") or path.endswith(":generateContent"):
                standin.record("gemini", path, body, self._headers())
                self._gemini(standin, body, stream=path.endswith(":streamGenerateContent"))
            elif path.endswith("/chat/completions"):
                standin.record("chat", path, body, self._headers())
                self._chat(standin, body)
            else:
                self._json(404, {"error": {"type": "not_found_error", "message": f"no route {path}"}})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    # plain answers
    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, kind: str, data: dict) -> None:
        self.wfile.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _stall(self, standin: StandIn) -> None:
        """Keep the stream open (a comment line every 0.2 s) until the client goes or the test ends."""
        deadline = time.monotonic() + HANG_MAX
        while time.monotonic() < deadline and not standin.closing.is_set():
            time.sleep(0.2)
            self.wfile.write(b": waiting\n\n")
            self.wfile.flush()

    # the Responses API (Codex)
    def _responses(self, standin: StandIn, body: dict) -> None:
        prompt, n = responses_turn(body)
        step = standin.step_for(prompt, n) if body.get("tools") else Text("stand-in", 1)
        if isinstance(step, Fail):
            self._json(step.status, {"error": {"message": step.message, "type": "invalid_request_error",
                                               "code": "invalid_api_key" if step.status == 401 else None}})
            return
        rid = f"resp_{len(standin.requests)}"
        self._sse_start()
        self._event("response.created", {"type": "response.created", "response": {"id": rid}})
        if isinstance(step, Text | Hang):
            text = step.first if isinstance(step, Hang) else step.text
            mid = f"msg_{rid}"
            self._event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                        "item": {"type": "message", "role": "assistant", "id": mid, "content": []}})
            for part in _chunks(text, 1 if isinstance(step, Hang) else step.chunks):
                self._event("response.output_text.delta", {"type": "response.output_text.delta", "item_id": mid,
                                                           "output_index": 0, "content_index": 0, "delta": part})
            if isinstance(step, Hang):
                self._stall(standin)
                return
            self._event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                        "item": {"type": "message", "role": "assistant", "id": mid,
                                 "content": [{"type": "output_text", "text": text}]}})
        elif isinstance(step, Shell | Read):  # Codex reads a file with a (read-only, never asked) `cat`
            line = step.command if isinstance(step, Shell) else f"cat {step.path}"
            name, args = _shell_call(tool_names(body), line)
            self._event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                        "item": {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}",
                                 "name": name, "arguments": json.dumps(args)}})
        elif isinstance(step, Edit):
            patch = _patch(step)
            names = tool_names(body)
            custom = any(t.get("type") == "custom" and t.get("name") == "apply_patch"
                         for t in body.get("tools") or [] if isinstance(t, dict))
            if custom:
                item = {"type": "custom_tool_call", "id": f"ct_{rid}", "call_id": f"call_{rid}",
                        "name": "apply_patch", "input": patch}
            elif "apply_patch" in names:
                item = {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}",
                        "name": "apply_patch", "arguments": json.dumps({"input": patch})}
            else:  # no apply_patch tool offered: patch through the shell, as codex's own prompt teaches
                name, args = _shell_call(names, f"apply_patch <<'EOF'\n{patch}EOF\n")
                item = {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}", "name": name,
                        "arguments": json.dumps(args)}
            self._event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                      "item": item})
        elif isinstance(step, Plan):
            plan = [{"step": text, "status": "in_progress" if i == 0 else "pending"}
                    for i, text in enumerate(step.steps)]
            self._event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                        "item": {"type": "function_call", "id": f"fc_{rid}", "call_id": f"call_{rid}",
                                 "name": "update_plan", "arguments": json.dumps({"plan": plan})}})
        self._event("response.completed", {"type": "response.completed", "response": {
            "id": rid, "usage": {"input_tokens": 10, "input_tokens_details": None, "output_tokens": 5,
                                 "output_tokens_details": None, "total_tokens": 15}}})

    # the Messages API (Claude Code)
    def _messages(self, standin: StandIn, body: dict) -> None:
        prompt, n = messages_turn(body)
        step = standin.step_for(prompt, n) if body.get("tools") else Text("Stand-in", 1)
        if isinstance(step, Fail):
            kind = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error",
                    529: "overloaded_error"}.get(step.status, "api_error")
            self._json(step.status, {"type": "error", "error": {"type": kind, "message": step.message}})
            return
        mid = f"msg_{len(standin.requests)}"
        self._sse_start()
        self._event("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "content": [], "model": body.get("model", "stand-in"),
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}})
        stop = "end_turn"
        if isinstance(step, Text | Hang):
            text = step.first if isinstance(step, Hang) else step.text
            self._event("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}})
            for part in _chunks(text, 1 if isinstance(step, Hang) else step.chunks):
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                    "delta": {"type": "text_delta", "text": part}})
            if isinstance(step, Hang):
                self._stall(standin)
                return
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
        else:
            names = tool_names(body)  # the ACP front end offers its own tools (over the client's fs, terminals)
            if isinstance(step, Plan):
                name = "TodoWrite"
                todos = [{"content": text, "activeForm": text, "status": "in_progress" if i == 0 else "pending"}
                         for i, text in enumerate(step.steps)]
                args = {"todos": todos}
            elif isinstance(step, Read):
                name = "mcp__acp__Read" if "mcp__acp__Read" in names else "Read"
                args = {"file_path": step.path}
            elif isinstance(step, Shell):
                name = "mcp__acp__Bash" if "mcp__acp__Bash" in names else "Bash"
                args = {"command": step.command, "description": "Run the test's command"}
                if name == "mcp__acp__Bash":
                    args["timeout"] = 60000  # required by claude-code-acp's own Bash tool
            else:
                name = "mcp__acp__Edit" if "mcp__acp__Edit" in names else "Edit"
                args = {"file_path": step.path, "old_string": step.old, "new_string": step.new}
            self._event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
                "type": "tool_use", "id": f"toolu_{mid}", "name": name, "input": {}}})
            encoded = json.dumps(args)
            for part in _chunks(encoded, 2):
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                    "delta": {"type": "input_json_delta", "partial_json": part}})
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
            stop = "tool_use"
        self._event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": 5}})
        self._event("message_stop", {"type": "message_stop"})


    # the Gemini API (Gemini CLI)
    def _gemini(self, standin: StandIn, body: dict, *, stream: bool) -> None:
        prompt, n = gemini_turn(body)
        tools = gemini_tools(body)
        config = body.get("generationConfig") or {}
        if not tools:  # a side request: Gemini CLI's JSON checks (who speaks next, loops), titles, summaries
            if config.get("responseMimeType") == "application/json" or config.get("responseJsonSchema") \
                    or config.get("responseSchema"):
                step = Text(json.dumps({"reasoning": "The model answered.", "next_speaker": "user"}), 1)
            else:
                step = Text("Stand-in", 1)
        else:
            step = standin.step_for(prompt, n)
        if isinstance(step, Fail):
            status = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED"}.get(
                step.status, "INTERNAL")
            self._json(step.status, {"error": {"code": step.status, "message": step.message, "status": status}})
            return
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}

        def response(parts: list, finish: str | None = None) -> dict:
            candidate: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
            if finish:
                candidate["finishReason"] = finish
            return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "stand-in"}

        if isinstance(step, Text | Hang):
            text = step.first if isinstance(step, Hang) else step.text
            pieces = _chunks(text, 1 if isinstance(step, Hang) else step.chunks)
            if not stream:
                self._json(200, response([{"text": text}], "STOP"))
                return
            self._sse_start()
            for i, part in enumerate(pieces):
                self._data(response([{"text": part}], "STOP" if i == len(pieces) - 1 and isinstance(step, Text)
                                    else None))
            if isinstance(step, Hang):
                self._stall(standin)
            return
        name, args = tool_call(tools, step)
        call = {"functionCall": {"name": name, "args": args}}
        if not stream:
            self._json(200, response([call], "STOP"))
            return
        self._sse_start()
        self._data(response([call], "STOP"))

    # the Chat Completions API (Qwen Code, opencode)
    def _chat(self, standin: StandIn, body: dict) -> None:
        prompt, n = chat_turn(body)
        tools = chat_tools(body)
        step = standin.step_for(prompt, n) if tools else Text("Stand-in", 1)
        if isinstance(step, Fail):
            self._json(step.status, {"error": {"message": step.message, "type": "invalid_request_error"
                                               if step.status < 500 else "server_error",
                                               "code": "invalid_api_key" if step.status == 401 else None}})
            return
        cid = f"chatcmpl-{len(standin.requests)}"
        model = body.get("model", "stand-in")
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        if isinstance(step, Text | Hang):
            text = step.first if isinstance(step, Hang) else step.text
            if not body.get("stream"):
                self._json(200, {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                              "finish_reason": "stop"}], "usage": usage})
                return
            self._sse_start()
            self._data(chunk({"role": "assistant", "content": ""}))
            for part in _chunks(text, 1 if isinstance(step, Hang) else step.chunks):
                self._data(chunk({"content": part}))
            if isinstance(step, Hang):
                self._stall(standin)
                return
            self._data(chunk({}, "stop"))
        else:
            name, args = tool_call(tools, step)
            call = {"id": f"call_{cid}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            if not body.get("stream"):
                self._json(200, {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                                      "tool_calls": [call]},
                                              "finish_reason": "tool_calls"}], "usage": usage})
                return
            self._sse_start()
            self._data(chunk({"role": "assistant", "content": None, "tool_calls": [{"index": 0, **call}]}))
            self._data(chunk({}, "tool_calls"))
        self._data({"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                    "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _data(self, obj: dict) -> None:
        self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
        self.wfile.flush()


# --- the Gemini and Chat Completions requests: the prompt, how far the turn is, the tools ---------------

def gemini_turn(body: dict) -> tuple[str, int]:
    """(the user's last text, function responses after it) of a Gemini request."""
    prompt, n = "", 0
    for content in body.get("contents") or []:
        if not isinstance(content, dict) or content.get("role") != "user":
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
        results = sum(1 for p in parts if "functionResponse" in p)
        if results:
            n += results
        elif texts:
            prompt, n = texts[-1], 0
    return prompt, n


def chat_turn(body: dict) -> tuple[str, int]:
    """(the user's last text, tool results after it) of a Chat Completions request."""
    prompt, n = "", 0
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        if msg.get("role") == "tool":
            n += 1
        elif msg.get("role") == "user":
            content = msg.get("content")
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            texts = [p.get("text") for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
                     and not p["text"].startswith("<system-reminder>")]
            if texts:
                prompt, n = "\n".join(texts), 0
    return prompt, n


def gemini_tools(body: dict) -> dict[str, dict]:
    """name → JSON schema of the parameters, of the functions a Gemini request offers."""
    found = {}
    for tool in body.get("tools") or []:
        for decl in (tool or {}).get("functionDeclarations") or []:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                found[decl["name"]] = decl.get("parametersJsonSchema") or decl.get("parameters") or {}
    return found


def chat_tools(body: dict) -> dict[str, dict]:
    """name → JSON schema of the parameters, of the functions a Chat Completions request offers."""
    found = {}
    for tool in body.get("tools") or []:
        fn = (tool or {}).get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            found[fn["name"]] = fn.get("parameters") or {}
    return found


SHELL_TOOLS = ("run_shell_command", "bash", "shell", "Bash")
EDIT_TOOLS = ("replace", "edit", "Edit", "str_replace")
PLAN_TOOLS = ("write_todos", "todo_write", "todowrite", "TodoWrite")
READ_TOOLS = ("read_file", "read", "Read")


def _props(schema: dict) -> tuple[dict, list]:
    return dict(schema.get("properties") or {}), list(schema.get("required") or [])


def _kind(prop: dict) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return str(kind or "string").lower()


def _filled(schema: dict, wanted: dict[tuple[str, ...], object]) -> dict:
    """Arguments for one tool: each wanted value under the first of its names the schema has, and
    every other required parameter a plain value of its type."""
    props, required = _props(schema)
    args: dict = {}
    for names, value in wanted.items():
        name = next((n for n in names if n in props), None)
        if name is not None:
            args[name] = value
    for name in required:
        if name not in args:
            args[name] = {"boolean": False, "integer": 60000, "number": 60000, "array": [],
                          "object": {}}.get(_kind(props.get(name) or {}), "Stand-in")
    return args


def tool_call(tools: dict[str, dict], step) -> tuple[str, dict]:
    """(tool name, arguments) for a `Shell`, `Edit` or `Plan` step, with the tools offered."""
    def pick(names: tuple[str, ...]) -> str:
        found = next((n for n in names if n in tools), None)
        if found is None:
            raise LookupError(f"none of {names} among the tools offered: {sorted(tools)}")
        return found

    if isinstance(step, Shell):
        name = pick(SHELL_TOOLS)
        return name, _filled(tools[name], {("command", "cmd"): step.command,
                                           ("description",): "Run the test's command"})
    if isinstance(step, Read):
        name = pick(READ_TOOLS)
        return name, _filled(tools[name], {("file_path", "filePath", "path", "absolute_path"): step.path})
    if isinstance(step, Edit):
        name = pick(EDIT_TOOLS)
        return name, _filled(tools[name], {("file_path", "filePath", "path", "absolute_path"): step.path,
                                           ("old_string", "oldString", "old_str"): step.old,
                                           ("new_string", "newString", "new_str"): step.new,
                                           ("instruction",): "Change the line."})
    name = pick(PLAN_TOOLS)
    props, _ = _props(tools[name])
    items = (props.get("todos") or {}).get("items") or {}
    todos = [_filled(items, {("content", "description"): text, ("activeForm",): text,
                             ("status",): "in_progress" if i == 0 else "pending", ("id",): str(i + 1),
                             ("priority",): "high"}) for i, text in enumerate(step.steps)]
    return name, {"todos": todos}


def _patch(step: Edit) -> str:
    """An apply_patch body replacing `old` with `new` in one file (codex's patch format)."""
    old = [f"-{line}" for line in step.old.splitlines()]
    new = [f"+{line}" for line in step.new.splitlines()]
    return "\n".join(["*** Begin Patch", f"*** Update File: {step.path}", "@@", *old, *new, "*** End Patch", ""])


def _shell_call(names: set[str], line: str) -> tuple[str, dict]:
    """The shell tool Codex offered this model and its arguments for one command line."""
    if "exec_command" in names:
        return "exec_command", {"cmd": line}
    if "shell_command" in names:
        return "shell_command", {"command": line}
    return "shell", {"command": ["bash", "-lc", line]}
