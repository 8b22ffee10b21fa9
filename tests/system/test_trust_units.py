"""The lead's own certificate authority, the door behind a proxy, and forwarded addresses: their plain parts
(issue 35; phone-api.md "A real phone: trust and reach", crew.md §2). The same rules in real processes and
Chromium: tests/system/test_trust.py."""

from __future__ import annotations

import datetime
import logging
import ssl
import stat
import subprocess

import pytest
from cryptography import x509

from collie.crew.crewconfig import check_fingerprint
from collie.crew.security import fingerprint_file, public_parts
from collie.lead.door.connections import ConnectionBudget, Limits
from collie.lead.door.http import forwarded_client
from collie.lead.door.pairing import Door
from collie.lead.door.tls import (ensure_certificate, fingerprint_pem, issue, make_authority, make_certificate,
                                  names_for, permits)


def _nc(ca_pem: bytes) -> x509.Extension:
    return x509.load_pem_x509_certificate(ca_pem).extensions.get_extension_for_class(x509.NameConstraints)


def test_the_authority_can_vouch_only_for_local_names_and_the_leads_own():
    """The authority's Name Constraints are critical and permit the lead's own names and addresses, private,
    link-local, shared and loopback addresses and local-only names — never a public site."""
    ca, _key = make_authority(["box.example", "203.0.113.7"])
    assert _nc(ca).critical
    for ok in ("box.example", "www.box.example", "203.0.113.7", "10.1.2.3", "172.31.0.1", "192.168.1.9",
               "169.254.3.4", "100.64.0.1", "127.0.0.1", "::1", "fd00::5", "fe80::1", "printer.local", "nas.lan",
               "h.home.arpa", "x.internal", "localhost"):
        assert permits(ca, ok), ok
    for bad in ("google.com", "example", "notbox.example", "203.0.113.8", "8.8.8.8", "2001:db8::1", "local.com",
                "lan.example.org", "100.128.0.1"):
        assert not permits(ca, bad), bad


def test_a_certificate_outside_the_constraints_fails_verification(tmp_path):
    """OpenSSL (what a member uses) refuses a certificate the authority issued for a public name: the constraints
    are enforced by clients, not only by the lead's choice of names."""
    ca, key = make_authority([])
    chain, _ = issue(ca, key, ["bank.example.com"])
    (tmp_path / "ca.pem").write_bytes(ca)
    (tmp_path / "leaf.pem").write_bytes(chain.split(b"-----END CERTIFICATE-----")[0] + b"-----END CERTIFICATE-----\n")
    done = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.pem"), str(tmp_path / "leaf.pem")],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "permitted" in (done.stdout + done.stderr).lower()
    chain, _ = issue(ca, key, ["nas.lan", "192.168.1.2"])
    (tmp_path / "leaf.pem").write_bytes(chain.split(b"-----END CERTIFICATE-----")[0] + b"-----END CERTIFICATE-----\n")
    done = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.pem"), str(tmp_path / "leaf.pem")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_served_certificate_is_issued_again_when_names_change_and_the_authority_stays(tmp_path):
    """A new address is covered by a new served certificate from the same authority (a phone trusts once); the
    authority's key is 0600 and never part of what is served."""
    first = ensure_certificate(tmp_path, ["10.0.0.5", "localhost"])
    assert first.made
    again = ensure_certificate(tmp_path, ["10.0.0.5", "localhost"])
    assert not again.made and again.fingerprint == first.fingerprint
    moved = ensure_certificate(tmp_path, ["10.0.0.6", "localhost"])
    assert moved.made and moved.fingerprint == first.fingerprint
    served = moved.cert.read_bytes()
    assert b"PRIVATE" not in served
    leaf = x509.load_pem_x509_certificate(served)
    ips = [str(i) for i in leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
           .get_values_for_type(x509.IPAddress)]
    assert ips == ["10.0.0.6"]
    for key in ("ca-key.pem", "key.pem"):
        assert stat.S_IMODE((tmp_path / "tls" / key).stat().st_mode) == 0o600
    ctx = ssl.create_default_context(cafile=str(moved.ca))
    ctx.load_cert_chain(moved.cert, moved.key)  # the chain and its key belong together


