"""TLS for the phone's door: the user's certificate, or one issued by the lead's own authority (phone-api.md,
"A real phone: trust and reach").

A browser gives a page its service worker (push, the lock-screen answer, install) only over a certificate it
trusts, so without `--tls-cert`/`--tls-key` the lead keeps a small certificate authority of its own:

- **The authority** is made once: an ECDSA P-256 key (`<state>/tls/ca-key.pem`, 0600, never served) and its
  certificate (`<state>/tls/ca.pem`, 10 years), which carries critical Name Constraints: it can vouch only for
  the lead's own names and non-local addresses (those it had when made), private, link-local, shared
  (100.64.0.0/10) and loopback addresses, and local-only names (`.local`, `.lan`, `.home.arpa`, `.internal`,
  `localhost`). A phone that trusts it can never be misled about a public site. Its SHA-256 fingerprint is the
  one `collie serve`, `collie pair`, `collie doctor`, `/trust` and the crew's join command show.
- **The served certificate** (`cert.pem`: it and the authority's, `key.pem` 0600) is issued from it for every
  address and name the lead is reached at — IP addresses included; on `0.0.0.0`/`::` this machine's
  addresses — valid 397 days, and issued anew when those change or it nears its end. The authority stays,
  so a phone trusts once.
- **A name the authority cannot vouch for** (a new `--name` outside its constraints) makes a new authority,
  with one log line: phones must trust it again.
- **An install from before** (a self-signed `cert.pem`, no `ca.pem`) moves to an authority at start, with one
  log line.

Pure functions over PEM bytes; `ensure_certificate` does the file I/O. No trio.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
from pathlib import Path

import attrs

from collie.crew.fsutil import atomic_write, ensure_private_dir

CA_DAYS = 3650
LEAF_DAYS = 397  # Apple's ceiling for a server certificate is 398 days
RENEW_BEFORE = datetime.timedelta(days=30)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
LOCAL_SUFFIXES = ("local", "lan", "home.arpa", "internal", "localhost")
LOCAL_NETS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8",
    "::1/128", "fc00::/7", "fe80::/10"))
ALL_ADDRESSES = ("0.0.0.0", "::", "")


@attrs.frozen
class TlsFiles:
    """What the lead serves: its certificate chain and key, the authority's certificate and fingerprint."""
    cert: Path
    key: Path
    ca: Path
    fingerprint: str  # the authority's SHA-256, `AB:CD:…`
    made: bool  # the served certificate was issued at this start
    said: bool = False  # a new authority was made and said so in the log (the one line of a move)


