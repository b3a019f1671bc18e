"""Every element a person can click gets a ref of its own (clickables.py), inline ones
included, and nothing else does: a link inside a paragraph, an ``<a>`` without ``href``, a
span with an ``onclick``, "Reply" and "Forward" inside one container, a ``cursor: pointer``
div with a listener, the inner element of a nest where only it listens. Each is clicked
through `step` and does what it should."""

from __future__ import annotations

from typing import Any

import pytest

from agentenv.envs.browser import Site, SiteTask, static_site
from agentenv.envs.browser.clickables import MAX_LISTENED
from agentenv.envs.browser.view import element_lines
from tests.envs.browser.test_env import ref, step, text_of

pytestmark = pytest.mark.slow  # a browser

PAGE = """<!doctype html><title>Clicks</title>
<style>.alink { color: blue; text-decoration: underline; cursor: pointer; }</style>
<p id="out">Nothing clicked</p>
<p>Read the <a href="/terms.html">terms</a> and the <a href="/privacy.html">privacy policy</a> first.</p>
<p>Or <a onclick="say('the link without href')">this link</a>
  or <span class="alink" onclick="say('the styled span')">that one</span>.</p>
<span onclick="say('the lonely span')">Lonely span</span>
<div class="message"><b>From Ada</b> <span onclick="say('Reply')">Reply</span>
  <span onclick="say('Forward')">Forward</span> <span>Delete</span></div>
<div id="card" style="cursor: pointer">Open the card</div>
<div><div><span id="inner">Only the inner one</span></div></div>
<p>Plain text with <b>bold</b> and <i>italic</i>.</p>
<script>
function say(what) { document.getElementById('out').textContent = 'Clicked ' + what; }
document.getElementById('card').addEventListener('click', () => say('the card'));
document.getElementById('inner').addEventListener('mousedown', () => say('the inner one'));
document.body.addEventListener('click', () => 0);  // a page-wide delegated handler: no ref for the body
document.addEventListener('click', () => 0);
</script>{extra}"""
TERMS = "<!doctype html><title>Terms</title><h1>Terms</h1>"
SABOTAGE = """<script>
// Page script that breaks what a marking script in the page's own world would call.
Element.prototype.setAttribute = function () { throw new Error('no'); };
Element.prototype.getAttribute = () => 'presentation';
Element.prototype.matches = () => true;
window.getComputedStyle = () => ({cursor: 'auto'});
Array.from = () => [];
</script>"""
TASK = SiteTask(id="look", prompt="Click things.", golden=[], check="page")
CLICKABLE = [
    ("link", "terms"),
    ("link", "privacy policy"),
    ("link", "this link"),
    ("button", "that one"),
    ("button", "Lonely span"),
    ("button", "Reply"),
    ("button", "Forward"),
    ("button", "Open the card"),
    ("button", "Only the inner one"),
]
SAID = {
    "this link": "the link without href",
    "that one": "the styled span",
    "Lonely span": "the lonely span",
    "Reply": "Reply",
    "Forward": "Forward",
    "Open the card": "the card",
    "Only the inner one": "the inner one",
}


def site(extra: str = "") -> Site:
    pages = {"/": PAGE.replace("{extra}", extra), "/terms.html": TERMS, "/privacy.html": TERMS}
    return static_site("clicks", pages, tasks=[TASK])


def offered(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    view = next(text for m in reversed(messages) if "URL: " in (text := text_of(m)))
    return [(role, name) for _, role, name in element_lines(view)]


def test_each_clickable_element_has_one_ref_and_nothing_else_has_one(make_env):
    env = make_env(site())
    obs, _ = env.reset(seed=0)
    assert offered(obs) == CLICKABLE
    text = text_of(obs[-1])
    assert "Delete" in text and "From Ada" in text and "Plain text with" in text  # shown, as text


@pytest.mark.parametrize("name", list(SAID))
def test_clicking_an_element_without_a_role_does_what_it_should(make_env, name):
    env = make_env(site())
    obs, _ = env.reset(seed=0)
    obs, _, _, _, info = step(env, "click", ref=ref(obs, "button" if name != "this link" else "link", name))
    assert info["error"] is None, info
    assert f"Clicked {SAID[name]}" in text_of(obs[-1])


def test_an_inline_link_of_a_paragraph_is_followed(make_env):
    env = make_env(site())
    obs, _ = env.reset(seed=0)
    step(env, "click", ref=ref(obs, "link", "privacy policy"))
    assert env.state.url == "/privacy.html"


def test_the_page_gets_its_own_roles_back_and_refs_stay(make_env):
    env = make_env(site())
    obs, _ = env.reset(seed=0)
    reply = ref(obs, "button", "Reply")
    roles = env._run(lambda s: s.evaluate("document.querySelectorAll('[role]').length"), 10, "reading")
    assert roles == 0  # the marks are gone once the page has been looked at
    obs, *_ = step(env, "scroll", direction="down")
    assert ref(obs, "button", "Reply") == reply


def test_page_script_cannot_hide_its_clickable_elements_from_the_view(make_env):
    # The marking runs in a world of its own: prototypes the page broke are not the ones it calls.
    env = make_env(site(SABOTAGE))
    obs, _ = env.reset(seed=0)
    assert offered(obs) == CLICKABLE
    obs, *_ = step(env, "click", ref=ref(obs, "button", "Forward"))
    assert "Clicked Forward" in text_of(obs[-1])


def test_a_page_with_thousands_of_listeners_is_still_shown(make_env):
    rows = "".join(f"<div onclick=\"say('row {i}')\">Row {i}</div>" for i in range(3000))
    page = f"<title>Many</title><p id=out></p>{rows}<script>function say(w) {{ out.textContent = w }}</script>"
    env = make_env(static_site("many", {"/": page}, tasks=[TASK]))
    env.reset(seed=0)
    buttons = [node.name for node in env._session.view.nodes.values()]
    assert buttons == [f"Row {i}" for i in range(MAX_LISTENED)]  # the first ones, in document order: bounded


def test_a_clickable_span_inside_a_frame_has_a_ref(make_env):
    frame = "<span onclick=&quot;this.textContent = 'Clicked in the frame'&quot;>In the frame</span>"
    page = f'<title>Framed</title><iframe srcdoc="{frame}"></iframe>'
    env = make_env(static_site("framed", {"/": page}, tasks=[TASK]))
    obs, _ = env.reset(seed=0)
    obs, *_ = step(env, "click", ref=ref(obs, "button", "In the frame"))
    assert "Clicked in the frame" in text_of(obs[-1])
