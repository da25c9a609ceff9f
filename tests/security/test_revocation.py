"""A credential ends everything it opened: revoking a token or an enrolment link, disabling an
account, changing its role or signing out closes the worker connections made with it at once
(close 4003 with the reason the worker page shows), and its old cookie opens nothing afterwards:
not the WebSocket, not the TURN credentials of GET /worker/ice-servers.

Each worker tab here is a simulated one (tests/sim_workers.py) holding the cookie a real tab
would have: a worker cookie from POST /worker/session or an enrolment link, or a dashboard cookie.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3

import pytest
from websockets.exceptions import InvalidStatus

from tests.sim_workers import SimWorker, cookie_of
from tests.support import Appliance, Client, running_on_postgres

WORKER_COOKIE = "peermr_worker"
CLOSE_SESSION_ENDED = 4003
THIRTY_DAYS = 30 * 24 * 3600


@pytest.fixture(scope="module")
def people(appliance: Appliance) -> dict[str, Client]:
    """Signed-in dashboards, by name; each account's password is its name then "-password-1"."""
    clients = {}
    for name, role in (("cora", "coordinator"), ("dora", "coordinator"), ("erin", "admin"), ("finn", "worker")):
        appliance.add_user(f"{name}@example.com", role, f"{name}-password-1")
        clients[name] = signed_in(appliance, name)
    return clients


def signed_in(appliance: Appliance, name: str) -> Client:
    client = appliance.client()
    client.login(f"{name}@example.com", f"{name}-password-1")
    return client


def new_token(appliance: Appliance, name: str) -> tuple[str, int]:
    """An API token of ``name`` (as `peermr token create` prints it) and its id."""
    result = appliance.cli("token", "create", f"{name}@example.com")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip().split()[-1]
    [(token_id,)] = appliance.query(f"SELECT id FROM accounts_api_token WHERE prefix = '{token[:12]}'")
    return token, token_id


def join(appliance: Appliance, token: str) -> tuple[str, int]:
    """What /worker/start does with ``token``: the worker cookie it gets, and that cookie's max-age."""
    browser = appliance.client()
    answer = browser.post("/worker/session", json={"token": token}, headers={"x-csrftoken": browser.csrf()})
    assert answer.status_code == 204, answer.text
    return f"{WORKER_COOKIE}={browser.cookies[WORKER_COOKIE]}", max_age(answer.headers.get_list("set-cookie"))


def max_age(set_cookies: list[str]) -> int:
    [header] = [h for h in set_cookies if h.startswith(WORKER_COOKIE + "=")]
    return int(re.search(r"Max-Age=(\d+)", header, re.I).group(1))


def account_id(admin: Client, name: str) -> str:
    return re.search(rf'id="account-(\d+)" data-email="{name}@example.com"', admin.get("/ui/admin/accounts").text)[1]


def new_link(appliance: Appliance, admin: Client, name: str, valid_hours: int = 24) -> tuple[str, int]:
    """An enrolment link for ``name``'s account (its token) and its id."""
    created = admin.form(
        "/ui/admin/enrolment",
        {"account_id": account_id(admin, name), "label": name, "valid_hours": str(valid_hours)},
    )
    token = re.search(r'id="new-link">[^<]*/enrol/([^<]+)<', created.text).group(1)
    # The newest link is listed first.
    link_id = int(re.search(r'action="/ui/admin/enrolment/(\d+)/revoke"', created.text).group(1))
    return token, link_id


async def tab(appliance: Appliance, cookie: str) -> SimWorker:
    return await SimWorker(appliance.url, cookie).start()


async def closed_by_appliance(worker: SimWorker) -> tuple[int, str]:
    """The code and reason of the appliance's close, which must come within seconds."""
    await asyncio.wait_for(worker.ws.wait_closed(), 5)
    return worker.ws.close_code, worker.ws.close_reason


async def still_working(worker: SimWorker) -> bool:
    return (await worker.request({"type": "pause", "reason": "checking"}, timeout=5))["state"] == "paused"


