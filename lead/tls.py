"""TLS for the phone's door: the user's certificate, or one the lead makes on first use (phone-api.md).

Off loopback the lead speaks only TLS. Without `--tls-cert`/`--tls-key` it makes a self-signed
certificate once — an ECDSA P-256 key (`<state>/tls/key.pem`, 0600) and a certificate for the
machine's names and addresses, valid 825 days, made with the `cryptography` package — and reuses
it at every start, so a phone that trusted it once keeps trusting it. Its SHA-256 fingerprint is
printed by `collie serve`, `collie pair` and `collie doctor`: compare it with what the phone's
browser shows before you trust the certificate there.

A certificate that no longer covers the names asked for is made again (with one log line).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
from pathlib import Path

from crew.fsutil import atomic_write, ensure_private_dir

VALID_DAYS = 825
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def fingerprint_pem(pem: bytes) -> str:
    """SHA-256 fingerprint of a PEM certificate, as browsers show it: `AB:CD:…`."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    der = x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def fingerprint_file(path: str | Path) -> str | None:
    try:
        return fingerprint_pem(Path(path).read_bytes())
    except (OSError, ValueError):
        return None


def names_for(host: str, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The names and addresses a generated certificate covers: the bound host, this machine's name,
    the loopback names, and any names given with `--name`."""
    names: list[str] = []
    wanted = [host, *extra, socket.gethostname(), *LOOPBACK_NAMES]
    if host in ("0.0.0.0", "::", ""):
        wanted.remove(host)
        wanted += local_addresses()
    for n in wanted:
        n = n.strip("[]").lower()
        if n and n not in names:
            names.append(n)
    return names


def local_addresses() -> list[str]:
    """This machine's addresses that a name lookup of its host name gives (best effort)."""
    out: list[str] = []
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            addr = info[4][0]
            if addr not in out:
                out.append(addr)
    except OSError:
        pass
    return out


def _san(names: list[str]):
    from cryptography import x509

    entries = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def covered(cert_pem: bytes, names: list[str]) -> bool:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = {str(v).lower() for v in san.get_values_for_type(x509.DNSName)}
    have |= {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    now = datetime.datetime.now(datetime.timezone.utc)
    if cert.not_valid_after_utc <= now + datetime.timedelta(days=7):
        return False
    return all(n in have for n in names)


def make_certificate(names: list[str]) -> tuple[bytes, bytes]:
    """(certificate PEM, private key PEM) for a new self-signed certificate covering `names`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"Collie on {socket.gethostname()}"[:64]),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Collie crew (self-signed)")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(_san(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=False,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def ensure_certificate(state_dir: Path, names: list[str], log=None) -> tuple[Path, Path, bool]:
    """The generated certificate and key under `<state>/tls/`, made when missing or when it no longer
    covers `names`: (cert path, key path, made now)."""
    folder = state_dir / "tls"
    ensure_private_dir(folder)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    try:
        if covered(cert_path.read_bytes(), names) and key_path.exists():
            if (key_path.stat().st_mode & 0o777) != 0o600:
                key_path.chmod(0o600)
            return cert_path, key_path, False
        if log is not None and cert_path.exists():
            log.info("[bridge] the generated TLS certificate does not cover %s (or expires soon): making a new one",
                     ", ".join(names))
    except OSError:
        pass
    cert_pem, key_pem = make_certificate(names)
    atomic_write(key_path, key_pem, mode=0o600)
    atomic_write(cert_path, cert_pem, mode=0o644)
    return cert_path, key_path, True
