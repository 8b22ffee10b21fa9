"""`collie pair` and `collie devices`: pair a phone with the running lead, list and revoke phones.

`pair` asks the running lead for a one-time link (valid 10 minutes, single use) and prints it with a
QR code drawn in the terminal (segno). The link is shown once: it is not logged and not stored (the
lead keeps only its hash). Over the lead's own certificate authority it also prints the trust link
(`/trust`, collie.lead.door.trust) and the authority's SHA-256 fingerprint, to compare with what the phone shows; over
the user's own certificate, that certificate's fingerprint. `devices` lists paired phones; `devices revoke NAME` forgets one
(its next request gets 401 and its open live channel closes).
"""

from __future__ import annotations

import datetime
import io

from collie.crew import control
from collie.crew.errors import CollieError
from collie.crew.logs import printable


def register(sub) -> None:
    p = sub.add_parser("pair", help="print a one-time link and QR code that pairs a phone with this lead")
    p.add_argument("--no-qr", action="store_true", help="print the link only")
    p.set_defaults(run=pair)
    d = sub.add_parser("devices", help="list paired phones, or revoke one")
    verbs = d.add_subparsers(dest="devices_verb", metavar="VERB")
    ls = verbs.add_parser("list", help="paired phones: name, paired at, last seen (the default)")
    ls.set_defaults(run=list_devices)
    r = verbs.add_parser("revoke", help="forget a paired phone: it must pair again")
    r.add_argument("name", help="the phone's name (or id) as `collie devices` shows it")
    r.set_defaults(run=revoke)
    d.set_defaults(run=list_devices)


def _when(t: float | None) -> str:
    if not t:
        return "never"
    return datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def qr_text(link: str) -> str:
    """The link as a QR code drawn with text (half blocks), for a terminal."""
    import segno

    out = io.StringIO()
    segno.make(link, error="m").terminal(out=out, compact=True, border=2)
    return out.getvalue()


def pair(args, paths) -> int:
    ping = control.call(paths.control_socket, "ping")
    if ping.get("role") != "lead":
        raise CollieError("this machine is a crew member: pair the phone with the lead (run `collie pair` there)")
    got = control.call(paths.control_socket, "pair")
    link = got["link"]
    if not args.no_qr:
        print(qr_text(link))
    print(f"Open this link on the phone (valid 10 minutes, works once):\n  {link}")
    if got.get("trust"):
        print(f"First time on this phone? Trust the lead once (notifications, the lock-screen answer and install "
              f"need it):\n  {got['trust']}")
        print(f"The lead's certificate authority (SHA-256): {got['fingerprint']}")
        print("Check that the phone shows this fingerprint before you trust it.")
    elif got.get("fingerprint"):
        print(f"The lead's certificate (SHA-256): {got['fingerprint']}")
        print("If the phone warns about the certificate, check that it shows this fingerprint before you go on.")
    if got.get("loopback"):
        print("Note: the lead listens on loopback only; a phone on your network needs `collie serve --host 0.0.0.0` "
              "(served over TLS).")
    return 0


def list_devices(args, paths) -> int:
    got = control.call(paths.control_socket, "devices")
    devices = got.get("devices") or []
    if not devices:
        print("no paired phones (pair one with `collie pair`)")
        return 0
    print(f"{'NAME':<24} {'PAIRED':<17} LAST SEEN")
    for d in devices:
        print(f"{printable(str(d.get('name')))[:24]:<24} {_when(d.get('paired_at')):<17} {_when(d.get('last_seen'))}")
    return 0


def revoke(args, paths) -> int:
    got = control.call(paths.control_socket, "devices_revoke", name=args.name)
    print(f"revoked {printable(str(got['revoked']['name']))}: it must pair again")
    return 0
