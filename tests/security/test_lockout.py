"""Sign-in lockout that an attacker cannot aim: wrong passwords slow down only the address that
sends them, never the account everywhere.

Each client below is bound to its own loopback source address (127.0.0.x), which is the address
the appliance sees: it trusts X-Forwarded-For from 127.0.0.1 only (uvicorn's default, for a
reverse proxy on the same machine), so these clients cannot choose another address by a header.
"""

from __future__ import annotations

import json
import math
import re
import time

import httpx
import pytest

from tests.integration.test_sign_in import error_text
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance, Client

MAX_FAILURES = 5
ADVICE = re.compile(r"Too many failed attempts from this address: try again in (\d+) (seconds?|minutes)\.")


# The root `appliance` has the default policy: 5 failures, then 30 s, doubled at each further
# failure up to 15 minutes.


@pytest.fixture(scope="module")
def quick(appliance_with):
    """Waits of 4, 8, 16 ... seconds, so a test can sit them out, and a loaded machine (the suite runs
    modules side by side) still answers the request after a failure within the first."""
    server = appliance_with(login_first_wait_seconds=4, login_max_wait_minutes=1)
    server.add_user("carol@example.com", "coordinator", "carol-password-1")
    return server


def client_from(appliance: Appliance, address: str) -> Client:
    return Client(appliance.url, transport=httpx.HTTPTransport(local_address=address))


def sign_in(client: Client, email: str, password: str, **headers: str) -> httpx.Response:
    return client.form("/login", {"email": email, "password": password}, headers=headers)


def fail(client: Client, email: str, times: int) -> httpx.Response:
    """``times`` wrong passwords, each checked and refused as such; the last answer."""
    for _ in range(times):
        response = sign_in(client, email, "a-wrong-guess")
        assert response.status_code == 400, error_text(response)
        assert error_text(response).startswith("That email and password do not match an active account.")
    return response


def told_to_wait(response: httpx.Response) -> int:
    """A refusal without a look at the password: 429, the wait in words and in Retry-After (equal)."""
    assert response.status_code == 429, response.status_code
    match = ADVICE.search(error_text(response))
    assert match, error_text(response)
    seconds = int(response.headers["retry-after"])
    # Waits of two minutes or more are told in minutes, rounded up.
    assert int(match.group(1)) == (seconds if match.group(2).startswith("second") else math.ceil(seconds / 60))
    return seconds


def audit(appliance: Appliance, action: str, target: str) -> list[dict]:
    rows = appliance.query(
        f"SELECT actor, address, after FROM audit_entry WHERE action = '{action}' AND target = '{target}' ORDER BY id"
    )
    return [{"actor": actor, "address": address, "after": json.loads(after)} for actor, address, after in rows]


def test_bad_passwords_from_one_address_do_not_lock_the_admin_out_elsewhere(appliance: Appliance):
    attacker = client_from(appliance, "127.0.0.2")
    last = fail(attacker, ADMIN_EMAIL, MAX_FAILURES)
    # The failure that starts the wait says so.
    assert ADVICE.search(error_text(last)), error_text(last)

    # From that address even the right password is refused unchecked, with the wait.
    wait = told_to_wait(sign_in(attacker, ADMIN_EMAIL, ADMIN_PASSWORD))
    assert 25 <= wait <= 30
    # A forged X-Forwarded-For from an address the appliance does not trust as a proxy changes nothing.
    told_to_wait(sign_in(attacker, ADMIN_EMAIL, ADMIN_PASSWORD, **{"X-Forwarded-For": "203.0.113.9"}))

    # The admin, from another address, signs in at once.
    admin = client_from(appliance, "127.0.0.3")
    assert sign_in(admin, ADMIN_EMAIL, ADMIN_PASSWORD).status_code == 303
    assert admin.get("/ui/admin/accounts").status_code == 200


def test_a_lockout_is_audited_once_however_often_it_refuses(appliance: Appliance):
    appliance.add_user("dora@example.com", "coordinator", "dora-password-1")
    attacker = client_from(appliance, "127.0.0.4")
    fail(attacker, "dora@example.com", MAX_FAILURES)
    for _ in range(10):
        told_to_wait(sign_in(attacker, "dora@example.com", "another-guess"))

    locked = audit(appliance, "sign-in.locked", "dora@example.com from 127.0.0.4")
    assert len(locked) == 1, locked
    assert locked[0]["actor"] == "dora@example.com" and locked[0]["address"] == "127.0.0.4"
    assert locked[0]["after"]["failures"] == MAX_FAILURES and 25 <= locked[0]["after"]["wait_seconds"] <= 30
    # The refusals during the wait checked no password and left no entry.
    failed = "SELECT count(*) FROM audit_entry WHERE action = 'sign-in.failed' AND actor = 'dora@example.com'"
    assert appliance.query(failed)[0][0] == MAX_FAILURES


