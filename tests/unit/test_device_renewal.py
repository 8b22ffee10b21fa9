"""A replaced cookie logs no phone out (issue 25.1, phone-api.md "Pairing a phone", docs/threat-model.md).

A neighbour on another port of the host can replace the phone's cookie (same name, same Path). The page
renews it: its device key asks for a challenge, its signing key (made at pairing, not extractable) signs
it, and the lead sets a new cookie. The device key alone renews nothing; a challenge is used once, within
60 seconds, by the device it was given to; the old cookie stops working. Pure `Devices` calls with the
time passed in, plus the route through the real app.
"""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from collie.lead.door.devices import (CHALLENGE_TTL, CHALLENGES_PER_DEVICE, RENEW_CONTEXT, Devices, RenewRefused,
                                      parse_sign_key)

T0 = 1_800_000_000.0


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Phone:
    """What the pairing page makes: a P-256 key pair, its public half as WebCrypto exports it ("raw")."""

    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.public = b64(self.private.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint))

    def sign(self, challenge: str) -> str:  # WebCrypto's ECDSA signature: r‖s, 32 bytes each
        r, s = decode_dss_signature(self.private.sign(RENEW_CONTEXT + challenge.encode(), ec.ECDSA(hashes.SHA256())))
        return b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


@pytest.fixture
def devices(tmp_path):
    d = Devices(tmp_path / "devices.sqlite")
    yield d
    d.close()


def paired(devices, phone: Phone | None):
    code, _ = devices.new_code(T0)
    return devices.redeem(code, "Pixel", T0, phone.public if phone else None)


def test_a_replaced_cookie_is_renewed_with_the_signing_key_and_the_old_one_stops(devices, tmp_path):
    phone = Phone()
    dev, cookie, key = paired(devices, phone)
    assert devices.device_for(["planted-by-neighbour"], key) is None  # the neighbour replaced the cookie
    challenge = devices.new_challenge(key, T0 + 5)
    renewed, fresh = devices.renew(key, challenge, phone.sign(challenge), T0 + 6)
    assert renewed is dev and fresh != cookie
    assert devices.device_for([fresh], key) is dev
    assert devices.device_for([cookie], key) is None  # the old cookie opens nothing any more
    devices.close()
    again = Devices(tmp_path / "devices.sqlite")  # kept across a restart, the signing key too
    assert again.device_for([fresh], key).name == "Pixel"
    challenge = again.new_challenge(key, T0 + 10)
    assert again.renew(key, challenge, phone.sign(challenge), T0 + 11)[0].name == "Pixel"
    again.close()


def test_the_device_key_alone_renews_nothing(devices):
    phone, thief = Phone(), Phone()
    _dev, cookie, key = paired(devices, phone)
    challenge = devices.new_challenge(key, T0)
    for bad in (thief.sign(challenge), "", "A" * 86, None, 7, b64(b"\0" * 64)):
        with pytest.raises(RenewRefused):
            devices.renew(key, challenge, bad, T0 + 1)
        challenge = devices.new_challenge(key, T0)  # a refused try used the challenge up
    assert devices.device_for([cookie], key) is not None  # nothing changed


def test_a_challenge_is_used_once_within_a_minute_by_its_own_device(devices):
    phone, other = Phone(), Phone()
    _a, _cookie, key = paired(devices, phone)
    _b, _cookie2, other_key = paired(devices, other)
    late = devices.new_challenge(key, T0)
    with pytest.raises(RenewRefused):
        devices.renew(key, late, phone.sign(late), T0 + CHALLENGE_TTL)
    once = devices.new_challenge(key, T0)
    devices.renew(key, once, phone.sign(once), T0 + CHALLENGE_TTL - 1)
    with pytest.raises(RenewRefused):
        devices.renew(key, once, phone.sign(once), T0 + 2)
    theirs = devices.new_challenge(other_key, T0)
    with pytest.raises(RenewRefused):  # another device's challenge, even signed by this phone
        devices.renew(key, theirs, phone.sign(theirs), T0 + 1)


def test_one_device_asking_again_and_again_drops_only_its_own_challenges(devices):
    """Found from outside: a key (even one copied off a phone) asking for thousands of challenges pushed
    every other phone's out of one shared store, so no other phone could renew. Now each device keeps at
    most CHALLENGES_PER_DEVICE open; another device's try at a challenge does not use it up."""
    phone, flooder = Phone(), Phone()
    _a, _c, key = paired(devices, phone)
    _b, _c2, other = paired(devices, flooder)
    mine = devices.new_challenge(key, T0)
    for i in range(5000):
        devices.new_challenge(other, T0 + i / 1000)
    assert len(devices.challenges) == 1 + CHALLENGES_PER_DEVICE  # bounded, whatever the flood
    with pytest.raises(RenewRefused):  # the flooder presents the phone's challenge: refused, and not used up
        devices.renew(other, mine, flooder.sign(mine), T0 + 5)
    assert devices.renew(key, mine, phone.sign(mine), T0 + 6)[0] is _a
    firsts = [devices.new_challenge(key, T0 + 7) for _ in range(CHALLENGES_PER_DEVICE + 1)]
    with pytest.raises(RenewRefused):  # the phone's own oldest went for its newest
        devices.renew(key, firsts[0], phone.sign(firsts[0]), T0 + 8)
    assert devices.renew(key, firsts[-1], phone.sign(firsts[-1]), T0 + 8)[0] is _a


def test_only_unpadded_base64url_is_read(devices):
    """phone-api.md: keys and signatures are unpadded base64url; padding or the standard alphabet is refused."""
    phone = Phone()
    assert len(phone.public) == 87  # 65 bytes
    with pytest.raises(ValueError):
        parse_sign_key(phone.public + "=")
    _dev, _cookie, key = paired(devices, phone)
    challenge = devices.new_challenge(key, T0)
    sig = phone.sign(challenge)  # 64 bytes: 86 characters, unpadded
    with pytest.raises(RenewRefused):
        devices.renew(key, challenge, sig + "==", T0 + 1)
    challenge = devices.new_challenge(key, T0)
    sig = phone.sign(challenge)
    std = base64.b64encode(base64.urlsafe_b64decode(sig + "==")).decode().rstrip("=")
    if std != sig:  # it holds a + or / (almost always): refused
        with pytest.raises(RenewRefused):
            devices.renew(key, challenge, std, T0 + 1)


def test_who_cannot_renew_is_told_to_pair_again(devices):
    _dev, _cookie, key = paired(devices, None)  # paired without a signing key (an old page, a script)
    with pytest.raises(RenewRefused, match="collie pair"):
        devices.new_challenge(key, T0)
    for bad in ("not-a-key", "", None, "x" * 500):
        with pytest.raises(RenewRefused, match="collie pair"):
            devices.new_challenge(bad, T0)
    phone = Phone()
    dev, _cookie, key = paired(devices, phone)
    devices.revoke(dev.name)
    with pytest.raises(RenewRefused):
        devices.new_challenge(key, T0)


@pytest.mark.parametrize("bad", ["", "A" * 87, b64(b"\x04" + b"\1" * 64), b64(b"\x02" + b"\1" * 32), 5, ["x"]])
def test_a_malformed_signing_key_is_refused_at_pairing(bad):
    with pytest.raises(ValueError):
        parse_sign_key(bad)
    assert parse_sign_key(None) is None
    assert parse_sign_key(Phone().public)
