"""`GET /trust` and `GET /trust/ca.crt`: how a phone trusts the lead's own certificate authority (phone-api.md,
"A real phone: trust and reach").

Both are public (no credential: a phone that does not trust the lead yet has none), behind the door's Host and
Origin checks like every page. `/trust` is a static page: the authority's SHA-256 fingerprint and the steps
for Android, iOS/iPadOS (including "Certificate Trust Settings") and desktop browsers; `/trust/ca.crt` is the
authority's certificate, DER, `application/x-x509-ca-cert` (what phones offer to install). With the user's own
certificate (`--tls-cert`) or none (loopback) there is no authority and both answer 404.
"""

from __future__ import annotations

import html

from quart import Response

from collie.lead.door.pairing import ANSWER_CSP, secure_headers
from collie.lead.door.tls import TlsFiles, der_of

TRUST_CSS = ("body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem}"
             "code{word-break:break-all;font-size:.9em}h2{margin-top:2rem}"
             "a.get{display:inline-block;padding:.75rem 1.25rem;min-height:48px;box-sizing:border-box;"
             "border:1px solid;border-radius:.5rem;text-decoration:none}")

TRUST_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Trust this Collie lead</title>
<style>{css}</style></head>
<body><h1>Trust this Collie lead</h1>
<p>Your Collie lead uses a certificate authority of its own. Trust it once on each phone or computer: then
the browser trusts the lead without warnings, and Collie can send notifications, let you answer from the lock
screen, be installed and reload offline. The authority can vouch only for this lead and for local network
addresses and names (<code>.local</code>, <code>.lan</code>, <code>.home.arpa</code>, <code>.internal</code>),
never for a public site.</p>
<p>Its SHA-256 fingerprint, as <code>collie pair</code> and <code>collie doctor</code> print it on the lead:<br>
<code id="fingerprint">{fp}</code><br>Compare it with what your device shows before you trust it.</p>
<p><a class="get" id="download" href="/trust/ca.crt" download="collie-lead-ca.crt">Download the certificate</a></p>

<h2>Android</h2>
<ol><li>Download the certificate above.</li>
<li>Settings → Security and privacy → More security settings → Encryption and credentials → Install a
certificate → CA certificate (the names vary by maker; search the settings for “CA certificate”).</li>
<li>Choose “Install anyway”, then the downloaded <code>collie-lead-ca.crt</code>.</li>
<li>Open the pairing link again (<code>collie pair</code> on the lead).</li></ol>

<h2>iPhone and iPad (iOS, iPadOS)</h2>
<ol><li>Open this page in Safari and tap “Download the certificate”; allow the download of the profile.</li>
<li>Settings → General → VPN &amp; Device Management (or “Profile Downloaded” at the top of Settings) →
the Collie profile → Install.</li>
<li>Settings → General → About → <strong>Certificate Trust Settings</strong> → turn on full trust for
“{name}”. Without this step iOS still does not trust it.</li>
<li>Open the pairing link in Safari, then Share → <strong>Add to Home Screen</strong> and open Collie from
there: on iPhone and iPad notifications work only for a page added to the home screen.</li></ol>

<h2>Desktop browsers</h2>
<ul><li><strong>Chrome, Edge</strong> (Windows, macOS, Linux): Settings → Privacy and security → Security →
Manage certificates → Authorities (or “Local certificates” → Custom → Installed by you) → Import the file, and
trust it for identifying websites.</li>
<li><strong>Firefox</strong>: Settings → Privacy &amp; Security → Certificates → View Certificates →
Authorities → Import…, and tick “Trust this CA to identify websites”.</li>
<li><strong>Safari</strong> (macOS): open the file to add it to Keychain Access (login keychain), double-click
“{name}”, Trust → “When using this certificate: Always Trust”.</li></ul>
<p>Then reload Collie. To stop trusting this lead, remove the certificate in the same place.</p>
</body></html>
"""

TRUST_CSP = (f"default-src 'none'; style-src 'sha256-{{h}}'; img-src 'none'; base-uri 'none'; "
             "form-action 'none'; frame-ancestors 'none'")


def trust_page(files: TlsFiles) -> str:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    name = str(cn[0].value) if cn else "Collie lead"
    return TRUST_PAGE.format(css=TRUST_CSS, fp=html.escape(files.fingerprint), name=html.escape(name))


def _csp() -> str:
    import base64
    import hashlib

    digest = base64.b64encode(hashlib.sha256(TRUST_CSS.encode()).digest()).decode()
    return TRUST_CSP.replace("{h}", digest)


def install_trust(app, files: TlsFiles | None) -> None:
    """`/trust` and `/trust/ca.crt` for the lead's own authority; 404 without one."""
    csp = _csp()

    @app.get("/trust")
    async def trust():
        if files is None:
            return _absent()
        resp = Response(trust_page(files), content_type="text/html; charset=utf-8")
        resp.headers["Content-Security-Policy"] = csp
        resp.headers["Cache-Control"] = "no-cache"
        secure_headers(resp)
        return resp

    @app.get("/trust/ca.crt")
    async def trust_ca():
        if files is None:
            return _absent()
        resp = Response(der_of(files.ca.read_bytes()), content_type="application/x-x509-ca-cert")
        resp.headers["Content-Disposition"] = 'attachment; filename="collie-lead-ca.crt"'
        resp.headers["Content-Security-Policy"] = ANSWER_CSP
        resp.headers["Cache-Control"] = "no-cache"
        secure_headers(resp)
        return resp


def _absent() -> Response:
    resp = Response("this lead serves your own certificate (--tls-cert) or plain HTTP on loopback: there is no "
                    "authority of its own to trust\n", status=404, content_type="text/plain; charset=utf-8")
    secure_headers(resp)
    return resp