def test_a_name_the_authority_cannot_vouch_for_makes_a_new_one_with_one_log_line(tmp_path, caplog):
    """A new --name outside the authority's constraints: a new authority (phones trust again), said once."""
    first = ensure_certificate(tmp_path, ["localhost"])
    with caplog.at_level(logging.INFO):
        log = logging.getLogger("test.trust")
        second = ensure_certificate(tmp_path, ["localhost", "collie.example.org"], log)
    assert second.fingerprint != first.fingerprint
    lines = [r.getMessage() for r in caplog.records if "authority" in r.getMessage()]
    assert len(lines) == 1 and "collie.example.org" in lines[0] and "/trust" in lines[0]


def test_an_install_from_before_moves_to_the_authority_at_start_with_one_log_line(tmp_path, caplog):
    """A state folder holding the old self-signed certificate gets an authority and a certificate issued from it,
    with one log line naming the fingerprint and /trust."""
    folder = tmp_path / "tls"
    folder.mkdir(mode=0o700)
    cert, key = make_certificate(["localhost"])  # stands for the old certificate: not from the new authority
    (folder / "cert.pem").write_bytes(cert.split(b"-----END CERTIFICATE-----")[0] + b"-----END CERTIFICATE-----\n")
    (folder / "key.pem").write_bytes(key)
    with caplog.at_level(logging.INFO):
        files = ensure_certificate(tmp_path, ["localhost"], logging.getLogger("test.trust"))
    assert files.made and (folder / "ca.pem").exists()
    assert fingerprint_file(files.ca) == files.fingerprint
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and files.fingerprint in lines[0] and "/trust" in lines[0]
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    leaf = x509.load_pem_x509_certificate(files.cert.read_bytes())
    assert leaf.issuer == ca.subject


def test_a_served_certificate_near_its_end_is_issued_anew(tmp_path):
    """Thirty days before its end the served certificate is issued again, from the same authority."""
    files = ensure_certificate(tmp_path, ["localhost"])
    ca, ca_key = files.ca.read_bytes(), (tmp_path / "tls" / "ca-key.pem").read_bytes()
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=380)
    chain, key = issue(ca, ca_key, ["localhost"], now=old)
    files.cert.write_bytes(chain)
    again = ensure_certificate(tmp_path, ["localhost"])
    assert again.made and again.fingerprint == files.fingerprint


def test_all_addresses_are_covered_and_never_0000():
    """On 0.0.0.0 the certificate names this machine's addresses (IPs included), never 0.0.0.0 or ::."""
    names = names_for("0.0.0.0", ["nas.lan"], addresses=["10.211.7.1", "192.168.1.4", "fe80::1", "127.0.0.1"])
    assert "10.211.7.1" in names and "192.168.1.4" in names and "nas.lan" in names and "localhost" in names
    assert "0.0.0.0" not in names and "::" not in names and "fe80::1" not in names


def test_printed_addresses_never_name_0000_or_the_unspecified_v6():
    """What a person opens: the public URL, else this machine's reachable addresses, never 0.0.0.0 or ::."""
    door = Door("0.0.0.0", 8470, tls=True, addresses=["10.211.7.1", "127.0.0.1"])
    assert door.base_urls() == ["https://10.211.7.1:8470"]
    door = Door("::", 8470, tls=True, addresses=["fd00::2", "::1"])
    assert door.base_urls() == ["https://[fd00::2]:8470"]
    door = Door("127.0.0.1", 8470, tls=False, public_url="https://collie.tail1234.ts.net")
    assert door.base_url() == "https://collie.tail1234.ts.net"


def test_the_door_accepts_the_public_url_and_no_other():
    """With --public-url the door accepts that name and port (Host) and that origin over https, and still
    refuses every other; the phone's credential becomes the __Host- cookie."""
    door = Door("127.0.0.1", 8470, tls=False, public_url="https://collie.example.net")
    assert door.secure
    assert door.host_ok("collie.example.net") and door.host_ok("collie.example.net:443")
    assert not door.host_ok("collie.example.net:8470") and not door.host_ok("evil.example.net")
    assert door.host_ok("127.0.0.1:8470")  # the lead's own loopback name stays (collie doctor, the CLI)
    assert door.origin_ok("https://collie.example.net") and door.origin_ok("https://collie.example.net:443")
    for bad in ("http://collie.example.net", "https://collie.example.net:8443", "https://evil.example.net",
                "https://collie.example.net.evil.net", "null"):
        assert not door.origin_ok(bad), bad
    door = Door("127.0.0.1", 8470, tls=False, public_url="https://box.lan:8443")
    assert door.host_ok("box.lan:8443") and not door.host_ok("box.lan") and door.origin_ok("https://box.lan:8443")