def fingerprint_der(der: bytes) -> str:
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def fingerprint_pem(pem: bytes) -> str:
    """SHA-256 fingerprint of a PEM certificate (the first one), as browsers show it: `AB:CD:…`."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return fingerprint_der(x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER))


def fingerprint_file(path: str | Path) -> str | None:
    try:
        return fingerprint_pem(Path(path).read_bytes())
    except (OSError, ValueError):
        return None


def der_of(pem: bytes) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


def is_local_address(text: str) -> bool:
    try:
        addr = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return any(addr in net for net in LOCAL_NETS if net.version == addr.version)


def reachable(address: str) -> bool:
    """An address a person on another machine could dial: not unspecified, loopback, multicast or IPv6
    link-local (that one needs a zone a link cannot carry)."""
    try:
        a = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or (a.version == 6 and a.is_link_local))


def machine_addresses() -> list[str]:
    """This machine's own addresses (best effort, loopback last): the interfaces' (Linux /proc), the one the
    default route leaves from, and what its host name resolves to."""
    out: list[str] = []

    def add(a: str) -> None:
        try:
            a = str(ipaddress.ip_address(a.split("%")[0]))
        except ValueError:
            return
        if a not in out:
            out.append(a)

    try:  # IPv4: the LOCAL host entries of the kernel's routing table
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for i, line in enumerate(lines):
            if "/32 host LOCAL" in line and i > 0:
                add(lines[i - 1].split()[-1])
    except OSError:
        pass
    try:  # IPv6: every address of every interface
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            raw = line.split()[0]
            if len(raw) == 32:
                add(":".join(raw[i:i + 4] for i in range(0, 32, 4)))
    except OSError:
        pass
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:  # no packet is sent: connecting a UDP socket only picks the source address
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))
                add(s.getsockname()[0])
        except OSError:
            pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            add(str(info[4][0]))
    except OSError:
        pass
    return [a for a in out if reachable(a)] + [a for a in out if not reachable(a)]


def names_for(host: str, extra: list[str] | tuple[str, ...] = (), addresses: list[str] | None = None) -> list[str]:
    """The names and addresses the served certificate covers: the bound host (on `0.0.0.0`/`::` this
    machine's addresses), this machine's name and `NAME.local`, the loopback names, and `--name`s."""
    hostname = socket.gethostname().lower()
    wanted = [*extra, hostname, f"{hostname}.local" if "." not in hostname else "", *LOOPBACK_NAMES]
    if host in ALL_ADDRESSES:
        found = machine_addresses() if addresses is None else addresses
        wanted = [*(a for a in found if not (ipaddress.ip_address(a).version == 6
                                             and ipaddress.ip_address(a).is_link_local)), *wanted]
    else:
        wanted = [host, *wanted]
    names: list[str] = []
    for n in wanted:
        n = n.strip().strip("[]").lower().rstrip(".")
        if n and n not in names:
            names.append(n)
    return names


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def _dns_local(name: str) -> bool:
    return any(name == s or name.endswith("." + s) for s in LOCAL_SUFFIXES)


def constraints_for(own: list[str]):
    """The authority's Name Constraints: local-only names and addresses, plus the lead's own others."""
    from cryptography import x509

    dns = list(LOCAL_SUFFIXES) + [n for n in own if not _is_ip(n) and not _dns_local(n)]
    nets = list(LOCAL_NETS) + [ipaddress.ip_network(n) for n in own if _is_ip(n) and not is_local_address(n)]
    permitted = [x509.DNSName(d) for d in dict.fromkeys(dns)] + [x509.IPAddress(n) for n in dict.fromkeys(nets)]
    return x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None)


def permits(ca_pem: bytes, name: str) -> bool:
    """Whether the authority's Name Constraints allow it to vouch for `name` (RFC 5280 §4.2.1.10)."""
    from cryptography import x509

    try:
        nc = x509.load_pem_x509_certificate(ca_pem).extensions.get_extension_for_class(x509.NameConstraints).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    name = name.strip("[]").lower().rstrip(".")
    if _is_ip(name):
        addr = ipaddress.ip_address(name)
        return any(addr in g.value for g in nc.permitted_subtrees or ()
                   if isinstance(g, x509.IPAddress) and g.value.version == addr.version)
    return any(name == g.value.lower() or name.endswith("." + g.value.lower().lstrip("."))
               for g in nc.permitted_subtrees or () if isinstance(g, x509.DNSName))


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_authority(own: list[str], now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a new authority limited to local names/addresses and `own`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    stamp = now.strftime("%Y-%m-%d")
    subject = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, f"Collie lead on {socket.gethostname()} ({stamp})"[:64]),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Collie crew (this lead's own authority)")])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(constraints_for(own), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue(ca_pem: bytes, ca_key_pem: bytes, names: list[str],
          now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """(chain PEM: the served certificate then the authority's, key PEM) for `names`, issued by the authority."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = now or _now()
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    san = [x509.IPAddress(ipaddress.ip_address(n)) if _is_ip(n) else x509.DNSName(n) for n in names]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Collie crew")]))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName(san), critical=True)  # empty subject: SAN is critical
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM) + ca_pem, _key_pem(key)


def make_certificate(names: list[str]) -> tuple[bytes, bytes]:
    """(chain PEM, key PEM) for `names` from a fresh authority that is then forgotten (tests, benchmarks)."""
    ca_pem, ca_key = make_authority([n for n in names if not is_local_address(n) and not _dns_local(n)])
    return issue(ca_pem, ca_key, names)


def covered(cert_pem: bytes, names: list[str], ca_pem: bytes | None = None,
            now: datetime.datetime | None = None) -> bool:
    """The served certificate names every one of `names`, is not near its end, and (given) was issued by `ca_pem`."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if ca_pem is not None and cert.issuer != x509.load_pem_x509_certificate(ca_pem).subject:
            return False
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = {str(v).lower() for v in san.get_values_for_type(x509.DNSName)}
    have |= {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    if cert.not_valid_after_utc <= (now or _now()) + RENEW_BEFORE:
        return False
    return all(n in have for n in names)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _private(path: Path) -> None:
    if path.exists() and (path.stat().st_mode & 0o777) != 0o600:
        path.chmod(0o600)


def ensure_certificate(state_dir: Path, names: list[str], log=None) -> TlsFiles:
    """The authority and the served certificate under `<state>/tls/`: the authority made when missing (or
    when it cannot vouch for one of `names`), the served certificate issued when missing, not from it,
    not covering `names`, or near its end."""
    folder = state_dir / "tls"
    ensure_private_dir(folder)
    ca_path, ca_key_path = folder / "ca.pem", folder / "ca-key.pem"
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    ca_pem, ca_key = _read(ca_path), _read(ca_key_path)
    old_cert = _read(cert_path)
    outside = [n for n in names if ca_pem is not None and not permits(ca_pem, n)]
    said = False
    if ca_pem is None or ca_key is None or outside:
        own = [n for n in names if not (_is_ip(n) and is_local_address(n)) and not _dns_local(n)]
        ca_pem, ca_key = make_authority(own)
        atomic_write(ca_key_path, ca_key, mode=0o600)
        atomic_write(ca_path, ca_pem, mode=0o644)
        fp = fingerprint_pem(ca_pem)
        said = log is not None and (bool(outside) or old_cert is not None)
        if log is not None and outside:
            log.info("[bridge] the lead's certificate authority cannot vouch for %s: made a new one (SHA-256 %s); "
                     "phones must trust it again at /trust", ", ".join(outside), fp)
        elif log is not None and old_cert is not None:
            log.info("[bridge] moved from the self-signed TLS certificate to the lead's own certificate authority "
                     "(SHA-256 %s): a phone trusts it once, at /trust", fp)
        old_cert = None
    _private(ca_key_path)
    fp = fingerprint_pem(ca_pem)
    if old_cert is not None and covered(old_cert, names, ca_pem) and key_path.exists():
        _private(key_path)
        return TlsFiles(cert_path, key_path, ca_path, fp, made=False)
    chain, key = issue(ca_pem, ca_key, names)
    atomic_write(key_path, key, mode=0o600)
    atomic_write(cert_path, chain, mode=0o644)
    return TlsFiles(cert_path, key_path, ca_path, fp, made=True, said=said)


def describe_served(path: str | Path) -> dict | None:
    """What the served certificate file holds, for `collie doctor`: its names, who issued it, until when."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError):
        return None

    def cn(name) -> str:
        got = name.get_attributes_for_oid(NameOID.COMMON_NAME) or name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
        return str(got[0].value) if got else name.rfc4514_string()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(v) for v in san.get_values_for_type(x509.DNSName)] + \
                [str(v) for v in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = []
    return {"issuer": cn(cert.issuer), "self_signed": cert.issuer == cert.subject, "names": names,
            "until": cert.not_valid_after_utc.strftime("%Y-%m-%d"), "fingerprint": fingerprint_pem(Path(path).read_bytes())}
