"""The browser env's built-in sites: three small web apps over SQLite, each with its tasks.

- `shop`: search, product pages, a cart and a checkout with address and payment validation;
- `mail`: a webmail with an inbox in pages, reading, replying, labels, archive and search;
- `booking`: meeting-room booking with validation in the page, editing and cancelling.

Each site is two modules: ``shop`` (schema, seed, checks, tasks) and ``_shop_app`` (the
web app), and the same for ``mail`` and ``booking``. Each site module exposes ``SITE``
(an `agentenv.envs.browser.site.Site`), also exported here as `SHOP`, `MAIL` and
`BOOKING`; `SITES` maps their names to them. The apps need Starlette (the ``services``
extra). Shared pieces: `_web` (requests, forms), `_chrome` (the page around the
content: banner, navigation, search, error page, dialogs, forms, style), `_html`
(escaped markup, fields), `_verify` (answers and database changes for the checks),
`_golden` (golden-action constructors).
"""

from __future__ import annotations

from agentenv.envs.browser.apps.booking import SITE as BOOKING
from agentenv.envs.browser.apps.mail import SITE as MAIL
from agentenv.envs.browser.apps.shop import SITE as SHOP
from agentenv.envs.browser.site import Site

__all__ = ["BOOKING", "MAIL", "SHOP", "SITES"]

SITES: dict[str, Site] = {site.name: site for site in (SHOP, MAIL, BOOKING)}
