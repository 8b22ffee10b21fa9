"""The bridge: one task tree per attached agent, and a status board the CLI and the lead read.

At start each agent's address is checked against the transport rules (features A9, T1–T5): a
hand-written entry that breaks one shows Unreachable with the reason instead of stopping the bridge.
"""

from __future__ import annotations

import trio

from crew import logs
from crew.config import AgentConfig, BridgeConfig
from crew.paths import Paths
from crew.security import Problem, check_socket_shape, check_token, check_url, is_local_url
from crew.views import STARTING, UNREACHABLE, AgentStatus

log = logs.get("bridge")


def static_problem(agent: AgentConfig) -> Problem | None:
    """The rules that can be judged without touching the agent."""
    if agent.problem:
        return agent.problem
    if agent.socket:
        return check_socket_shape(agent.socket)
    if agent.url:
        return check_url(agent.url) or check_token(agent.token, f'the "token" of {agent.name}')
    return Problem("config", "no socket or url is configured")


def initial_status(agent: AgentConfig) -> AgentStatus:
    problem = static_problem(agent)
    return AgentStatus(
        name=agent.name,
        transport=agent.transport,
        address=agent.address,
        local=bool(agent.socket) or (bool(agent.url) and is_local_url(agent.url)),
        status=UNREACHABLE if problem else STARTING,
        reason=problem.code if problem else None,
        detail=problem.text if problem else None,
        token_set=bool(agent.token),
        origin=agent.origin,
    )


class Bridge:
    def __init__(self, config: BridgeConfig, paths: Paths) -> None:
        self.config = config
        self.paths = paths
        self.statuses: dict[str, AgentStatus] = {a.name: initial_status(a) for a in config.agents}
        self.changed = trio.Event()
        for st in self.statuses.values():
            if st.status == UNREACHABLE:
                log.info("[durable] %s: unreachable: %s: %s", st.name, st.reason, st.detail)

    def set_status(self, status: AgentStatus) -> None:
        self.statuses[status.name] = status
        self.changed.set()
        self.changed = trio.Event()

    def snapshot(self) -> list[AgentStatus]:
        return list(self.statuses.values())

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run every agent's task tree until cancelled."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            await trio.sleep_forever()
            nursery.cancel_scope.cancel()
