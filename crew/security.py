"""The transport rules of features T1–T5 and T9, as pure checks.

A socket carries no token, so Collie connects only when every component of its path is private
(T2). A URL carries the token, so it must be `https://`, or plain `http://` to this very machine
with an explicit port (T4). A token must be at least 32 bytes (T5) and is compared in constant time.

**Loopback TCP is checked like a socket's listener** (issue 25.2). Any local user may bind a free
loopback port — while the agent or the lead is down (a restart, a crash, boot order), another user's
process can take its port and receive the token. So before a byte goes to a loopback address, the
connection's other end is looked up in `/proc/net/tcp` and `/proc/net/tcp6` (Linux): the server's
side of this very connection (whose owner is the listener's), else the port's listener. A uid other
than this process's is refused (`peer-not-you`, naming the address and the uid); an other end that
cannot be found is refused too. Where there is no `/proc/net/tcp` (macOS) the check is not made.

Each check returns ``None`` when the rule holds, else a `Problem` whose text names the component
and says why, so the CLI, the log and the doctor can all show the same words.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import os
import stat
from pathlib import PurePosixPath
from urllib.parse import urlsplit

import attrs

SOCKET_PATH_MAX = 103  # bytes: sun_path is 104 on macOS, including the NUL
TOKEN_MIN_BYTES = 32
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


@attrs.frozen
class Problem:
    code: str  # a reason code the phone and the doctor understand, e.g. "socket-not-private"
    text: str  # what is wrong and what to do

    def __str__(self) -> str:
        return f"{self.code}: {self.text}"


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


@functools.lru_cache(maxsize=512)
def _components(path: str) -> tuple[tuple[str, ...], str]:
    """The folders a socket path goes through, outermost first, and the socket itself, as text.
    Cached: the bridge checks the same few paths before every request (issue 15.1)."""
    parts = PurePosixPath(path).parts  # no normpath: `..` is refused by the shape check, `.` and `//` are harmless
    return (tuple(str(PurePosixPath(*parts[: i + 1])) for i in range(len(parts) - 1)),
            str(PurePosixPath(*parts)))


@functools.lru_cache(maxsize=512)
def check_socket_shape(path: str) -> Problem | None:
    """T1: absolute and at most 103 bytes (the answer depends on the text only, so it is cached)."""
    if not path:
        return Problem("bad-socket-path", "the socket path is empty")
    if not os.path.isabs(path):
        return Problem("bad-socket-path", f"{path} is not absolute; give the full path")
    if ".." in PurePosixPath(path).parts:
        # the kernel resolves `..` after following the link before it; judging the text would not
        return Problem("bad-socket-path", f"{path} has a '..' component; give the path without it")
    if len(os.fsencode(path)) > SOCKET_PATH_MAX:
        return Problem(
            "bad-socket-path",
            f"{path} is {len(os.fsencode(path))} bytes, the limit is {SOCKET_PATH_MAX}; "
            "use a shorter path under $XDG_RUNTIME_DIR",
        )
    return None


def check_socket_private(path: str, uid: int | None = None, *, must_exist: bool = True) -> Problem | None:
    """T2: the whole path is private to `uid` (default: this process's user).

    With ``must_exist=False`` a missing socket (or a missing folder) is not a problem: the agent
    has not started yet, and the SDK creates its folder 0700. What exists is still checked.
    """
    shape = check_socket_shape(path)
    if shape:
        return shape
    uid = os.getuid() if uid is None else uid
    ancestors, sock = _components(path)
    name = sock.rsplit("/", 1)[-1]

    def private(component: str, why: str) -> Problem:
        return Problem("socket-not-private", f"{component} {why}")

    for depth, current in enumerate(ancestors):
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            if must_exist:
                return Problem("no-socket", f"{current} does not exist: start the agent (it creates the folder)")
            return None
        if stat.S_ISLNK(st.st_mode):
            return private(current, "is a symlink; give the real path")
        if not stat.S_ISDIR(st.st_mode):
            return private(current, "is not a folder")
        is_parent = depth == len(ancestors) - 1
        if is_parent:
            if _shared(st):  # /tmp and the like: changing it would break the system (issue 10.3)
                return private(current, f"is a shared folder (mode {_mode(st)}); the socket needs a folder of its own: "
                                        f"{_private_home(name)}")
            if st.st_uid != uid:
                return private(current, f"is owned by uid {st.st_uid}, not by you (uid {uid}); "
                                        f"{_private_home(name)}")
            if stat.S_IMODE(st.st_mode) & 0o077:
                return private(current, f"has mode {_mode(st)}; the socket's folder must be 0700 (chmod 700 {current})")
        else:
            if st.st_uid not in (0, uid):
                return private(current, f"is owned by uid {st.st_uid}, neither you nor root")
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
                return private(current, f"has mode {_mode(st)}: writable by group or others and not sticky; "
                                        f"{_private_home(name)}")
    try:
        st = os.lstat(sock)
    except FileNotFoundError:
        if must_exist:
            return Problem("no-socket", f"{sock} does not exist: start the agent")
        return None
    if stat.S_ISLNK(st.st_mode):
        return private(sock, "is a symlink; give the real path")
    if not stat.S_ISSOCK(st.st_mode):
        return private(sock, "is not a socket")
    if st.st_uid != uid:
        return private(sock, f"is owned by uid {st.st_uid}, not by you (uid {uid})")
    if stat.S_IMODE(st.st_mode) & 0o077:
        return private(sock, f"has mode {_mode(st)}; it must give group and others nothing (0600)")
    return None


def _shared(st: os.stat_result) -> bool:
    """A sticky folder writable by others (/tmp, /var/tmp, /dev/shm): many users' files, not one's."""
    return bool(st.st_mode & stat.S_ISVTX and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _private_home(sock_name: str) -> str:
    stem = PurePosixPath(sock_name).stem or "agent"
    return f"use a private folder such as $XDG_RUNTIME_DIR/{stem}/{sock_name} (the SDK creates it 0700)"


def mask_url(url: str) -> str:
    """`url` with any password in it shown as ``***`` (for listings and errors; the URL is refused anyway)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        password = None
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def check_url(url: str) -> Problem | None:
    """T4: `https://host…`, or `http://127.0.0.1:<port>` / `http://localhost:<port>` only."""
    if not url or any(ch.isspace() or ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):
        return Problem("bad-url", "the URL is empty or contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return Problem("bad-url", f"{mask_url(url)!r} is not a valid URL ({exc})")
    scheme = parts.scheme.lower()
    if "@" in parts.netloc:
        return Problem("bad-url", "the URL must not carry a user name or password (text before '@')")
    host = parts.hostname or ""
    if scheme == "https":
        if not host:
            return Problem("bad-url", "the https URL names no host")
        return None
    if scheme == "http":
        if host not in LOOPBACK_HOSTS:
            return Problem(
                "insecure-url",
                "plain http:// is allowed only to http://127.0.0.1:<port> or http://localhost:<port>; "
                "use https:// so the token does not cross the network in clear",
            )
        if port is None or not 0 < port < 65536:
            return Problem("insecure-url", "a local http:// URL needs an explicit port, e.g. http://127.0.0.1:8765")
        return None
    return Problem("bad-url", f"the URL must start with https:// (got {parts.scheme or 'no scheme'}://)")


def is_local_url(url: str) -> bool:
    """T9: loopback http is local; anything else reached by URL is remote."""
    parts = urlsplit(url)
    return parts.scheme.lower() == "http" and (parts.hostname or "") in LOOPBACK_HOSTS


def check_token(token: str | None, var: str, whose: str = "the agent's token") -> Problem | None:
    """T5: present, at least 32 bytes, printable (it travels in an HTTP header). Never quoted back."""
    if token is None:
        return Problem("no-token", f"the variable {var} is not set; export {whose} in it first")
    problem = check_token_text(token, var)
    if problem:
        return problem
    if len(token.encode()) < TOKEN_MIN_BYTES:
        return Problem(
            "weak-token",
            f"the token in {var} is shorter than {TOKEN_MIN_BYTES} bytes; make one with `openssl rand -hex 32`",
        )
    return None


def check_token_text(token: str, var: str) -> Problem | None:
    """A token read from a file: no spaces, CR/LF or control characters (it goes into a header line)."""
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        return Problem("bad-token", f"the token in {var} contains spaces or control characters")
    return None


def bearer_token(header: str) -> str:
    """The token of an `Authorization: Bearer …` header, or "" for any other. The scheme's name is
    case-insensitive (RFC 9110 §11.1): `bearer x` is the token x too."""
    scheme, _, token = header.partition(" ")
    return token.strip(" ") if scheme.lower() == "bearer" else ""


def same_secret(a: str | bytes, b: str | bytes) -> bool:
    """Constant-time comparison for tokens."""
    a_b = a.encode() if isinstance(a, str) else a
    b_b = b.encode() if isinstance(b, str) else b
    return hmac.compare_digest(a_b, b_b)


PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")
_LISTEN = "0A"


def _proc_address(text: str) -> tuple[str, int]:
    """`0100007F:1F90` (each 32-bit word in the kernel's byte order) → ("127.0.0.1", 8080)."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def _plain(address: tuple) -> tuple[str, int]:
    ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(address[1])


def tcp_sockets(files: tuple[str, ...] = PROC_NET_TCP) -> list[tuple[tuple[str, int], tuple[str, int], str, int]] | None:
    """(local, remote, state, uid) of every TCP socket of this network namespace, or None without /proc."""
    out, found = [], False
    for name in files:
        try:
            with open(name, encoding="ascii") as fh:
                lines = fh.read().splitlines()[1:]
        except (FileNotFoundError, PermissionError):
            continue
        found = True
        for line in lines:
            f = line.split()
            if len(f) < 8:
                continue
            try:
                out.append((_proc_address(f[1]), _proc_address(f[2]), f[3], int(f[7])))
            except ValueError:
                continue
    return out if found else None


def is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(str(address).split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def loopback_owner(peer: tuple, me: tuple | None, sockets=None) -> int | None:
    """The uid that holds the other end of the loopback connection `me` → `peer`: its server-side socket's
    owner (the listener's), else the owner of a listener on the peer's port. -1 when nothing is found;
    None when the platform cannot tell (no /proc/net/tcp)."""
    sockets = tcp_sockets() if sockets is None else sockets
    if sockets is None:
        return None
    peer = _plain(peer)
    if me is not None:
        me = _plain(me)
        for local, remote, state, uid in sockets:
            if local == peer and remote == me and state != _LISTEN:
                return uid
    for local, _remote, state, uid in sockets:
        if state == _LISTEN and local[1] == peer[1] and local[0] in (peer[0], "0.0.0.0", "::"):
            return uid
    return -1


def check_loopback_peer(peer: tuple, me: tuple | None, what: str, uid: int | None = None,
                        sockets=None) -> Problem | None:
    """T3 for loopback TCP (issue 25.2): None when `peer` is not loopback or is held by this user, else why not."""
    if not is_loopback(peer[0]):
        return None
    uid = os.getuid() if uid is None else uid
    owner = loopback_owner(peer, me, sockets)
    if owner is None or owner == uid:
        return None
    if owner == -1:
        return Problem("peer-not-you", f"cannot tell which user listens on {what} (it is not in /proc/net/tcp); "
                                       "nothing was sent")
    return Problem("peer-not-you", f"the process listening on {what} runs as uid {owner}, not as you (uid {uid}); "
                                   "nothing was sent: another user may have taken the port while yours was down")


def public_parts(url: str) -> tuple[str, str, int]:
    """`--public-url` → (the URL as printed, its lowercase host name, its port). Raises ValueError saying why."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ValueError(f"{url[:80]!r} is not a URL: give https://NAME or https://NAME:PORT") from None
    if parts.scheme != "https":
        raise ValueError(f"{url[:80]!r} must start with https:// (the proxy or tunnel in front of the lead "
                         "speaks TLS to the phone)")
    if not parts.hostname or parts.username or parts.password or parts.query or parts.fragment \
            or parts.path.strip("/"):
        raise ValueError(f"{url[:80]!r} must be https://NAME or https://NAME:PORT, with no path, user or query")
    name = parts.hostname.lower().rstrip(".")
    if name in ("0.0.0.0", "::"):
        raise ValueError(f"{url[:80]!r} names no address a phone can open")
    port = port or 443
    shown = f"https://{(f'[{name}]' if ':' in name else name)}" + ("" if port == 443 else f":{port}")
    return shown, name, port


def fingerprint_der(der: bytes) -> str:
    """SHA-256 of a certificate (DER) as browsers show it: `AB:CD:…`."""
    import hashlib

    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def fingerprint_file(path) -> str | None:
    """SHA-256 fingerprint of the first certificate of a PEM file, or None when there is none."""
    import ssl

    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
        end = text.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")
        return fingerprint_der(ssl.PEM_cert_to_DER_cert(text[:end]))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