@pytest.mark.parametrize("bad", ["http://x.example", "https://", "https://x.example/collie", "https://u@x.example",
                                 "https://x.example?a=1", "ftp://x", "https://0.0.0.0", "https://x.example:99999"])
def test_a_bad_public_url_is_refused_with_the_reason(bad):
    """--public-url is https://NAME[:PORT] and nothing else; anything else is one line saying why."""
    with pytest.raises(ValueError) as why:
        public_parts(bad)
    assert "https://" in str(why.value) or "address" in str(why.value)


def test_forwarded_addresses_are_believed_only_from_trusted_proxies():
    """Forwarded / X-Forwarded-For name the client only when the TCP peer is a trusted proxy; read right to
    left, so what a client writes at the left is never believed."""
    import ipaddress

    proxies = (ipaddress.ip_network("127.0.0.0/8"),)
    assert forwarded_client("127.0.0.1", None, "10.211.0.9", proxies) == "10.211.0.9"
    assert forwarded_client("127.0.0.1", None, "6.6.6.6, 10.211.0.9", proxies) == "10.211.0.9"
    assert forwarded_client("127.0.0.1", 'for=6.6.6.6, for="[fd00::9]:5"', None, proxies) == "fd00::9"
    assert forwarded_client("127.0.0.1", None, "not-an-address", proxies) == "127.0.0.1"
    assert forwarded_client("10.211.0.9", None, "1.2.3.4", proxies) == "10.211.0.9"  # not a proxy: not believed
    assert forwarded_client("127.0.0.1", None, None, proxies) == "127.0.0.1"


def test_a_flood_through_the_proxy_is_counted_against_the_flooder_not_the_phone():
    """Connections from a trusted proxy are admitted beyond the proxy address's share; once their requests name
    their clients, the flooder over its share loses its oldest waiting connection, and the phone keeps its own."""
    budget = ConnectionBudget(Limits(total=100, per_client=4, pressure=50))
    flood = [object() for _ in range(8)]
    for i, conn in enumerate(flood):
        assert budget.admit(conn, "127.0.0.1", float(i), proxied=True) == (True, None)
    closed = [budget.rekey(conn, "10.212.0.66") for conn in flood]
    assert [c for c in closed if c is not None]  # over its share: its own waiting ones go
    phone = object()
    assert budget.admit(phone, "127.0.0.1", 9.0, proxied=True) == (True, None)
    assert budget.rekey(phone, "10.211.0.2") is None
    budget.trust(phone)
    assert budget.client_of[phone] == "10.211.0.2"


def test_the_invite_fingerprint_is_read_in_any_spelling():
    """--ca-sha256 takes the fingerprint as printed, in any case, with or without colons; else says what it is."""
    fp = fingerprint_pem(make_authority([])[0])
    assert check_fingerprint(fp.lower()) == fp and check_fingerprint(fp.replace(":", "")) == fp
    with pytest.raises(ValueError, match="64 hexadecimal"):
        check_fingerprint("AB:CD")


async def test_a_new_address_is_served_with_a_certificate_issued_anew_without_a_restart(tmp_path, monkeypatch,
                                                                                        autojump_clock):
    """On 0.0.0.0, when this machine's addresses change, the served certificate is issued anew from the same
    authority within ADDRESS_CHECK_SECONDS, loaded into the running server's TLS context, and the door (Host
    check, printed addresses) follows."""
    import types

    import trio

    from collie.lead import daemon as lead_daemon

    first = ensure_certificate(tmp_path, names_for("0.0.0.0", [], addresses=["10.211.9.1"]))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(first.cert, first.key)
    door = Door("0.0.0.0", 8470, tls=True, addresses=["10.211.9.1"])
    fake = types.SimpleNamespace(args=types.SimpleNamespace(host="0.0.0.0", name=[]), addresses=["10.211.9.1"],
                                 paths=types.SimpleNamespace(state_dir=tmp_path), door=door)

    async def moved() -> list[str]:
        return ["10.211.9.2"]
    monkeypatch.setattr(lead_daemon, "_addresses_now", moved)
    app = types.SimpleNamespace(config={"COLLIE_SSL_CONTEXT": ctx})
    with trio.move_on_after(lead_daemon.ADDRESS_CHECK_SECONDS + 1):
        await lead_daemon.LeadDaemon.follow_addresses(fake, app)
    served = x509.load_pem_x509_certificate(first.cert.read_bytes())
    ips = [str(i) for i in served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
           .get_values_for_type(x509.IPAddress)]
    assert "10.211.9.2" in ips and "10.211.9.1" not in ips
    assert fingerprint_pem(first.ca.read_bytes()) == first.fingerprint  # the same authority: trusted once
    assert door.host_ok("10.211.9.2:8470") and not door.host_ok("10.211.9.1:8470")
    assert door.base_urls() == ["https://10.211.9.2:8470"]


