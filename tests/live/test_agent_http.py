"""The agent client speaks plain HTTP/1.1 to agents written by others (wire §1): every framing an
HTTP/1.1 server may choose reads the same, a kept-alive connection the agent closed is never used for
the next request, and where a failure happens decides whether the request can have reached the agent
(the writer's receipt relies on that: `refused` only when not a byte was written).

Each agent here is a scripted server on a real Unix socket in this process: it reads one request
head (and the body its content-length declares) and answers with exactly the bytes the test gives.
"""

from __future__ import annotations

import os

import pytest
import trio

from collie.bridge.client import KEEP_IDLE, MAX_CONNECTIONS, AgentClient, AgentUnreachable
from collie.crew.config import AgentConfig

STATE = b'{"rev":1,"instance":"e1","conversations":[]}'


def ok(body: bytes = STATE, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"content-type: application/json", b"content-length: %d" % len(body), *extra]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class Scripted:
    """A listener whose `answer(request_no, head)` returns the bytes to send and whether to close."""

    def __init__(self, path: str, answer) -> None:
        self.path, self.answer = path, answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.open = 0
        self.most_open = 0
        self.closed_one = trio.Event()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listener = trio.socket.socket(trio.socket.AF_UNIX)
        await listener.bind(self.path)
        os.chmod(self.path, 0o600)
        with listener:
            listener.listen(64)
            task_status.started()
            async with trio.open_nursery() as nursery:
                while True:
                    sock, _ = await listener.accept()
                    self.connections += 1
                    nursery.start_soon(self._serve, sock)

    async def _serve(self, sock) -> None:
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = await sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += await sock.recv(65536)
                buf = buf[length:]
                self.requests.append(head)
                data, close = await self.answer(len(self.requests), head)
                if data:
                    await sock.send(data)
                if close:
                    return
        finally:
            self.open -= 1
            sock.close()
            self.closed_one.set()


async def client_for(nursery, tmp, answer) -> tuple[AgentClient, Scripted]:
    path = str(tmp / "a.sock")
    server = Scripted(path, answer)
    await nursery.start(server.run)
    return AgentClient(AgentConfig("a", socket=path)), server


def fixed(data: bytes, close: bool = False):
    async def answer(_n, _head):
        return data, close
    return answer


@pytest.mark.parametrize("answer", [
    ok(),                                                                  # content-length
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"7\r\n{\"rev\":\r\n" + b"%x\r\n" % (len(STATE) - 7) + STATE[7:] + b"\r\n0\r\n\r\n",  # chunked, two chunks
    b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: %d\r\nConnection: close\r\n\r\n" % len(STATE) + STATE,  # upper case, close
    b"HTTP/1.1 100 Continue\r\n\r\n" + ok(),                               # an interim answer first
])
async def test_every_http11_framing_of_an_answer_reads_the_same(tmp, nursery, answer):
    """Wire §1: an agent written by others may frame its JSON with a length, in chunks, ask to close
    after it, or send an interim 1xx first; the bridge reads the same state from each."""
    client, server = await client_for(nursery, tmp, fixed(answer, close=b"Connection: close" in answer))
    for _ in range(3):
        got = await client.request("GET", "/v1/state")
        assert got.status == 200 and got.body == {"rev": 1, "instance": "e1", "conversations": []}
    assert len(server.requests) == 3
    await client.aclose()


async def test_an_answer_that_ends_with_the_connection_is_read_whole(tmp, nursery):
    """An HTTP/1.1 server may send a body with no length and end it by closing the connection."""
    client, _ = await client_for(nursery, tmp, fixed(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n"
                                                     + STATE, close=True))
    assert (await client.request("GET", "/v1/state")).body["instance"] == "e1"
    assert (await client.request("GET", "/v1/state")).body["instance"] == "e1"
    assert not client.idle  # nothing to keep: the connection ended with the answer


async def test_a_kept_alive_connection_the_agent_closed_is_not_used_again(tmp, nursery):
    """An agent closes idle connections whenever it likes (its keep-alive timeout, a restart of its
    HTTP layer). The next request goes on a new connection and succeeds; it does not fail `closed`,
    which would make a write's receipt `unknown` though the agent never saw it."""
    async def answer(n, _head):
        return ok(), n == 1  # answers the first request on a kept-alive connection, then closes it
    client, server = await client_for(nursery, tmp, answer)
    assert (await client.request("GET", "/v1/state")).status == 200
    await server.closed_one.wait()
    got = await client.request("POST", "/v1/conversations/c/send", json_body={"request_id": "r1", "text": "hi"})
    assert got.status == 200
    assert server.connections == 2 and len(server.requests) == 2
    assert server.requests[1].startswith(b"POST /v1/conversations/c/send HTTP/1.1")
    await client.aclose()


async def test_where_a_failure_happens_names_its_reason(tmp, nursery):
    """Before a byte is written: `no-socket`, `connection-refused` (the writer may answer `refused`).
    After: `closed` whether the agent hung up before, inside or after the head of its answer, and
    `protocol` for bytes that are not HTTP — none of them claims the request did not arrive."""
    path = tmp / "a.sock"
    client = AgentClient(AgentConfig("a", socket=str(path)))
    # a socket file nobody listens on (a killed agent's) is refused
    stale = trio.socket.socket(trio.socket.AF_UNIX)
    await stale.bind(str(path))
    os.chmod(path, 0o600)
    stale.close()
    with pytest.raises(AgentUnreachable) as got:
        await client.request("GET", "/v1/state")
    assert got.value.reason == "connection-refused"
    os.unlink(path)
    with pytest.raises(AgentUnreachable) as got:
        await client.request("GET", "/v1/state")
    assert got.value.reason == "no-socket"

    cases = iter([(b"", "closed"), (b"HTTP/1.1 200 OK\r\ncontent-le", "closed"),
                  (b"HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\n{\"rev\"", "closed"),
                  (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "protocol")])
    expected: list[str] = []

    async def answer(_n, _head):
        data, reason = next(cases)
        expected.append(reason)
        return data, True
    server = Scripted(str(path), answer)
    await nursery.start(server.run)
    for _ in range(4):
        with pytest.raises(AgentUnreachable) as got:
            await client.request("POST", "/v1/conversations/c/send", json_body={"request_id": "r", "text": "x"})
        assert got.value.reason == expected[-1], got.value.detail
    assert len(server.requests) == 4  # each reached the agent: none may be called refused


async def test_connections_are_bounded_and_few_are_kept(tmp, nursery):
    """However many reads start at once, at most MAX_CONNECTIONS are open to one agent; when they
    end, KEEP_IDLE stay for the next requests and the rest are closed."""
    gate = trio.Event()

    async def answer(_n, _head):
        await gate.wait()
        return ok(), False
    client, server = await client_for(nursery, tmp, answer)
    async with trio.open_nursery() as inner:
        for _ in range(3 * MAX_CONNECTIONS):
            inner.start_soon(client.request, "GET", "/v1/state")
        await trio.testing.wait_all_tasks_blocked()
        assert server.open == MAX_CONNECTIONS
        gate.set()
    assert len(server.requests) == 3 * MAX_CONNECTIONS and server.most_open == MAX_CONNECTIONS
    await trio.testing.wait_all_tasks_blocked()
    assert server.open == KEEP_IDLE
    await client.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert server.open == 0
