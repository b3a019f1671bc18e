"""The HTML page of a report: one self-contained file (styles, charts and the viewer's
script inline), the episode index and sample as JSON data blocks, and a Content
Security Policy that lets it load nothing but its own sidecar pages.

The policy is defence in depth behind the escaping: only scripts carrying this page's
nonce run (``'strict-dynamic'`` lets the viewer add its sidecar ``<script>``s), and no
request leaves the page (no ``connect-src``, images only from ``data:``), so even text
that got past the escaping could neither run nor call out.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from agentenv.report.episodes import BuiltEpisodes

__all__ = ["Section", "cards", "html_table", "render_page"]


@dataclass(frozen=True, slots=True)
class Section:
    """A titled part of the page; ``body`` is markup built from escaped values."""

    id: str
    title: str
    body: str


def _asset(name: str) -> str:
    return resources.files("agentenv.report").joinpath(name).read_text(encoding="utf-8")


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, cls: str = "data") -> str:
    """A table of escaped cells."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def cards(items: Sequence[tuple[str, str]]) -> str:
    """Headline figures: (label, value) pairs."""
    inner = "".join(
        f'<div class="card"><span class="muted">{html.escape(label)}</span><b>{html.escape(value)}</b></div>'
        for label, value in items
    )
    return f'<div class="cards">{inner}</div>'


def _viewer(episodes: BuiltEpisodes) -> str:
    if episodes.embedded == episodes.episodes:
        where = "Every episode is embedded in this file."
    elif not episodes.pages:
        where = (
            f"{episodes.embedded:,} of {episodes.episodes:,} episodes are embedded (a sample stratified by "
            "failure kind); the others were not written out (no sidecar pages): each names its JSONL file and line."
        )
    else:
        where = (
            f"{episodes.embedded:,} of {episodes.episodes:,} episodes are embedded (a sample stratified by "
            f"failure kind); the others load from the {episodes.pages:,} pages in the folder next to this file "
            "when opened (copy it along with the report)."
        )
    return f"""
<div class="filters">
  <select id="f-source" aria-label="source"></select>
  <input id="f-step-from" type="number" aria-label="from step">
  <input id="f-step-to" type="number" aria-label="to step">
  <select id="f-env" aria-label="env"></select>
  <select id="f-family" aria-label="task family"></select>
  <input id="f-task" type="search" placeholder="task id contains" aria-label="task">
  <select id="f-success" aria-label="solved">
    <option value="">solved or not</option><option value="1">solved</option><option value="0">not solved</option>
  </select>
  <select id="f-failure" aria-label="failure kind"></select>
  <span id="f-count" class="muted"></span>
  <button id="f-prev" type="button" aria-label="previous page">&lsaquo;</button>
  <span id="f-page" class="muted"></span>
  <button id="f-next" type="button" aria-label="next page">&rsaquo;</button>
</div>
<div id="ae-list"><table>
  <thead><tr><th>#</th><th>step</th><th>source</th><th>env</th><th>task</th><th>solved</th><th>failure</th>
  <th>turns</th><th>reward</th><th></th></tr></thead>
  <tbody id="ae-rows"></tbody>
</table></div>
<div id="ae-episode"><p class="muted">Choose an episode to see it turn by turn: the actions, the tool calls,
the observations, the state diff and the reward components of every step, and the raw record.</p></div>
<p class="note">{html.escape(where)} Long texts are cut at 20,000 characters; each episode names the JSONL
file and line that hold the whole record.</p>"""


def render_page(
    *, title: str, subtitle: str, sections: Sequence[Section], skipped: Sequence[str], episodes: BuiltEpisodes
) -> str:
    """The whole page; ``sections`` come first, then the trajectory viewer."""
    nonce = secrets.token_urlsafe(18)
    csp = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
        f"script-src 'nonce-{nonce}' 'strict-dynamic'"
    )
    toc = (
        "".join(f'<a href="#{s.id}">{html.escape(s.title)}</a>' for s in sections) + '<a href="#episodes">Episodes</a>'
    )
    notice = ""
    if skipped:
        items = "".join(f"<li>{html.escape(s)}</li>" for s in skipped)
        notice = f'<div class="skipped"><b>Skipped while reading</b> (the rest is shown)<ul>{items}</ul></div>'
    body = "".join(
        f'<section class="block" id="{s.id}"><h2>{html.escape(s.title)}</h2>{s.body}</section>' for s in sections
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_asset("report.css")}</style>
</head><body>
<header class="top"><h1>{html.escape(title)}</h1><div class="muted">{html.escape(subtitle)}</div>{notice}</header>
<nav class="toc">{toc}</nav>
<main>{body}
<section class="block" id="episodes"><h2>Episodes</h2>{_viewer(episodes)}</section>
</main>
<script type="application/json" id="ae-index">{episodes.index_json}</script>
<script type="application/json" id="ae-sample">{episodes.sample_json}</script>
<script nonce="{nonce}">{_asset("viewer.js")}</script>
</body></html>
"""
