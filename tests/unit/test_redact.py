"""X1: secrets are masked in push text and conversation-list titles; near-misses stay untouched."""

from __future__ import annotations

import pytest

from collie.crew.redact import MASK, enabled, redact

SECRETS = [
    ("AWS key id", "deploy with AKIAIOSFODNN7EXAMPLE now", "AKIAIOSFODNN7EXAMPLE"),
    ("GitHub", "token ghp_0123456789abcdefghij0123456789abcdef ok", "ghp_0123456789abcdefghij0123456789abcdef"),
    ("GitLab", "glpat-xxxxxxxxxxxxxxxxxxxx1 used", "glpat-xxxxxxxxxxxxxxxxxxxx1"),
    ("Slack", "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx", "xoxb-123456789012-1234567890123"),
    ("Slack webhook", "post to https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX", "XXXXXXXXXXXXXXXX"),
    ("Stripe", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("OpenAI project key", "OPENAI=sk-proj-abcDEF1234567890ghiJKL1234567890mnop", "sk-proj-abcDEF1234567890ghiJKL"),
    ("Anthropic", "using sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789 today", "sk-ant-api03-abcdefghijklmnop"),
    ("Google", "key AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
    ("SendGrid", "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", "SG.abcdefghijklmnopqrstuv"),
    ("JWT", "Authorization eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("Bearer", "curl -H 'Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0' api", "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    ("password in URL", "clone https://deploy:hunter2secret@git.example.com/repo.git", "hunter2secret"),
    ("shell KEY=value", "export DATABASE_PASSWORD=correct-horse-battery", "correct-horse-battery"),
    ("shell API_KEY", "API_KEY=\"abc123def456\" ./run", "abc123def456"),
    ("yaml secret", "client_secret: Zm9vYmFyYmF6cXV4", "Zm9vYmFyYmF6cXV4"),
    ("private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
     "b3BlbnNzaC1rZXktdjEAAAAA"),
    ("cut private key", "paste: -----BEGIN RSA PRIVATE KEY----- MIIEpAIBAAKCAQEA", "MIIEpAIBAAKCAQEA"),
    ("Telegram", "bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1 up", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"),
]

KEEP = [
    "Deploy to staging?",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b merged",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b4ba0b5d8fb1e4e1c6f4e4e2a",
    "request 123e4567-e89b-12d3-a456-426614174000 done",
    "internationalization and counterrevolutionaries are long words",
    "the token budget is 2000 per turn",
    "password reset flow for users",
    "PATH=/usr/local/bin:/usr/bin",
    "https://example.com/docs?page=2#install",
    "eyJust a word",
    "sk-short",
    "Step 2 of 3: Save a note",
]


@pytest.mark.parametrize("what,text,secret", SECRETS, ids=[s[0] for s in SECRETS])
def test_secrets_are_masked(what, text, secret):
    out = redact(text)
    assert secret not in out and MASK in out, (what, out)


@pytest.mark.parametrize("text", KEEP)
def test_near_misses_stay_untouched(text):
    assert redact(text) == text


def test_text_around_a_secret_stays():
    assert redact("use AKIAIOSFODNN7EXAMPLE for staging") == f"use {MASK} for staging"


def test_redaction_is_on_unless_turned_off():
    assert enabled({}) and enabled({"COLLIE_REDACT": "on"})
    assert not enabled({"COLLIE_REDACT": "off"}) and not enabled({"COLLIE_REDACT": "0"})