async def assert_dead(appliance: Appliance, cookie: str) -> None:
    """The cookie opens neither a new connection nor new TURN credentials."""
    with pytest.raises(InvalidStatus):
        await tab(appliance, cookie)
    refused = appliance.client().get("/worker/ice-servers", headers={"Cookie": cookie})
    assert refused.status_code == 401, refused.text
    assert "sign-in is not valid" in refused.json()["detail"]


def in_fleet(admin: Client, worker: SimWorker) -> bool:
    return f'data-worker="{worker.worker_id}"' in admin.get("/ui/workers/live").text


def disconnections(appliance: Appliance) -> list[tuple[str, str, str]]:
    return appliance.query("SELECT actor, target, after FROM audit_entry WHERE action = 'worker.disconnected'")


async def test_revoking_a_token_ends_the_worker_tabs_that_joined_with_it(appliance, admin, people):
    token, token_id = new_token(appliance, "cora")
    other, _ = new_token(appliance, "cora")
    cookies = [join(appliance, token)[0] for _ in range(2)]
    joined = [await tab(appliance, cookie) for cookie in cookies]
    bystander = await tab(appliance, join(appliance, other)[0])
    assert appliance.client().get("/worker/ice-servers", headers={"Cookie": cookies[0]}).json()["iceServers"]

    assert people["cora"].form(f"/ui/tokens/{token_id}/revoke").status_code == 303

    for worker in joined:
        assert await closed_by_appliance(worker) == (CLOSE_SESSION_ENDED, "the token this tab joined with was revoked")
        assert not in_fleet(admin, worker)
    assert await still_working(bystander)
    for cookie in cookies:
        await assert_dead(appliance, cookie)
    refused = appliance.client()
    assert (
        refused.post("/worker/session", json={"token": token}, headers={"x-csrftoken": refused.csrf()}).status_code
        == 401
    )
    # Who revoked it is who disconnected them, with the reason.
    audited = [(actor, target) for actor, target, after in disconnections(appliance) if "token this tab" in after]
    assert sorted(audited) == sorted(("cora@example.com", f"worker {w.worker_id} of cora@example.com") for w in joined)
    await bystander.close()


async def test_revoking_an_enrolment_link_ends_the_tabs_that_joined_with_it(appliance, admin, people):
    token, link_id = new_link(appliance, admin, "finn")
    browsers = [appliance.client() for _ in range(2)]
    for browser in browsers:
        assert browser.form(f"/enrol/{token}").status_code == 303
    joined = [await tab(appliance, cookie_of(browser)) for browser in browsers]
    # Finn's own signed-in tab did not come from the link: it stays.
    own = await tab(appliance, cookie_of(people["finn"]))

    assert admin.form(f"/ui/admin/enrolment/{link_id}/revoke").status_code == 303

    for worker in joined:
        reason = "the enrolment link this tab joined with was revoked"
        assert await closed_by_appliance(worker) == (CLOSE_SESSION_ENDED, reason)
    assert await still_working(own)
    for browser in browsers:
        await assert_dead(appliance, cookie_of(browser))
        assert browser.get("/worker").status_code == 303  # the page sends it to sign in
    await own.close()


async def test_disabling_an_account_ends_every_tab_of_it(appliance, admin, people):
    dashboard = signed_in(appliance, "dora")
    cookies = [cookie_of(dashboard), join(appliance, new_token(appliance, "dora")[0])[0]]
    token, _ = new_link(appliance, admin, "dora")
    enrolled = appliance.client()
    enrolled.form(f"/enrol/{token}")
    cookies.append(cookie_of(enrolled))
    tabs = [await tab(appliance, cookie) for cookie in cookies]
    bystander = await tab(appliance, cookie_of(people["cora"]))
    dora_id = account_id(admin, "dora")

    assert admin.form(f"/ui/admin/accounts/{dora_id}/active", {"active": "false"}).status_code == 303

    for worker in tabs:
        assert await closed_by_appliance(worker) == (CLOSE_SESSION_ENDED, "the account was disabled")
    assert await still_working(bystander)
    # Enabled again, the account has to sign in and join again: the old cookies stay dead.
    assert admin.form(f"/ui/admin/accounts/{dora_id}/active", {"active": "true"}).status_code == 303
    for cookie in cookies:
        await assert_dead(appliance, cookie)
    await bystander.close()


