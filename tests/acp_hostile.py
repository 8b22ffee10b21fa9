"""A hostile ACP agent speaking raw JSON lines (issue 42 tests): it writes what no honest agent
would, and records the adapter's answers.

    collie acp run --cwd WORK -- python tests/acp_hostile.py     # ACP_HOSTILE=<attack> ACP_HOSTILE_OUT=<file>

It answers `initialize` (protocol 1, no load) and `session/new` (`s1`), then runs the attack named by
$ACP_HOSTILE and writes one JSON object to $ACP_HOSTILE_OUT (the answers it got, keyed by the id it
sent, as `json.dumps(id)`), then keeps running until its stdin closes. Attacks:

surrogate   requests whose id or method holds a lone surrogate, a malformed message with such an id,
            an update and a write with one, then an honest read: every answer recorded
fifo        a FIFO planted at the adapter's old temporary name `.innocent.txt.collie-tmp`, then a write of
            `innocent.txt` and, without waiting, a read of `hello.txt`: both answers (or `null` after 60 s)
terminals   the terminals of $ACP_HOSTILE_COMMANDS (a JSON list of shell lines) created: their ids
stop        a prompt creates the first of $ACP_HOSTILE_COMMANDS in a terminal and runs until cancelled
            (then answers `cancelled`); the terminal is never released
exit        as `terminals`, then the agent exits with status 7 (a crash) once $ACP_HOSTILE_GO exists
"""

from __future__ import annotations

import json
import os
import sys
import threading

OUT = os.environ.get("ACP_HOSTILE_OUT", "")
ATTACK = os.environ.get("ACP_HOSTILE", "")
WAIT = 60.0

lock = threading.Lock()
answers: dict[str, dict] = {}
arrived = threading.Condition(lock)
session_ready = threading.Event()
prompts: list = []


def send_raw(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def send(body: dict) -> None:
    send_raw(json.dumps(body))


def wait_for(key: str, timeout: float = WAIT) -> dict | None:
    with arrived:
        arrived.wait_for(lambda: key in answers, timeout)
        return answers.get(key)


def reader() -> None:
    for raw in sys.stdin.buffer:
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        method = msg.get("method")
        if method is None:
            with arrived:
                answers[json.dumps(msg.get("id"))] = msg
                arrived.notify_all()
            continue
        if "id" not in msg:
            if method == "session/cancel":
                for pid in prompts:
                    send({"jsonrpc": "2.0", "id": pid, "result": {"stopReason": "cancelled"}})
            continue
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": 1, "agentCapabilities": {},
                                                                 "authMethods": []}})
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {"sessionId": "s1"}})
            session_ready.set()
        elif method == "session/prompt" and ATTACK == "stop":  # a terminal, never released; the turn runs on
            prompts.append(msg["id"])
            send({"jsonrpc": "2.0", "id": "tp", "method": "terminal/create",
                  "params": {"sessionId": "s1", "command": json.loads(os.environ["ACP_HOSTILE_COMMANDS"])[0]}})
        elif method == "session/prompt":
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {"stopReason": "end_turn"}})
        else:
            send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}})
    os._exit(0)  # stdin closed: the adapter went away


def surrogate(cwd: str) -> dict:
    lines = [
        '{"jsonrpc":"2.0","id":"\\ud800","method":"fs/read_text_file","params":{"sessionId":"s1","path":"/nope"}}',
        '{"jsonrpc":"2.0","id":"m1","method":"x\\ud800","params":{}}',
        '{"jsonrpc":"2.0","id":"\\udfff","method":"x\\ud800y"}',
        '{"jsonrpc":"1.0","id":"\\udbff","method":"m"}',
        '{"jsonrpc":"2.0","id":"\\ud800","result":{}}',
        '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":'
        '"agent_message_chunk","content":{"type":"text","text":"a\\ud800b"}}}}',
        '{"jsonrpc":"2.0","method":"x\\udc00","params":{}}',
        json.dumps({"jsonrpc": "2.0", "id": "w1", "method": "fs/write_text_file",
                    "params": {"sessionId": "s1", "path": f"{cwd}/s.txt", "content": "x\ud800"}}),
    ]
    for line in lines:
        send_raw(line)
    send({"jsonrpc": "2.0", "id": "last", "method": "fs/read_text_file",
          "params": {"sessionId": "s1", "path": f"{cwd}/hello.txt"}})
    return {k: wait_for(k) for k in (json.dumps("\ud800"), '"m1"', json.dumps("\udfff"), json.dumps("\udbff"),
                                     '"w1"', '"last"')}


def fifo(cwd: str) -> dict:
    os.mkfifo(os.path.join(cwd, ".innocent.txt.collie-tmp"))
    send({"jsonrpc": "2.0", "id": "write", "method": "fs/write_text_file",
          "params": {"sessionId": "s1", "path": f"{cwd}/innocent.txt", "content": "written"}})
    send({"jsonrpc": "2.0", "id": "read", "method": "fs/read_text_file",
          "params": {"sessionId": "s1", "path": f"{cwd}/hello.txt"}})
    return {k: wait_for(k) for k in ('"read"', '"write"')}


def terminals(cwd: str) -> dict:
    got = {}
    for i, command in enumerate(json.loads(os.environ["ACP_HOSTILE_COMMANDS"])):
        send({"jsonrpc": "2.0", "id": f"t{i}", "method": "terminal/create",
              "params": {"sessionId": "s1", "command": command}})
        got[f"t{i}"] = wait_for(f'"t{i}"')
    return got


def session_known() -> None:
    """The adapter records the session just after our answer to `session/new`: ask until it knows it
    (an honest read), so that the attack's first request is not refused for that."""
    for n in range(200):
        send({"jsonrpc": "2.0", "id": f"known{n}", "method": "fs/read_text_file",
              "params": {"sessionId": "s1", "path": os.path.join(os.getcwd(), "hello.txt")}})
        answer = wait_for(f'"known{n}"')
        if answer is None or "unknown session" not in json.dumps(answer):
            return
        threading.Event().wait(0.05)


def main() -> None:
    threading.Thread(target=reader, daemon=True).start()
    if os.path.exists(OUT):  # restarted after the attack: only answer
        threading.Event().wait()
    if not session_ready.wait(60):
        os._exit(2)
    session_known()
    cwd = os.getcwd()
    attack = {"surrogate": surrogate, "fifo": fifo, "terminals": terminals, "exit": terminals,
              "stop": lambda cwd: {}}[ATTACK]
    result = attack(cwd)
    tmp = OUT + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh)
    os.replace(tmp, OUT)
    if ATTACK == "exit":  # once the test saw the terminals' processes (it makes $ACP_HOSTILE_GO), crash
        go = os.environ["ACP_HOSTILE_GO"]
        for _ in range(6000):
            if os.path.exists(go):
                os._exit(7)
            threading.Event().wait(0.01)
        os._exit(8)
    threading.Event().wait()


if __name__ == "__main__":
    main()
