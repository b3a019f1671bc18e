"""The chrome every page of the browser env's sites shares: the document around the
content, the banner with the site's name, navigation and search, the error page, the
dialogs and the forms, and the one stylesheet and script.

A site describes its frame once, as a `Chrome`: its name, its navigation (a function of
the request's database, so a link can show a count beside it) and the label of its
search box, if it has one. Its handlers wrap their content with `Chrome.page`, and
`Chrome.error_page` renders whatever the app refuses. `post_form` is a form the server
checks (its errors listed first), `button_form` a form that is one button, and
`confirm_dialog` the modal that asks before a change that cannot be undone.

What the accessibility tree shows of every page is fixed here: one ``banner``, one
``navigation`` named "Main" (the current page's link ``aria-current``), an optional
``search``, the title as the one ``<h1>``, a ``status`` for notices, the ``main``
content, a modal ``dialog``, and a ``contentinfo``. Left out: per-site styles, and
more than one navigation bar.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from starlette.responses import HTMLResponse

from agentenv.envs.browser.apps._html import Html, error_summary, html, join

__all__ = [
    "APP_JS",
    "STYLE_CSS",
    "Chrome",
    "NavItem",
    "button_form",
    "confirm_dialog",
    "dialog",
    "post_form",
]


@dataclass(frozen=True)
class NavItem:
    label: str
    href: str
    note: str | None = None
    """Text shown after the link, outside it (a count), so the link's name never changes."""


@dataclass(frozen=True)
class Chrome:
    """A site's frame around every page (see the module docstring)."""

    site: str
    """The site's name: the banner, every title's suffix and the footer."""
    nav: Callable[[sqlite3.Connection | None], Sequence[NavItem]]
    """The navigation links; given None on the error page, where no database is open."""
    search: str | None = None
    """The search box's label, e.g. "Search products": a search form in the banner,
    sent as ``GET /search?q=``. None: no search form."""

    def page(
        self,
        db: sqlite3.Connection | None,
        title: str,
        main: Html,
        *,
        current: str | None = None,
        notice: str | None = None,
        modal: Html | None = None,
        query: str = "",
        status: int = 200,
    ) -> HTMLResponse:
        """A whole page: the banner, ``title`` as ``<h1>``, an optional ``notice``
        (``role=status``), ``main`` and an optional ``modal`` (a `dialog`). ``current`` is
        the navigation link to mark as this page; ``query`` fills the search box."""
        links = join(
            html(
                '<li><a href="{href}"{cur}>{label}</a>{note}</li>',
                href=item.href,
                cur=Html(' aria-current="page"') if item.href == current else Html(""),
                label=item.label,
                note=html(' <span class="note">{n}</span>', n=item.note) if item.note else Html(""),
            )
            for item in self.nav(db)
        )
        body = html(
            "<!doctype html>\n"
            '<html lang="en"><head><meta charset="utf-8"><title>{title} - {site}</title>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="icon" href="data:,"><link rel="stylesheet" href="/static/style.css">'
            '<script src="/static/app.js" defer></script></head>\n'
            '<body><header><p class="brand">{site}</p><nav aria-label="Main"><ul>{links}</ul></nav>{search}</header>\n'
            "<main><h1>{title}</h1>{notice}{main}</main>{dialog}\n"
            "<footer><p>{site} - a demo site for browser agents</p></footer></body></html>\n",
            site=self.site,
            title=title,
            links=links,
            search=self._search(query),
            notice=html('<p role="status" class="notice">{n}</p>', n=notice) if notice else Html(""),
            main=main,
            dialog=modal or Html(""),
        )
        return HTMLResponse(body, status_code=status)

    def error_page(self, status: int, message: str) -> HTMLResponse:
        """The page of a request the app refuses (`agentenv.envs.browser.apps._web.HttpError`, 404, 405)."""
        title = "Something went wrong" if status >= 500 else "Sorry"
        return self.page(None, title, html("<p>{m}</p>", m=message), status=status)

    def _search(self, query: str) -> Html:
        if self.search is None:
            return Html("")
        return html(
            '<form role="search" action="/search" method="get">'
            '<label for="q" class="visually-hidden">{label}</label>'
            '<input type="search" id="q" name="q" value="{q}"> <button type="submit">Search</button></form>',
            label=self.search,
            q=query,
        )


