"""`collie tokens create|list|revoke`: API tokens for inbox senders (features I3, I10).

A `standing` sender's requests are approved on arrival; an `required` sender's wait `pending` until
the owner approves them. The token is written to a 0600 file whose path is printed, never the token.
"""

from __future__ import annotations

import secrets
import sqlite3

from collie.crew import control
from collie.crew.cli.crew_cmd import _label, _store
from collie.crew.errors import CollieError
from collie.crew.fsutil import atomic_write, ensure_private_dir


def register(sub) -> None:
    p = sub.add_parser("tokens", help="API tokens for senders that queue work in the inbox")
    verbs = p.add_subparsers(dest="tokens_verb", metavar="VERB")
    verbs.required = True
    c = verbs.add_parser("create", help="make a sender token")
    c.add_argument("name")
    c.add_argument("--approval", choices=["required", "standing"], required=True,
                   help="required: the owner approves each request; standing: approved on arrival")
    c.set_defaults(run=create)
    ls = verbs.add_parser("list", help="sender tokens (names and approval only)")
    ls.set_defaults(run=list_tokens)
    r = verbs.add_parser("revoke", help="revoke a sender token")
    r.add_argument("name")
    r.set_defaults(run=revoke)


def create(args, paths) -> int:
    name = _label(args.name)
    token = secrets.token_hex(32)
    store = _store(paths)
    try:
        store.add_token(name, token, args.approval)
    except sqlite3.IntegrityError:
        raise CollieError(f"a token named {name!r} exists: revoke it first") from None
    finally:
        store.close()
    folder = paths.state_dir / "tokens"
    ensure_private_dir(folder)
    path = folder / f"{name}.token"
    atomic_write(path, (token + "\n").encode(), mode=0o600)
    tell_lead(paths)
    print(f"created {name} ({args.approval} approval); the token is in {path} (0600), not printed")
    print("send it as Authorization: Bearer <token> to POST /api/agents/<machine>/<agent>/inbox")
    return 0


def tell_lead(paths) -> None:
    """The running lead keeps the tokens in memory: have it load them again now (it also does so by
    itself every few seconds)."""
    try:
        control.call(paths.control_socket, "tokens_changed")
    except CollieError:  # not running, or not a lead: it loads them when it starts
        pass


def list_tokens(_args, paths) -> int:
    store = _store(paths)
    rows = store.tokens()
    store.close()
    for row in rows:
        print(f"{row['name']:<24} {row['approval']}")
    if not rows:
        print("no sender tokens (make one with `collie tokens create NAME --approval required|standing`)")
    return 0


def revoke(args, paths) -> int:
    store = _store(paths)
    gone = store.revoke_token(args.name)
    store.close()
    if not gone:
        raise CollieError(f"no token named {args.name!r}")
    tell_lead(paths)
    (paths.state_dir / "tokens" / f"{args.name}.token").unlink(missing_ok=True)
    print(f"revoked {args.name}")
    return 0
