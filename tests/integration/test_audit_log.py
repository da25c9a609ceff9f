"""The audit log: every action of the authorization matrix leaves an entry naming who, what, from
where, before and after; the hash chain shows a changed, deleted or inserted row (`peermr audit
verify`); pruning keeps the rest verifiable; the admin page filters and exports."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import json
import sqlite3
from collections import Counter

import pytest

from appliance import db
from appliance.accounts import users
from appliance.audit import service
from appliance.audit.context import acting
from appliance.audit.tables import AuditEntry
from appliance.billing import prices, settlement
from appliance.billing.tables import Payout
from appliance.config import load_settings
from tests.integration.test_authorization_matrix import CASES, callers, perform  # noqa: F401 (a fixture)
from tests.integration.test_billing_stripe import AFTER_MARCH, MARCH, UTC, connect, worker_earnings  # noqa: F401
from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import SimWorker, cookie_of
from tests.support import ADMIN_EMAIL, running_on_postgres

LOCAL = "127.0.0.1"


def entries(appliance) -> list[dict]:
    rows = appliance.query("SELECT id, actor, action, target, address, before, after FROM audit_entry ORDER BY id")
    names = ("id", "actor", "action", "target", "address", "before", "after")
    return [dict(zip(names, row, strict=True)) for row in rows]


def entry_count(appliance) -> int:
    return appliance.query("SELECT count(*) FROM audit_entry")[0][0]


# Requests of the matrix that succeed without changing anything, so they leave no entry (those for which the
# test signs in or enrols a fresh caller first always find that caller's entries).
NO_CHANGE = {
    ("POST", "/ui/workers/{worker_id:str}/disconnect"): "no such worker is connected",
    ("POST", "/ui/cloud/test"): "a connection test reads",
    ("POST", "/ui/cloud/cors"): "nothing saved: no bucket to set CORS on",
    ("POST", "/ui/cloud/remove"): "nothing saved to remove",
    ("POST", "/ui/payments/onboard"): "Stripe is not configured: nothing to onboard to",
    ("POST", "/ui/admin/billing/invoices/{invoice_id:int}/retry"): "no such invoice",
    ("POST", "/ui/admin/billing/payouts/{payout_id:int}/retry"): "no such payout",
    ("POST", "/ui/admin/lockouts/clear"): "no such lockout",
}


def changed(method: str, response) -> bool:
    """A state-changing request that was answered as done (not refused, not sent to sign in first)."""
    if method not in ("POST", "PUT", "DELETE") or response is None or response.status_code >= 400:
        return False
    return not response.headers.get("location", "").startswith("/login?next=")


@pytest.fixture(scope="module")
def matrix_changes(appliance, callers):  # noqa: F811
    """Every request of the authorization matrix, made once on this module's appliance: for each, whether
    it changed something (by its answer) and how many audit entries it added."""
    made = {}
    for method, route, caller in CASES:
        before = entry_count(appliance)
        response = perform(appliance, callers, method, route, caller)
        made[(method, route, caller)] = (changed(method, response), entry_count(appliance) - before)
    return made


@pytest.fixture(scope="module")
def matrix_done(appliance, matrix_changes):
    """The entries once the matrix is done."""
    return entries(appliance)


def test_every_action_of_the_matrix_is_recorded(matrix_done, matrix_changes):
    # Each request that changed something left an entry: a new route that changes state unrecorded fails here.
    unrecorded = [
        case for case, (done, added) in matrix_changes.items() if done and not added and case[:2] not in NO_CHANGE
    ]
    assert not unrecorded, f"successful changes with no audit entry: {unrecorded}"

    seen = Counter((e["actor"], e["action"]) for e in matrix_done)
    command = next(e["actor"] for e in matrix_done if e["actor"].startswith("peermr command ("))
    expected = {
        ("appliance", "account.created"): 1,  # the first admin, at the first start
        # The fixture: three accounts added with `peermr user add`, three tokens with `peermr token create`.
        (command, "account.created"): 3,
        (command, "token.created"): 3,
        # Sign-ins of the fixture's clients and of the fresh clients that sign out or enrol (matrix's
        # OWN_CREDENTIAL_CHANGES), for worker, coordinator and admin.
        (ADMIN_EMAIL, "sign-in"): 3,
        ("worker@example.com", "sign-in"): 3,
        ("coordinator@example.com", "sign-in"): 3,
        (ADMIN_EMAIL, "sign-out"): 1,
        ("worker@example.com", "sign-out"): 1,
        ("coordinator@example.com", "sign-out"): 1,
        # POST /login with a wrong password, once per kind of caller.
        ("nobody@example.com", "sign-in.failed"): 5,
        # The fifth makes that email wait at that address: one entry, however many attempts it then refuses.
        ("nobody@example.com", "sign-in.locked"): 1,
        # POST /worker/session with a token that is not valid: by whoever calls (anonymous and enrolled
        # browsers are anonymous there).
        ("anonymous", "sign-in.failed"): 2,
        ("worker@example.com", "sign-in.failed"): 1,
        ("coordinator@example.com", "sign-in.failed"): 1,
        (ADMIN_EMAIL, "sign-in.failed"): 1,
        (ADMIN_EMAIL, "enrolment.created"): 2,
        (ADMIN_EMAIL, "enrolment.revoked"): 1,
        # Browsers enrolling without an account: the fixture's, the anonymous caller's POST /enrol, and the
        # fresh enrolled callers of POST /logout and POST /enrol (twice for the latter: to enrol, then the case).
        ("anonymous", "enrolment.used"): 5,
        # One token per signed-in caller (POST /ui/tokens) and the admin's own in the fixture.
        (ADMIN_EMAIL, "token.created"): 2,
        ("worker@example.com", "token.created"): 1,
        ("coordinator@example.com", "token.created"): 1,
        (ADMIN_EMAIL, "token.revoked"): 1,
        (ADMIN_EMAIL, "account.role"): 1,
        (ADMIN_EMAIL, "account.active"): 1,
        (ADMIN_EMAIL, "account.password_reset"): 1,
        (ADMIN_EMAIL, "settings.relay_peers"): 1,
        (ADMIN_EMAIL, "settings.fetch_origins"): 1,
        (ADMIN_EMAIL, "settings.scheduling"): 1,
        (ADMIN_EMAIL, "settings.software_gpus"): 1,
        (ADMIN_EMAIL, "settings.courtesy"): 1,
        (ADMIN_EMAIL, "settings.metrics_sources"): 1,
        (ADMIN_EMAIL, "settings.metrics_token"): 1,
        (ADMIN_EMAIL, "audit.retention"): 1,
    }
    for key, count in expected.items():
        assert seen[key] == count, f"{key}: {seen[key]} entries, expected {count}"
    # The signed-in POST /enrol callers (worker, coordinator, admin) are recorded under their own email.
    assert sum(n for (actor, action), n in seen.items() if action == "enrolment.used") == 8
    # Nothing the matrix was refused (a 400, 403 or 404) left an entry.
    assert (
        not set(seen)
        - set(expected)
        - {(a, "enrolment.used") for a in ("worker@example.com", "coordinator@example.com", ADMIN_EMAIL)}
    )
    for e in matrix_done:
        assert e["address"] == {command: "local", "appliance": ""}.get(e["actor"], LOCAL), e


def test_entries_say_what_changed(matrix_done):
    role = next(e for e in matrix_done if e["action"] == "account.role")
    assert role["target"] == "victim@example.com"
    assert json.loads(role["before"]) == {"role": "worker"} and json.loads(role["after"]) == {"role": "coordinator"}
    revoked = next(e for e in matrix_done if e["action"] == "token.revoked")
    assert revoked["target"].endswith(f"of {ADMIN_EMAIL}")
    retention = next(e for e in matrix_done if e["action"] == "audit.retention")
    assert json.loads(retention["after"]) == {"retention_days": 3650}
    # A secret never reaches the log: the tokens' entries name their shown prefix only.
    created = [e for e in matrix_done if e["action"] == "token.created"]
    assert all(len(json.loads(e["after"])["prefix"]) == 12 for e in created)


def test_admin_page_filters_and_exports(appliance, matrix_done, admin):
    page = admin.get("/ui/admin/audit", params={"action": "account.role"}).text
    assert 'data-action="account.role"' in page and 'data-action="sign-in"' not in page
    exported = admin.get("/ui/admin/audit.csv", params={"actor": "nobody@"})
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [r["action"] for r in rows] == ["sign-in.failed"] * 5 + ["sign-in.locked"]
    assert all(r["address"] == LOCAL for r in rows)
    # Text anyone can type (here an email at sign-in) cannot become a spreadsheet formula.
    assert admin.form("/login", {"email": "=HYPERLINK(1)", "password": "x"}).status_code == 400
    formula = list(csv.DictReader(io.StringIO(admin.get("/ui/admin/audit.csv", params={"actor": "HYPERLINK"}).text)))
    assert [(r["actor"], r["target"]) for r in formula] == [("'=hyperlink(1)", "'=hyperlink(1)")]
    # A malformed date is refused with a message, not a crash (the export too, before it starts).
    refused = admin.get("/ui/admin/audit", params={"since": "yesterday"})
    assert refused.status_code == 400 and "must be a date like" in refused.text
    refused = admin.get("/ui/admin/audit.csv", params={"until": "soon"})
    assert refused.status_code == 400 and "must be a date like" in refused.text
    refused = admin.form("/ui/admin/audit/retention", {"retention_days": "0"})
    assert refused.status_code == 400 and "at least 1 day" in refused.text


def verify(appliance):
    return appliance.cli("audit", "verify")


def tamper(appliance, sql: str, *args) -> None:
    with sqlite3.connect(appliance.data_dir / "peermr.sqlite3") as db:
        db.execute(sql, args)


@pytest.mark.skipif(running_on_postgres(), reason="tampers with the SQLite file directly")
def test_verify_names_the_row_changed_deleted_or_inserted(appliance, matrix_done):
    intact = verify(appliance)
    assert intact.returncode == 0, intact.stderr
    assert "The audit log is intact" in intact.stdout and f"{len(entries(appliance))} entries" in intact.stdout

    victim = next(e for e in entries(appliance) if e["action"] == "account.role")
    tamper(appliance, "UPDATE audit_entry SET after = ? WHERE id = ?", '{"role":"admin"}', victim["id"])
    changed = verify(appliance)
    assert changed.returncode == 1
    assert f"entry #{victim['id']}: its content was changed" in changed.stderr
    tamper(appliance, "UPDATE audit_entry SET after = ? WHERE id = ?", victim["after"], victim["id"])
    assert verify(appliance).returncode == 0

    # A deleted row: the entry after it no longer follows from its predecessor.
    row = appliance.query(f"SELECT * FROM audit_entry WHERE id = {victim['id']}")[0]
    tamper(appliance, "DELETE FROM audit_entry WHERE id = ?", victim["id"])
    deleted = verify(appliance)
    assert deleted.returncode == 1 and f"entry #{victim['id'] + 1}: the entry before it was deleted" in deleted.stderr
    columns = [r[1] for r in appliance.query("PRAGMA table_info(audit_entry)")]
    tamper(appliance, f"INSERT INTO audit_entry ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", *row)
    assert verify(appliance).returncode == 0

    # An inserted row (a copy of an earlier one, added after the newest) does not follow from the one before it.
    last = entries(appliance)[-1]["id"]
    tamper(
        appliance,
        "INSERT INTO audit_entry (id, at, actor, action, target, address, before, after, prev_digest, digest)"
        " SELECT ?, at, actor, action, target, address, before, after, prev_digest, digest"
        " FROM audit_entry WHERE id = ?",
        last + 1000,
        victim["id"],
    )
    inserted = verify(appliance)
    assert inserted.returncode == 1 and f"entry #{last + 1000}" in inserted.stderr
    tamper(appliance, "DELETE FROM audit_entry WHERE id = ?", last + 1000)

    # The newest row deleted: the chain no longer reaches its stored head.
    row = appliance.query(f"SELECT * FROM audit_entry WHERE id = {last}")[0]
    tamper(appliance, "DELETE FROM audit_entry WHERE id = ?", last)
    truncated = verify(appliance)
    assert truncated.returncode == 1 and f"its head is #{last}" in truncated.stderr
    tamper(appliance, f"INSERT INTO audit_entry ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", *row)
    assert verify(appliance).returncode == 0


def test_pruning_keeps_the_chain_verifiable(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path / "data")}, environ={})

    async def scenario():
        db.configure(settings)
        await db.migrate()
        for n in range(5):
            await service.record("someone@example.com", "test.action", f"thing {n}", {"n": n}, {"n": n + 1}, "10.0.0.1")
        await service.set_retention("1")
        # Two days later, everything but the newest entry is past the retention.
        removed = await service.prune(at=dt.datetime.now(dt.UTC) + dt.timedelta(days=2))
        return removed, await service.verify(), await service.chain_state()

    removed, verdict, ends = asyncio.run(scenario())
    assert removed == 5  # the retention change, the newest entry then, stays: the chain keeps its head
    assert verdict.ok, verdict.problem
    assert ends["pruned"] == 5 and ends["anchor_digest"]
    rows = [
        r[0]
        for r in sqlite3.connect(tmp_path / "data" / "peermr.sqlite3").execute(
            "SELECT action FROM audit_entry ORDER BY id"
        )
    ]
    assert rows == ["audit.retention", "audit.pruned"]


async def test_runs_prices_billing_closes_and_disconnects_are_recorded(appliance, matrix_done, admin):
    coordinator = Api(appliance, token_for(appliance, "coordinator@example.com"))
    run = coordinator.run(coordinator.job(job_script(workers=1)))  # no worker is connected: it waits
    assert coordinator.http.post(f"/runs/{run['id']}/cancel", json={}).status_code == 201
    priced = admin.form(
        "/ui/admin/billing/prices", {"resource": "cpu_ms", "consumer_rate": "0.5", "provider_rate": "0.25"}
    )
    assert priced.status_code == 303, priced.text
    today = dt.date.today()
    last_month = (today.replace(day=1) - dt.timedelta(days=1)).strftime("%Y-%m")
    assert appliance.cli("bill", "--period", last_month).returncode == 0
    worker = await SimWorker(appliance.url, cookie_of(admin)).start()
    try:
        assert admin.form(f"/ui/workers/{worker.worker_id}/disconnect", {}).status_code == 303
    finally:
        await worker.close()

    found = {e["action"]: e for e in entries(appliance)[len(matrix_done) :]}
    assert found["run.started"]["actor"] == found["run.cancelled"]["actor"] == "coordinator@example.com"
    assert found["run.cancelled"]["target"].startswith(f"run #{run['id']} ")
    assert json.loads(found["run.cancelled"]["before"]) == {"state": "queued"}
    assert found["billing.price"]["actor"] == ADMIN_EMAIL
    # As prices are stored: minor units (cents) per pricing unit.
    assert json.loads(found["billing.price"]["after"])["consumer_rate"] == "50.0"
    assert found["billing.closed"]["target"] == f"period {last_month}"
    assert (
        found["billing.closed"]["actor"].startswith("peermr command (")
        and found["billing.closed"]["address"] == "local"
    )
    assert found["worker.disconnected"]["target"] == f"worker {worker.worker_id} of {ADMIN_EMAIL}"
    # The dashboard's and the API's actions come from the tests' address; the commands' (the coordinator's
    # token, the close) from "local".
    assert all(e["address"] == LOCAL for e in found.values() if not e["actor"].startswith("peermr command ("))


async def test_the_csv_export_has_every_matching_entry(tmp_path, monkeypatch):
    # Batches of 3 stand for the real 1000: the export reads and sends batch after batch to the last entry.
    monkeypatch.setattr(service, "EXPORT_BATCH", 3)
    db.configure(load_settings({"data_dir": str(tmp_path / "data")}, environ={}))
    await db.migrate()
    for n in range(10):
        await service.record("someone@example.com", "test.action", f"thing {n}", None, {"n": n}, "10.0.0.1")
        await service.record("other@example.com", "test.other", f"other {n}")
    exported = "".join([batch async for batch in service.export_csv(service.Filters(action="test.action"))])
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert [r["target"] for r in rows] == [f"thing {n}" for n in range(10)]
    assert json.loads(rows[-1]["after"]) == {"n": 9}


async def test_payouts_are_recorded(connect):  # noqa: F811
    """Each attempt at a payout: waiting for the worker's Stripe onboarding at the monthly close, then sent
    when an admin retries it (Admin → Billing)."""
    billing = connect.billing
    walt, _ = await users.create_user("walt@example.com", "worker", "walt-password-12")
    await prices.set_price("cpu_ms", "120", "80", dt.date(2026, 1, 1), tz=UTC)
    await worker_earnings(walt.id, MARCH, "m", 3)
    await settlement.close_due(billing, at=AFTER_MARCH)
    await settlement.onboarding_link(
        billing.require_gateway(), walt.id, "https://peermr.test/r", "https://peermr.test/f"
    )
    connect.accounts["acct_0001"].update(details_submitted=True, payouts_enabled=True)
    [payout] = await Payout.select(Payout.id, Payout.key)
    with acting(ADMIN_EMAIL, "10.1.2.3"):
        assert await settlement.retry_payout(billing, payout["id"]) == "sent"

    rows = await AuditEntry.select().where(AuditEntry.action == "billing.payout").order_by(AuditEntry.id)
    assert [(r["actor"], r["address"]) for r in rows] == [("appliance", ""), (ADMIN_EMAIL, "10.1.2.3")]
    assert {r["target"] for r in rows} == {f"payout #{payout['id']} ({payout['key']})"}
    after = [json.loads(r["after"]) for r in rows]
    assert [(a["state"], a["amount"]) for a in after] == [("awaiting-onboarding", 240), ("sent", 240)]
    assert (await service.verify()).ok


def test_a_worker_tab_joining_with_a_token_is_a_sign_in(appliance, matrix_done):
    token = token_for(appliance, "coordinator@example.com")
    first = entry_count(appliance)
    tab = appliance.client()
    assert tab.post("/worker/session", json={"token": token}, headers={"x-csrftoken": tab.csrf()}).status_code == 204
    # A password pasted where the token belongs: refused, and only said to be no PeerMR token.
    pasted = "correct-horse-battery-staple"
    other = appliance.client()
    assert (
        other.post("/worker/session", json={"token": pasted}, headers={"x-csrftoken": other.csrf()}).status_code == 401
    )
    joined, refused = entries(appliance)[first:]
    assert (joined["actor"], joined["action"], joined["target"]) == (
        "coordinator@example.com",
        "sign-in",
        "coordinator@example.com",
    )
    assert json.loads(joined["after"]) == {"method": "worker token", "token": token[:12]}
    assert (refused["actor"], refused["action"], refused["address"]) == ("anonymous", "sign-in.failed", LOCAL)
    assert json.loads(refused["after"])["token"] == "(not a PeerMR token)"
    assert pasted not in refused["after"] and token not in joined["after"]
