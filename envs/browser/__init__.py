"""The browser env: agents using a real browser on local web apps with real backends.

    import agentenv
    env = agentenv.make("browser-shop-v0")   # or browser-mail-v0, browser-booking-v0, browser-v0
    obs, info = env.reset(seed=0)             # the first reset launches Chromium and the site's server

A site is an ASGI app over SQLite, its seed, named checks and tasks (`Site`, site.py);
`BrowserEnv` (env.py) serves it per episode (server.py), drives Chromium through
Playwright from one owner thread (driver.py, session.py) and shows the page as an
accessibility tree with refs (view.py). `oracle` replays a task's golden actions
through the page view. `static_site` turns HTML pages that score themselves into a
site. See docs/browser.md. Nothing starts at import; `shutdown` stops the browser
and the site servers (atexit does it too).
"""

from agentenv.envs.browser.driver import shutdown as _shutdown_browser
from agentenv.envs.browser.env import BrowserEnv, BrowserPayload, BrowserState, load_site
from agentenv.envs.browser.oracle import oracle
from agentenv.envs.browser.server import shutdown_all as _shutdown_servers
from agentenv.envs.browser.site import Action, Site, SiteTask, Target, site_task
from agentenv.envs.browser.static import PAGE_REWARD, static_site

__all__ = [
    "PAGE_REWARD",
    "Action",
    "BrowserEnv",
    "BrowserPayload",
    "BrowserState",
    "Site",
    "SiteTask",
    "Target",
    "load_site",
    "oracle",
    "shutdown",
    "site_task",
    "static_site",
]


def shutdown() -> None:
    """Close the browser and stop every site server of this process."""
    _shutdown_browser()
    _shutdown_servers()