def post_form(action: str, *fields: Html, submit: str, errors: Mapping[str, str]) -> Html:
    """A form the server checks: sent by POST, ``novalidate`` (the browser's own checks
    would show other messages than the server's, in no accessibility tree), the summary of
    ``errors`` first, then ``fields``, then its submit button."""
    return html(
        '<form method="post" action="{action}" novalidate>{errs}{fields}<button type="submit">{submit}</button></form>',
        action=action,
        errs=error_summary(errors),
        fields=list(fields),
        submit=submit,
    )


def button_form(
    action: str,
    label: str,
    *,
    hidden: Mapping[str, object] | None = None,
    body: Html | None = None,
    name: str | None = None,
    disabled: bool = False,
) -> Html:
    """A POST form that is one button: ``hidden`` fields (what it acts on), ``body`` (a
    field, or none), then the button. ``name`` is the button's accessible name where its
    text alone would be ambiguous (a "Remove" on every row of a table)."""
    return html(
        '<form method="post" action="{action}">{hidden}{body}<button type="submit"{name}{disabled}>{label}</button>'
        "</form>",
        action=action,
        hidden=[html('<input type="hidden" name="{k}" value="{v}">', k=k, v=v) for k, v in (hidden or {}).items()],
        body=body or Html(""),
        name=html(' aria-label="{n}"', n=name) if name else Html(""),
        disabled=Html(" disabled") if disabled else Html(""),
        label=label,
    )


def dialog(key: str, title: str, body: Html) -> Html:
    """A modal dialog, open as the page loads (app.js makes it modal; without script it
    shows as a non-modal one)."""
    return html(
        '<dialog id="{key}" open data-modal aria-labelledby="{key}-title">'
        '<h2 id="{key}-title">{title}</h2>{body}</dialog>',
        key=key,
        title=title,
        body=body,
    )


def confirm_dialog(title: str, text: str, *, action: str, confirm: str, back: str, keep: str) -> Html:
    """The modal ``dialog=cancel`` opens: ``text`` (what the change does), a button that
    POSTs to ``action``, and a link back to ``back`` that changes nothing."""
    return dialog(
        "cancel",
        title,
        html(
            '<p>{text}</p>{yes}<p><a href="{back}">{keep}</a></p>',
            text=text,
            yes=button_form(action, confirm),
            back=back,
            keep=keep,
        ),
    )


STYLE_CSS = """\
body { font: 16px/1.45 system-ui, sans-serif; margin: 0; color: #1d2329; background: #f6f7f9; }
header { background: #24313f; color: #fff; padding: .5rem 1.5rem; display: flex; gap: 2rem; align-items: center; }
header a { color: #fff; }
.brand { font-weight: 700; margin: 0; }
nav ul { list-style: none; display: flex; gap: 1.25rem; margin: 0; padding: 0; }
a[aria-current="page"] { font-weight: 700; }
main { max-width: 60rem; margin: 1.5rem auto; background: #fff; padding: 1.5rem 2rem; border-radius: 6px; }
footer { text-align: center; color: #667; font-size: .85rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #dde; }
.field { display: flex; flex-direction: column; max-width: 28rem; gap: .2rem; }
.hint { color: #556; font-size: .85rem; }
.error { color: #b00020; font-weight: 600; }
.errors { border: 2px solid #b00020; padding: .5rem 1rem; margin-bottom: 1rem; }
.notice { background: #e6f4ea; padding: .5rem 1rem; }
.pager { margin-top: 1rem; display: flex; gap: 1rem; }
.unread { font-weight: 700; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
dialog { border: 1px solid #889; border-radius: 6px; padding: 1rem 1.5rem; }
dialog::backdrop { background: rgb(0 0 0 / 35%); }
button { cursor: pointer; }
"""

APP_JS = """\
// Dialogs the server renders open become modal (the rest of the page inert until closed).
document.querySelectorAll("dialog[data-modal]").forEach(function (d) {
  if (d.open) { d.close(); }
  d.showModal();
});
"""