def failed_then_told(client: Client, password: str) -> tuple[int, float]:
    """One more wrong password for carol, then the wait told to a sign-in with ``password``, and the
    seconds from the failure to that answer."""
    started = time.monotonic()
    fail(client, "carol@example.com", 1)
    wait = told_to_wait(sign_in(client, "carol@example.com", password))
    return wait, time.monotonic() - started


def test_the_wait_grows_with_each_failure_and_the_right_password_works_after_it(quick: Appliance):
    attacker = client_from(quick, "127.0.0.5")
    fail(attacker, "carol@example.com", MAX_FAILURES - 1)
    told = [failed_then_told(attacker, "carol-password-1")]
    for _ in range(2):
        time.sleep(told[-1][0] + 0.2)
        # The wait is over: the next wrong password is checked, refused, and doubles the wait.
        told.append(failed_then_told(attacker, "a-wrong-guess"))
    # What is left of the wait, in whole seconds rounded up: less by at most the time since the failure.
    assert all(full - took <= wait <= full for (wait, took), full in zip(told, [4, 8, 16], strict=True)), told

    # After the wait the right password from the same address is accepted, and forgets the failures.
    time.sleep(told[-1][0] + 0.2)
    assert sign_in(attacker, "carol@example.com", "carol-password-1").status_code == 303
    fresh = client_from(quick, "127.0.0.5")
    last = fail(fresh, "carol@example.com", MAX_FAILURES - 1)
    assert not ADVICE.search(error_text(last)), "the failures before the right password still counted"


def test_many_emails_from_one_address_are_refused_for_every_email(quick: Appliance):
    sprayer = client_from(quick, "127.0.0.6")
    for n in range(MAX_FAILURES * 4):
        fail(sprayer, f"user{n}@example.com", 1)
    told_to_wait(sign_in(sprayer, "carol@example.com", "carol-password-1"))
    assert audit(quick, "sign-in.locked", "(every email) from 127.0.0.6")
    # Others are not affected.
    assert sign_in(client_from(quick, "127.0.0.7"), "carol@example.com", "carol-password-1").status_code == 303


def lockout_rows(admin: Client) -> list[tuple[str, str]]:
    page = admin.get("/ui/admin/accounts").text
    return re.findall(r'class="lockout" data-email="([^"]*)" data-address="([^"]*)"', page)


def test_an_admin_sees_and_clears_a_lockout_and_the_address_may_try_again(appliance: Appliance, admin: Client):
    appliance.add_user("erin@example.com", "coordinator", "erin-password-1")
    erin = client_from(appliance, "127.0.0.8")
    fail(erin, "erin@example.com", MAX_FAILURES)
    told_to_wait(sign_in(erin, "erin@example.com", "erin-password-1"))
    assert ("erin@example.com", "127.0.0.8") in lockout_rows(admin)
    page = admin.get("/ui/admin/accounts").text
    row = page[page.index('class="lockout" data-email="erin@example.com"') :].split("</tr>")[0]
    assert f"<td>{MAX_FAILURES}</td>" in row and "s left)" in row

    form = {"email": "erin@example.com", "address": "127.0.0.8"}
    # Not without the form's CSRF token, and not by someone who is not an admin.
    assert admin.post("/ui/admin/lockouts/clear", data=form).status_code == 403
    coordinator = client_from(appliance, "127.0.0.9")
    appliance.add_user("frank@example.com", "coordinator", "frank-password-1")
    coordinator.login("frank@example.com", "frank-password-1")
    assert coordinator.form("/ui/admin/lockouts/clear", form).status_code == 403
    assert ("erin@example.com", "127.0.0.8") in lockout_rows(admin)

    # The htmx form gets the section back without the row, and the message.
    cleared = admin.form("/ui/admin/lockouts/clear", form, headers={"HX-Request": "true"})
    assert cleared.status_code == 200 and 'id="lockouts"' in cleared.text
    assert "The lockout of erin@example.com from 127.0.0.8 is cleared." in cleared.text
    assert 'data-email="erin@example.com"' not in cleared.text
    assert ("erin@example.com", "127.0.0.8") not in lockout_rows(admin)
    entry = audit(appliance, "sign-in.lockout-cleared", "erin@example.com from 127.0.0.8")
    assert [e["actor"] for e in entry] == [ADMIN_EMAIL]

    # The address may try again at once: the right password signs in.
    assert sign_in(erin, "erin@example.com", "erin-password-1").status_code == 303
    # Clearing it again is refused with a message (it is gone).
    again = admin.form("/ui/admin/lockouts/clear", form, follow_redirects=True)
    assert "There is no lockout of erin@example.com from 127.0.0.8" in again.text


def test_a_lockout_survives_a_restart(appliance: Appliance):
    attacker = client_from(appliance, "127.0.0.10")
    fail(attacker, "ghost@example.com", MAX_FAILURES)
    before = told_to_wait(sign_in(attacker, "ghost@example.com", "a-wrong-guess"))
    appliance.stop()
    appliance.start()
    after = told_to_wait(sign_in(client_from(appliance, "127.0.0.10"), "ghost@example.com", "a-wrong-guess"))
    assert 0 < after <= before
