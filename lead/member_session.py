"""A member's session on the lead, with no I/O (crew.md §2): what its frames change and what the lead answers.

`Member` is one member as the lead knows it: its agents' readers, its link, its version and last contact.
The functions below decide, from that state and the time passed in; `lead.hub.Hub` reads the socket,
feeds them, and carries out what they return (closes, frames to send, lines to log, files to write).

- Who may hold a link (`admit_hello`, `claim`): the first frame must be a `hello` (else `protocol`), on
  a crew wire the lead speaks (else `version`; older but not below the floor: read-only), naming the
  label its member token was issued for (else `unauthorized`). One link per label: a newcomer with the
  open link's `boot` is the same member reconnecting and replaces it; any other makes the lead probe the
  open link, and only a dead one is replaced (else `label_in_use`).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import attrs

from bridge.reader import AgentReader
from crew import crewwire
from crew.crewwire import Admission, Hello

if TYPE_CHECKING:
    from lead.crew_link import Conn


def hhmm(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall).strftime("%H:%M")


@attrs.define
class Member:
    label: str
    readers: dict[str, AgentReader] = attrs.Factory(dict)
    conn: Conn | None = None
    version: str | None = None
    read_only: bool = False
    offline_since: float | None = None  # wall clock of the last frame, once offline
    last_seen: float | None = None  # wall clock
    rows: dict = attrs.Factory(dict)  # the dashboard's row of each agent, kept by lead.events

    @property
    def online(self) -> bool:
        return self.conn is not None


def admit_hello(hello: Hello | None, label: str) -> Admission:
    """The lead's answer to a link's first frame, `label` being the one its member token opens: accepted
    (read-only for an older member), or closed with `protocol`, `version` or `unauthorized`."""
    if hello is None:
        return Admission(False, reason=crewwire.PROTOCOL)
    admission = crewwire.admit(hello.crew_wire)
    if admission.accepted and hello.label != label:
        return Admission(False, reason=crewwire.UNAUTHORIZED)
    return admission


def claim(boot: str | None, open_boot: str | None) -> str:
    """A new link for a label whose link is open: "replace" when it carries the open link's `boot` (the
    same member process, back before the lead saw its old link die), else "probe" (another machine, or
    the member restarted): the open link keeps the label if it answers."""
    return "replace" if boot is not None and boot == open_boot else "probe"


def keeps_label(alive: bool, open_conn, conn_now) -> bool:
    """After the probe: the open link keeps its label when it answered, or another link took it meanwhile."""
    return alive or conn_now not in (open_conn, None)
