"""Agent Markdown rendered on the server, never in the page (features C1: raw HTML shows as text;
`https://` links only).

markdown-it-py in CommonMark mode with HTML off: `<b>` in agent text comes out as `&lt;b&gt;`. A link
or image whose target is not `https://` stays text (its brackets shown); images are shown as links
(a phone should not fetch whatever an agent names). Links open in a new tab with no referrer.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

MAX_TEXT = 100_000  # longer markdown is shown as plain text instead of being rendered


def _https_only(url: str) -> bool:
    return url.strip().lower().startswith("https://")


def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False})
    md.validateLink = _https_only  # type: ignore[method-assign]

    def link_open(self, tokens, idx, options, env):
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        tokens[idx].attrSet("target", "_blank")
        return self.renderToken(tokens, idx, options, env)

    def image(self, tokens, idx, options, env):
        tok = tokens[idx]
        src = escapeHtml(tok.attrGet("src") or "")
        alt = escapeHtml(self.renderInlineAsText(tok.children or [], options, env) or src)
        return f'<a href="{src}" rel="noopener noreferrer nofollow" target="_blank">{alt}</a>'

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    return md


_MD = _renderer()


def render(text: str) -> str | None:
    """Safe HTML for an agent's Markdown, or None when it is too long to render (show the text)."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return None
    return _MD.render(text)
