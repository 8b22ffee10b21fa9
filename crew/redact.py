"""Secret redaction for what Collie shows outside the chat (features X1): push text, and the titles and
subtitles of an agent's conversation list. On unless `COLLIE_REDACT=off`.

What it masks (each match becomes `[secret]`; text around it stays):
- provider keys, with the patterns of Yelp's **detect-secrets** plugins (a well-kept, widely used
  detector; we take its regular expressions, not its scanning or entropy heuristics, so that hashes
  and ids are left alone): AWS access key ids, Azure storage keys, Discord, GitHub, GitLab, OpenAI,
  PyPI, SendGrid, Slack (tokens and webhooks), Square, Stripe, Telegram, Twilio, Mailchimp, npm;
- ours, for what those plugins miss or match only in part: JSON Web Tokens (all three parts),
  private-key blocks (`-----BEGIN … PRIVATE KEY-----` to its END, or to the end of the text),
  `Bearer <token>`, passwords in URLs (`https://user:PASSWORD@host`), Anthropic and newer OpenAI
  keys (`sk-ant-…`, `sk-proj-…`), Google API keys (`AIza…`), and `KEY=value` / `KEY: value` in shell
  lines where the name says secret (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*API_KEY*`,
  `*PRIVATE_KEY*`, `*ACCESS_KEY*`, `*CREDENTIAL*`; the value must be 6+ characters).
What it leaves: hex digests (git hashes, SHA-256), UUIDs, long ordinary words, numbers, paths.
Tested on a corpus of realistic secrets and near-misses (tests/unit/test_redact.py).
"""

from __future__ import annotations

import os
import re

MASK = "[secret]"
MAX_TEXT = 20_000  # longer text is cut before it is scanned (titles and push lines are short)


def _library_patterns() -> list[re.Pattern]:
    pats: list[re.Pattern] = []
    try:
        from detect_secrets.plugins.aws import AWSKeyDetector
        from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
        from detect_secrets.plugins.discord import DiscordBotTokenDetector
        from detect_secrets.plugins.github_token import GitHubTokenDetector
        from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
        from detect_secrets.plugins.mailchimp import MailchimpDetector
        from detect_secrets.plugins.npm import NpmDetector
        from detect_secrets.plugins.openai import OpenAIDetector
        from detect_secrets.plugins.pypi_token import PypiTokenDetector
        from detect_secrets.plugins.sendgrid import SendGridDetector
        from detect_secrets.plugins.slack import SlackDetector
        from detect_secrets.plugins.square_oauth import SquareOAuthDetector
        from detect_secrets.plugins.stripe import StripeDetector
        from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
        from detect_secrets.plugins.twilio import TwilioKeyDetector
    except ImportError:  # the library is a dependency; without it our own patterns still run
        return pats
    for plugin in (AzureStorageKeyDetector, DiscordBotTokenDetector, GitHubTokenDetector, GitLabTokenDetector,
                   MailchimpDetector, NpmDetector, OpenAIDetector, PypiTokenDetector, SendGridDetector, SlackDetector,
                   SquareOAuthDetector, StripeDetector, TelegramBotTokenDetector, TwilioKeyDetector):
        pats += [p if isinstance(p, re.Pattern) else re.compile(p) for p in plugin.denylist]
    pats.append(re.compile(AWSKeyDetector.denylist[0].pattern if isinstance(AWSKeyDetector.denylist[0], re.Pattern)
                           else AWSKeyDetector.denylist[0]))  # the key id; its second pattern is a keyword rule
    return pats


SECRET_NAME = r"[A-Za-z0-9_.-]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY|CREDENTIALS?)[A-Za-z0-9_.-]*"
OURS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*\Z)", re.S),
    re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    re.compile(r"\bsk-(?:ant-[a-z0-9]+-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
]
GROUPED = [  # mask only the secret part (group 1)
    re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{8,})"),
    re.compile(r"://[^:/?#\[\]@\s]+:([^/?#\[\]@\s]+)@"),
    re.compile(r"(?i)\b" + SECRET_NAME + r"""\s*[:=]\s*["']?([^\s"',;]{6,})"""),
]
_PATTERNS: list[re.Pattern] | None = None


def enabled(env: dict | None = None) -> bool:
    value = (env if env is not None else os.environ).get("COLLIE_REDACT", "on").strip().lower()
    return value not in ("off", "0", "false", "no")


def redact(text: str | None) -> str | None:
    """`text` with every secret it recognises replaced by `[secret]`."""
    global _PATTERNS
    if not text:
        return text
    if _PATTERNS is None:
        _PATTERNS = OURS + _library_patterns()
    text = text[:MAX_TEXT]
    spans: list[tuple[int, int]] = []
    for pat in _PATTERNS:
        spans += [m.span() for m in pat.finditer(text) if m.end() > m.start()]
    for pat in GROUPED:
        spans += [m.span(1) for m in pat.finditer(text) if m.end(1) > m.start(1)]
    if not spans:
        return text
    spans.sort()
    merged = [list(spans[0])]
    for a, b in spans[1:]:
        if a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = [], 0
    for a, b in merged:
        out += [text[pos:a], MASK]
        pos = b
    out.append(text[pos:])
    return "".join(out)