async def test_with_the_users_own_certificate_there_is_no_trust_page(tmp_path):
    """--tls-cert turns the authority off: /trust and /trust/ca.crt answer 404 saying why; with the authority they
    are public (no credential) and the certificate is DER, application/x-x509-ca-cert."""
    from collie.lead.door.http import create_app
    from collie.lead.door.trust import install_trust

    own = create_app(lambda a: install_trust(a, None)).test_client()
    for path in ("/trust", "/trust/ca.crt"):
        got = await own.get(path)
        assert got.status_code == 404 and "--tls-cert" in (await got.get_data(as_text=True))
    files = ensure_certificate(tmp_path, ["localhost"])
    lead = create_app(lambda a: install_trust(a, files)).test_client()
    page = await lead.get("/trust")
    assert page.status_code == 200 and files.fingerprint in (await page.get_data(as_text=True))
    assert "script-src" not in page.headers["Content-Security-Policy"]  # nothing runs on it
    der = await lead.get("/trust/ca.crt")
    assert der.headers["Content-Type"] == "application/x-x509-ca-cert"
    assert ssl.DER_cert_to_PEM_cert(await der.get_data()).strip() == files.ca.read_text().strip()


def test_service_install_keeps_the_public_url_and_its_trusted_proxies(cli, paths, tmp_path, monkeypatch):
    """The unit serves with --public-url and its --trusted-proxy (loopback by default); a bad one is one line."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", "/nonexistent")
    unit_file = tmp_path / "xdg" / "systemd" / "user" / "collie.service"
    status, _, err = cli("service", "install", "--public-url", "https://collie.example.net")
    assert status == 0, err
    assert ("serve --host 127.0.0.1 --port 8470 --public-url https://collie.example.net --trusted-proxy 127.0.0.0/8 "
            "--trusted-proxy ::1") in unit_file.read_text()
    status, _, err = cli("service", "install", "--public-url", "https://x.example", "--trusted-proxy", "10.0.0.9")
    assert status == 0 and "--public-url https://x.example --trusted-proxy 10.0.0.9\n" in unit_file.read_text()
    status, _, err = cli("service", "install", "--public-url", "http://x.example")
    assert status == 2 and "must start with https://" in err
    status, _, err = cli("service", "install", "--public-url", "https://x.example", "--trusted-proxy", "nope")
    assert status == 2 and "--trusted-proxy nope is not an address or network" in err


def test_every_tls_failure_of_the_link_is_said_in_plain_words():
    """crew.md §2: not trusted, wrong name, wrong address, expired — each in words a person can act on, found
    however deep trio and trio-websocket wrap the error."""
    from collie.member.link import tls_failure

    def verify_error(code: int) -> ssl.SSLCertVerificationError:
        err = ssl.SSLCertVerificationError(1, "certificate verify failed")
        err.verify_code = code
        return err

    def wrapped(err: BaseException) -> BaseException:
        outer = OSError("connect failed")
        outer.__cause__ = err
        return ExceptionGroup("nursery", [outer])
    assert "not trusted by this machine" in tls_failure(wrapped(verify_error(20)))
    assert "for another name" in tls_failure(wrapped(verify_error(62)))
    assert "for another address" in tls_failure(wrapped(verify_error(64)))
    assert "has expired" in tls_failure(wrapped(verify_error(10)))
    assert tls_failure(ConnectionRefusedError()) is None
