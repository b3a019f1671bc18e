"""Static HTML pages that score themselves: a `Site` whose reward is a function the page defines.

For MiniWoB-style tasks, where the page's own script knows whether the task was done:

    site = static_site("clicks", {"/": "<button onclick='window.done=1'>Go</button>"
                                       "<script>window.agentenvReward = () => window.done || 0</script>"},
                       tasks=[SiteTask(id="go", prompt="Press Go.", golden=[...], check="page")])
    env = BrowserEnv(site)

The pages are served as they are (a mapping of path to HTML, or a folder of files);
the database is empty and unused. As the episode ends the env evaluates the site's
fixed expression (default ``window.agentenvReward()``) on the page and takes its
value, a number in [0, 1], as the task reward: the expression is the site author's,
never the agent's, which can only click, type and navigate. When the tasks start on
different pages, each is scored on its own start page only (or its ``end_pages``): an
agent given a hard task could otherwise finish on an easy task's page and be paid its
reward. A folder site serves every file in it, scripts included: the agent can open
them and read them as text, so a page whose script holds the answer gives it away. The page's script state
is not part of a snapshot (session.py), so a restored episode starts that page anew.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentenv.envs.browser.site import Site, SiteTask

__all__ = ["PAGE_REWARD", "static_site"]

PAGE_REWARD = "window.agentenvReward()"


def static_site(
    name: str,
    pages: Mapping[str, str] | Path | str,
    tasks: Sequence[SiteTask],
    *,
    reward: str = PAGE_REWARD,
) -> Site:
    """A `Site` serving ``pages`` (``{"/path": html}``, or a folder whose ``index.html`` is ``/``)
    whose task reward is the value of ``reward`` on the final page."""
    served: Mapping[str, str] | Path
    if isinstance(pages, Mapping):
        served = dict(pages)
        for path in pages:
            if not path.startswith("/"):
                raise ValueError(f"static_site {name!r}: page paths start with '/', got {path!r}")
    else:
        served = Path(pages)
        if not served.is_dir():
            raise ValueError(f"static_site {name!r}: {served} is not a folder")
    return Site(
        name=name,
        schema="",
        seed=_no_rows,
        create_app=lambda _db_path: _app(served),
        checks={},
        tasks=list(tasks),
        page_reward=reward,
    )


def _no_rows(db: sqlite3.Connection, seed: int) -> None:
    """A static site keeps nothing in its database."""


def _app(pages: Mapping[str, str] | Path) -> Any:
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse, PlainTextResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    if isinstance(pages, Path):
        return Starlette(routes=[Mount("/", StaticFiles(directory=pages, html=True))])

    async def page(request: Any) -> Response:
        html = pages.get(request.url.path)
        if html is None:
            return PlainTextResponse("Not found", status_code=404)
        return HTMLResponse(html)

    return Starlette(routes=[Route("/{path:path}", page)])