async def test_a_role_change_ends_the_dashboard_sessions_and_their_tabs(appliance, admin, people):
    erin = people["erin"]
    assert erin.get("/ui/admin/accounts").status_code == 200
    dashboard_tab = await tab(appliance, cookie_of(erin))
    # A worker session came from a token, which the role does not change: its tab goes on.
    token_tab = await tab(appliance, join(appliance, new_token(appliance, "erin")[0])[0])
    erin_id = account_id(admin, "erin")

    assert admin.form(f"/ui/admin/accounts/{erin_id}/role", {"role": "coordinator"}).status_code == 303

    reason = "the account's role changed to coordinator: sign in again"
    assert await closed_by_appliance(dashboard_tab) == (CLOSE_SESSION_ENDED, reason)
    assert await still_working(token_tab)
    # The open dashboard holds no admin power any more: it is sent to sign in, and signed in again it is a
    # coordinator's.
    assert erin.get("/ui/admin/accounts").status_code == 303
    await assert_dead(appliance, cookie_of(erin))
    assert signed_in(appliance, "erin").get("/ui/admin/accounts").status_code == 403
    await token_tab.close()


async def test_signing_out_ends_the_tab_opened_with_that_session(appliance):
    appliance.add_user("gus@example.com", "coordinator", "gus-password-1")
    gus, elsewhere = signed_in(appliance, "gus"), signed_in(appliance, "gus")
    signed_out_tab, other_tab = await tab(appliance, cookie_of(gus)), await tab(appliance, cookie_of(elsewhere))
    cookie = cookie_of(gus)

    assert gus.form("/logout").status_code == 303

    assert await closed_by_appliance(signed_out_tab) == (CLOSE_SESSION_ENDED, "signed out")
    assert await still_working(other_tab)
    await assert_dead(appliance, cookie)
    await other_tab.close()


def test_a_worker_cookie_lasts_no_longer_than_its_enrolment_link(appliance, admin, people):
    token, link_id = new_link(appliance, admin, "finn", valid_hours=1)
    browser = appliance.client()
    joined = browser.form(f"/enrol/{token}")
    assert 3500 < max_age(joined.headers.get_list("set-cookie")) <= 3600
    # The same through /worker/start (what `peermr worker --token enr_...` opens).
    assert 3500 < join(appliance, token)[1] <= 3600
    [(link_expiry,)] = appliance.query(f"SELECT expires_at FROM accounts_enrolment_link WHERE id = {link_id}")
    expiries = appliance.query(f"SELECT expires_at FROM accounts_session WHERE enrolment_link = {link_id}")
    assert len(expiries) == 2 and all(expiry <= link_expiry for (expiry,) in expiries)
    # An API token has no expiry: its worker cookie lasts the 30 days of any session.
    assert join(appliance, new_token(appliance, "finn")[0])[1] == THIRTY_DAYS


@pytest.mark.skipif(running_on_postgres(), reason="ages a session in the SQLite file directly")
def test_a_session_used_later_still_ends_with_its_enrolment_link(appliance, admin, people):
    token, link_id = new_link(appliance, admin, "finn", valid_hours=1)
    browser = appliance.client()
    browser.form(f"/enrol/{token}")
    # Last seen long ago: the next request slides its expiry, as use does, but never past the link's.
    with contextlib.closing(sqlite3.connect(appliance.data_dir / "peermr.sqlite3")) as db, db:
        db.execute(
            "UPDATE accounts_session SET last_seen_at = '2000-01-01 00:00:00+00:00' WHERE enrolment_link = ?",
            (link_id,),
        )
    assert browser.get("/worker").status_code == 200
    [(link_expiry,)] = appliance.query(f"SELECT expires_at FROM accounts_enrolment_link WHERE id = {link_id}")
    [(expiry, seen)] = appliance.query(
        f"SELECT expires_at, last_seen_at FROM accounts_session WHERE enrolment_link = {link_id}"
    )
    assert seen > "2000-01-02" and expiry == link_expiry
