"""Safe-by-default HTML for the browser env's apps: markup from templates whose values
are escaped unless they are already `Html`, and form fields that carry their label,
value and error where the accessibility tree shows them (the page around them, the
forms and the dialogs are `agentenv.envs.browser.apps._chrome`).

Every value a user or an agent typed reaches a page through `html` (escaped), so no
input adds markup or script to a page. Every control has a role and an accessible
name: inputs a ``<label>``, icon-like buttons an ``aria-label``; hints and errors are
linked with ``aria-describedby`` so they never change a control's name.

Left out: templates on disk, client-side rendering.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from urllib.parse import urlencode

__all__ = [
    "Html",
    "checkbox",
    "error_summary",
    "html",
    "join",
    "number_input",
    "pager",
    "radios",
    "select",
    "text_input",
    "textarea",
]


class Html(str):
    """Markup that is safe as it is: `html` inserts it without escaping."""

    __slots__ = ()


def html(template: str, /, **values: object) -> Html:
    """``template`` (``str.format`` fields) with every value escaped, but `Html` values,
    and lists of them, inserted as they are."""
    return Html(template.format_map({key: _safe(value) for key, value in values.items()}))


def join(parts: Iterable[Html], sep: str = "") -> Html:
    return Html(escape(sep).join(parts))


def _safe(value: object) -> str:
    if isinstance(value, Html):
        return value
    if isinstance(value, list | tuple):
        return "".join(_safe(v) for v in value)
    return escape(str(value), quote=True)


def pager(page_no: int, pages: int, href: str, extra: Mapping[str, str] | None = None) -> Html:
    """Previous/next links and "Page n of m"; ``href`` is the list's path, ``extra`` its other query values."""

    def link(n: int, label: str, rel: str) -> Html:
        query = urlencode({**(extra or {}), "page": str(n)})
        return html('<a href="{h}?{q}" rel="{rel}">{label}</a>', h=href, q=query, rel=rel, label=label)

    prev = link(page_no - 1, "Previous page", "prev") if page_no > 1 else Html("")
    nxt = link(page_no + 1, "Next page", "next") if page_no < pages else Html("")
    return html(
        '<nav class="pager" aria-label="Pagination">{prev} <span>Page {n} of {m}</span> {nxt}</nav>',
        prev=prev,
        n=page_no,
        m=pages,
        nxt=nxt,
    )


def error_summary(errors: Mapping[str, str]) -> Html:
    """The form's errors as a list the page announces (``role=alert``)."""
    if not errors:
        return Html("")
    items = join(html("<li>{e}</li>", e=message) for message in errors.values())
    return html(
        '<div class="errors" role="alert"><h2>Please correct the following</h2><ul>{items}</ul></div>', items=items
    )


def _described(name: str, hint: str | None, error: str | None) -> tuple[Html, Html]:
    """The ``aria-describedby``/``aria-invalid`` attributes and the hint and error elements of a field."""
    ids = [f"{name}-hint"] if hint else []
    if error:
        ids.append(f"{name}-error")
    attrs = html(' aria-describedby="{ids}"', ids=" ".join(ids)) if ids else Html("")
    if error:
        attrs = Html(attrs + ' aria-invalid="true"')
    notes = Html(
        (html('<span class="hint" id="{n}-hint">{h}</span>', n=name, h=hint) if hint else "")
        + (html('<span class="error" id="{n}-error">{e}</span>', n=name, e=error) if error else "")
    )
    return attrs, notes


def text_input(
    name: str,
    label: str,
    value: str = "",
    *,
    error: str | None = None,
    hint: str | None = None,
    kind: str = "text",
    autocomplete: str = "off",
    key: str | None = None,
) -> Html:
    """A labelled ``<input>`` (``kind``: text, email, search, tel); ``key`` is its id when
    a page has several fields of one name."""
    key = key or name
    attrs, notes = _described(key, hint, error)
    return html(
        '<p class="field"><label for="{key}">{label}</label>'
        '<input id="{key}" name="{name}" type="{kind}" value="{value}" autocomplete="{ac}"{attrs}>{notes}</p>',
        key=key,
        name=name,
        label=label,
        kind=kind,
        value=value,
        ac=autocomplete,
        attrs=attrs,
        notes=notes,
    )


def number_input(
    name: str,
    label: str,
    value: str,
    *,
    lo: int,
    hi: int,
    error: str | None = None,
    key: str | None = None,
    label_hidden: bool = False,
) -> Html:
    """A labelled ``<input type=number>`` (role ``spinbutton``)."""
    key = key or name
    attrs, notes = _described(key, None, error)
    return html(
        '<p class="field"><label for="{key}"{hidden}>{label}</label>'
        '<input id="{key}" name="{name}" type="number" inputmode="numeric" min="{lo}" max="{hi}" '
        'value="{value}"{attrs}>{notes}</p>',
        key=key,
        name=name,
        label=label,
        hidden=Html(' class="visually-hidden"') if label_hidden else Html(""),
        lo=lo,
        hi=hi,
        value=value,
        attrs=attrs,
        notes=notes,
    )


def textarea(name: str, label: str, value: str = "", *, error: str | None = None, rows: int = 8) -> Html:
    attrs, notes = _described(name, None, error)
    return html(
        '<p class="field"><label for="{name}">{label}</label>'
        '<textarea id="{name}" name="{name}" rows="{rows}"{attrs}>{value}</textarea>{notes}</p>',
        name=name,
        label=label,
        rows=rows,
        value=value,
        attrs=attrs,
        notes=notes,
    )


def select(
    name: str,
    label: str,
    options: Sequence[tuple[str, str]],
    selected: str = "",
    *,
    error: str | None = None,
    hint: str | None = None,
) -> Html:
    """A labelled ``<select>`` (role ``combobox``); ``options`` are ``(value, label)``."""
    attrs, notes = _described(name, hint, error)
    opts = join(
        html(
            '<option value="{v}"{sel}>{label}</option>',
            v=value,
            sel=Html(" selected") if value == selected else Html(""),
            label=text,
        )
        for value, text in options
    )
    return html(
        '<p class="field"><label for="{name}">{label}</label><select id="{name}" name="{name}"{attrs}>{opts}</select>'
        "{notes}</p>",
        name=name,
        label=label,
        opts=opts,
        attrs=attrs,
        notes=notes,
    )


def radios(
    name: str, legend: str, options: Sequence[tuple[str, str, str]], selected: str, *, error: str | None = None
) -> Html:
    """A fieldset of labelled radio buttons; ``options`` are ``(value, label, description)``."""
    attrs, notes = _described(name, None, error)
    items = join(
        html(
            '<p class="choice"><input type="radio" id="{name}-{v}" name="{name}" value="{v}"{chk} '
            'aria-describedby="{name}-{v}-desc"><label for="{name}-{v}">{label}</label> '
            '<span class="hint" id="{name}-{v}-desc">{desc}</span></p>',
            name=name,
            v=value,
            chk=Html(" checked") if value == selected else Html(""),
            label=text,
            desc=desc,
        )
        for value, text, desc in options
    )
    return html(
        "<fieldset{attrs}><legend>{legend}</legend>{items}{notes}</fieldset>",
        legend=legend,
        items=items,
        attrs=attrs,
        notes=notes,
    )


def checkbox(name: str, value: str, label: str, *, checked: bool = False, key: str) -> Html:
    return html(
        '<input type="checkbox" id="{key}" name="{name}" value="{value}"{chk}><label for="{key}">{label}</label>',
        key=key,
        name=name,
        value=value,
        chk=Html(" checked") if checked else Html(""),
        label=label,
    )
