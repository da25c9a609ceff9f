"""The monthly close against Stripe test servers: localstripe for customers and invoices, and a recording
server of our own for Stripe Connect (localstripe has no Connect endpoints: no accounts, account links
or transfers), which also checks the idempotency key of every transfer request.

Billing runs in-process on a SQLite store of its own, with PEERMR_STRIPE_API_BASE pointing the SDK at
the test server.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import httpx
import pytest

from appliance import db
from appliance.accounts import users
from appliance.billing import ledger, prices, settlement, statements
from appliance.billing.context import BillingContext
from appliance.billing.ledger import CONSUMER, PROVIDER, Entry
from appliance.billing.tables import Invoice, Payout
from appliance.config import load_settings
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
MARCH = dt.datetime(2026, 3, 12, 9, tzinfo=dt.UTC)
APRIL = dt.datetime(2026, 4, 12, 9, tzinfo=dt.UTC)
AFTER_MARCH = dt.datetime(2026, 4, 2, tzinfo=dt.UTC)
AFTER_APRIL = dt.datetime(2026, 5, 2, tzinfo=dt.UTC)
KEY = "sk_test_peermr_billing"
UTC = ZoneInfo("UTC")


class SimulatedCrash(BaseException):
    """Stands for the process dying: not an Exception, so nothing on the way catches it."""


@pytest.fixture(scope="module")
def localstripe():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "stripe_server.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/v1/customers", headers={"Authorization": f"Bearer {KEY}"}, timeout=2)
            break
        except httpx.TransportError:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(10)


def stripe_get(url: str, path: str, **params) -> dict:
    response = httpx.get(f"{url}{path}", params=params, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    response.raise_for_status()
    return response.json()


async def configure(tmp_path, api_base: str) -> BillingContext:
    """A fresh store, and billing's context as create_app builds it with Stripe at ``api_base``."""
    settings = load_settings(
        {"data_dir": str(tmp_path / "data")}, environ={"PEERMR_STRIPE_API_KEY": KEY, "PEERMR_STRIPE_API_BASE": api_base}
    )
    db.configure(settings)
    await db.migrate()
    return BillingContext.from_settings(settings)


class Localstripe(NamedTuple):
    url: str
    billing: BillingContext


@pytest.fixture
async def with_localstripe(tmp_path, localstripe):
    httpx.delete(f"{localstripe}/_config/data", timeout=10).raise_for_status()  # a fresh Stripe per test
    yield Localstripe(localstripe, await configure(tmp_path, localstripe))


async def people():
    alice, _ = await users.create_user("alice@example.com", "coordinator", "alice-password-1")
    bob, _ = await users.create_user("bob@example.com", "coordinator", "bob-password-12")
    walt, _ = await users.create_user("walt@example.com", "worker", "walt-password-12")
    return alice.id, bob.id, walt.id


async def march_usage(alice: int, bob: int, walt: int) -> None:
    await prices.set_price("cpu_ms", "120", "80", dt.date(2026, 1, 1), tz=UTC)  # cents per CPU-hour
    await prices.set_price("p2p_bytes", "5", "2", dt.date(2026, 1, 1), tz=UTC)  # cents per GB
    await prices.set_price("turn_bytes", "40", "0", dt.date(2026, 1, 1), tz=UTC)
    await ledger.record(
        [
            Entry(alice, "cpu_ms", CONSUMER, 10 * 3_600_000 + 1_234, "a-cpu", MARCH, 1),
            Entry(alice, "p2p_bytes", CONSUMER, 7 * 10**9, "a-p2p", MARCH, 1),
            Entry(walt, "cpu_ms", PROVIDER, 10 * 3_600_000, "w-cpu", MARCH, 1),
            Entry(bob, "turn_bytes", CONSUMER, 3 * 10**9 + 7, "b-turn", MARCH),
        ],
        UTC,
    )


def invoices_of(url: str, email: str) -> list[dict]:
    [customer] = [c for c in stripe_get(url, "/v1/customers", email=email)["data"]]
    return stripe_get(url, "/v1/invoices", customer=customer["id"])["data"]


async def test_the_close_creates_one_customer_and_one_finalized_invoice_per_coordinator(with_localstripe):
    url, billing = with_localstripe
    alice, bob, walt = await people()
    await march_usage(alice, bob, walt)
    assert await settlement.close_due(billing, at=AFTER_MARCH) == ["2026-03"]

    customers = stripe_get(url, "/v1/customers")["data"]
    assert sorted(c["email"] for c in customers) == ["alice@example.com", "bob@example.com"]
    expected = {s.account: s for s in await statements.stored("2026-03", kind=CONSUMER)}
    for account, email in ((alice, "alice@example.com"), (bob, "bob@example.com")):
        [invoice] = invoices_of(url, email)
        assert invoice["status"] == "open"  # finalized
        assert invoice["metadata"]["peermr_key"] == f"peermr-invoice-{account}-2026-03"
        assert invoice["currency"] == "usd" and invoice["collection_method"] == "send_invoice"
        lines = stripe_get(url, f"/v1/invoices/{invoice['id']}/lines")["data"]
        assert [line["amount"] for line in lines] == [line.amount for line in expected[account].lines]
        assert invoice["total"] == expected[account].total
    assert [line.amount for line in expected[alice].lines] == [1200, 35]  # 10.000343 h * 120, 7 GB * 5
    assert expected[bob].total == 120
    rows = await Invoice.select(Invoice.state, Invoice.stripe_status).order_by(Invoice.account)
    assert rows == [{"state": "sent", "stripe_status": "open"}] * 2
    # The worker account has not onboarded to Connect: its payout waits for that.
    assert await Payout.select(Payout.state, Payout.amount) == [{"state": "awaiting-onboarding", "amount": 800}]

    # Closing again, settling again: nothing new in Stripe.
    before = (stripe_get(url, "/v1/customers")["data"], stripe_get(url, "/v1/invoices")["data"])
    assert (await settlement.close_period(billing, "2026-03", at=AFTER_MARCH)).closed_now is False
    assert await settlement.close_due(billing, at=AFTER_MARCH) == []
    report = await settlement.settle(billing)
    assert report.invoices_sent == 0 and report.failed == 0
    after = (stripe_get(url, "/v1/customers")["data"], stripe_get(url, "/v1/invoices")["data"])
    assert [c["id"] for c in after[0]] == [c["id"] for c in before[0]]
    assert [i["id"] for i in after[1]] == [i["id"] for i in before[1]]
    for invoice in after[1]:
        assert len(stripe_get(url, f"/v1/invoices/{invoice['id']}/lines")["data"]) in (1, 2)


@pytest.mark.parametrize("crash_when", ["stripe_invoice", "state"])
async def test_a_crash_between_the_stripe_call_and_the_commit_still_gives_one_invoice(
    with_localstripe, monkeypatch, crash_when
):
    """``stripe_invoice``: right after Stripe created the invoice; ``state``: right after it was finalized."""
    url, billing = with_localstripe
    alice, bob, walt = await people()
    await march_usage(alice, bob, walt)
    real_update = settlement._update_invoice

    async def crash_on_commit(invoice_id, **values):
        if crash_when in values:
            raise SimulatedCrash()
        await real_update(invoice_id, **values)

    monkeypatch.setattr(settlement, "_update_invoice", crash_on_commit)
    with pytest.raises(SimulatedCrash):
        await settlement.close_due(billing, at=AFTER_MARCH)
    assert await settlement.is_closed("2026-03")
    [first] = invoices_of(url, "alice@example.com")
    assert first["status"] == ("draft" if crash_when == "stripe_invoice" else "open")
    assert (await Invoice.select(Invoice.state).where(Invoice.account == alice).first())["state"] == "pending"

    monkeypatch.setattr(settlement, "_update_invoice", real_update)
    await settlement.close_due(billing, at=AFTER_MARCH)  # the next start, or the next run of the monthly job
    for email in ("alice@example.com", "bob@example.com"):
        [invoice] = invoices_of(url, email)
        assert invoice["status"] == "open"
    [invoice] = invoices_of(url, "alice@example.com")
    assert invoice["id"] == first["id"]
    lines = stripe_get(url, f"/v1/invoices/{invoice['id']}/lines")["data"]
    assert [line["amount"] for line in lines] == [1200, 35]  # each line once
    rows = await Invoice.select(Invoice.state, Invoice.stripe_invoice).where(Invoice.account == alice)
    assert rows == [{"state": "sent", "stripe_invoice": first["id"]}]


async def test_a_stripe_failure_is_kept_and_retried(with_localstripe, monkeypatch):
    alice, bob, walt = await people()
    await march_usage(alice, bob, walt)
    billing = with_localstripe.billing
    gateway = billing.gateway

    async def refuse(*args, **kwargs):
        raise RuntimeError("Stripe said no")

    monkeypatch.setattr(gateway, "create_invoice", refuse)
    await settlement.close_due(billing, at=AFTER_MARCH)
    rows = await Invoice.select(Invoice.id, Invoice.state, Invoice.error).order_by(Invoice.account)
    assert [(r["state"], r["error"]) for r in rows] == [("failed", "Stripe said no")] * 2
    monkeypatch.undo()
    assert await settlement.retry_invoice(billing, rows[0]["id"]) is True
    assert [i["status"] for i in invoices_of(with_localstripe.url, "alice@example.com")] == ["open"]
    with pytest.raises(settlement.BillingError, match="nothing to retry"):
        await settlement.retry_invoice(billing, rows[0]["id"])


# ------------------------------------------------------------------ Connect (recording server)


class RecordingStripe(ThreadingHTTPServer):
    """Just enough of Stripe Connect: accounts, account links, transfers. Records every request and
    behaves as Stripe does with idempotency keys: a repeated key with the same parameters returns
    the first response, with other parameters it is refused."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), RecordingHandler)
        self.requests: list[dict] = []
        self.accounts: dict[str, dict] = {}
        self.transfers: list[dict] = []
        self.replies: dict[str, tuple[dict, dict]] = {}  # idempotency key -> (params, response)
        self.fail_next_transfer = False
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def posts(self, path: str) -> list[dict]:
        return [r for r in self.requests if r["method"] == "POST" and r["path"] == path]


class RecordingHandler(BaseHTTPRequestHandler):
    server: RecordingStripe

    def log_message(self, *args) -> None:
        pass

    def reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.handle_request("GET", {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self.handle_request("POST", {k: v[0] for k, v in parse_qs(body).items()})

    def handle_request(self, method: str, params: dict) -> None:
        path = urlsplit(self.path).path
        key = self.headers.get("Idempotency-Key")
        server = self.server
        with server.lock:
            server.requests.append({"method": method, "path": path, "key": key, "params": params})
            if self.headers.get("Authorization") != f"Bearer {KEY}":
                return self.reply(401, {"error": {"message": "bad key"}})
            if method == "POST" and key in server.replies:
                first_params, response = server.replies[key]
                if first_params != params:
                    return self.reply(400, {"error": {"type": "idempotency_error", "message": "other params"}})
                return self.reply(200, response)
            status, response = self.route(method, path, params)
            if method == "POST" and key and status == 200:
                server.replies[key] = (params, response)
            return self.reply(status, response)

    def route(self, method: str, path: str, params: dict) -> tuple[int, dict]:
        server = self.server
        if (method, path) == ("POST", "/v1/accounts"):
            account = {
                "id": f"acct_{len(server.accounts) + 1:04d}",
                "object": "account",
                "type": params.get("type"),
                "email": params.get("email"),
                "details_submitted": False,
                "payouts_enabled": False,
                "metadata": {"peermr_account": params.get("metadata[peermr_account]")},
            }
            server.accounts[account["id"]] = account
            return 200, account
        if method == "GET" and path.startswith("/v1/accounts/"):
            account = server.accounts.get(path.rsplit("/", 1)[1])
            return (200, account) if account else (404, {"error": {"message": "no such account"}})
        if (method, path) == ("POST", "/v1/account_links"):
            if not (params.get("return_url") and params.get("refresh_url") and params["account"] in server.accounts):
                return 400, {"error": {"message": "account, return_url and refresh_url are required"}}
            return 200, {"object": "account_link", "url": f"https://connect.example/setup/{params['account']}"}
        if (method, path) == ("GET", "/v1/transfers"):
            found = [
                t
                for t in server.transfers
                if t["destination"] == params.get("destination")
                and t["transfer_group"] == params.get("transfer_group", t["transfer_group"])
            ]
            return 200, {"object": "list", "data": found, "has_more": False, "url": "/v1/transfers"}
        if (method, path) == ("POST", "/v1/transfers"):
            if server.fail_next_transfer:
                server.fail_next_transfer = False
                return 500, {"error": {"type": "api_error", "message": "try again"}}
            if params.get("destination") not in server.accounts:
                return 400, {"error": {"message": "no such destination"}}
            transfer = {
                "id": f"tr_{len(server.transfers) + 1:04d}",
                "object": "transfer",
                "amount": int(params["amount"]),
                "currency": params["currency"],
                "destination": params["destination"],
                "transfer_group": params.get("transfer_group"),
                "reversed": False,
                "metadata": {},
            }
            server.transfers.append(transfer)
            return 200, transfer
        return 404, {"error": {"message": f"{method} {path} is not part of this test server"}}


@pytest.fixture
async def connect(tmp_path):
    server = RecordingStripe()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.billing = await configure(tmp_path, server.url)
    yield server
    server.shutdown()
    server.server_close()


async def worker_earnings(walt: int, at: dt.datetime, source: str, hours: int) -> None:
    await ledger.record([Entry(walt, "cpu_ms", PROVIDER, hours * 3_600_000, source, at, 1)], UTC)


async def test_connect_onboarding_and_one_transfer_per_payout_with_its_key(connect):
    billing = connect.billing
    walt, _ = await users.create_user("walt@example.com", "worker", "walt-password-12")
    await prices.set_price("cpu_ms", "120", "80", dt.date(2026, 1, 1), tz=UTC)
    await worker_earnings(walt.id, MARCH, "m", 3)
    await settlement.close_due(billing, at=AFTER_MARCH)
    assert await Payout.select(Payout.state, Payout.amount) == [{"state": "awaiting-onboarding", "amount": 240}]
    assert connect.posts("/v1/transfers") == []

    link = await settlement.onboarding_link(
        billing.require_gateway(), walt.id, "https://peermr.test/ui/payments", "https://peermr.test/refresh"
    )
    assert link == "https://connect.example/setup/acct_0001"
    [created] = connect.posts("/v1/accounts")
    assert created["key"] == f"peermr-connect-{walt.id}" and created["params"]["type"] == "express"
    [link_request] = connect.posts("/v1/account_links")
    assert link_request["params"]["return_url"] == "https://peermr.test/ui/payments"
    assert link_request["params"]["refresh_url"] == "https://peermr.test/refresh"
    await settlement.onboarding_link(
        billing.require_gateway(), walt.id, "https://peermr.test/ui/payments", "https://peermr.test/refresh"
    )
    assert len(connect.posts("/v1/accounts")) == 1  # one connected account per worker account

    # Still onboarding: nothing is paid.
    assert (await settlement.settle(billing)).awaiting_onboarding == 1
    connect.accounts["acct_0001"].update(details_submitted=True, payouts_enabled=True)
    connect.fail_next_transfer = True  # the SDK retries, with the same idempotency key
    report = await settlement.settle(billing)
    assert report.payouts_sent == 1
    posts = connect.posts("/v1/transfers")
    assert len(posts) == 2 and {p["key"] for p in posts} == {f"peermr-payout-{walt.id}-2026-03"}
    [transfer] = connect.transfers
    assert (transfer["amount"], transfer["destination"], transfer["transfer_group"]) == (
        240,
        "acct_0001",
        f"peermr-payout-{walt.id}-2026-03",
    )
    row = await Payout.select(Payout.state, Payout.stripe_transfer).first()
    assert row == {"state": "sent", "stripe_transfer": "tr_0001"}
    assert (await settlement.connected_account(walt.id)).payouts_enabled

    await settlement.settle(billing)
    await settlement.close_due(billing, at=AFTER_MARCH)
    assert len(connect.transfers) == 1 and len(connect.posts("/v1/transfers")) == 2


async def test_a_crash_after_the_transfer_is_made_pays_once(connect, monkeypatch):
    billing = connect.billing
    walt, _ = await users.create_user("walt@example.com", "worker", "walt-password-12")
    await prices.set_price("cpu_ms", "120", "80", dt.date(2026, 1, 1), tz=UTC)
    await settlement.onboarding_link(
        billing.require_gateway(), walt.id, "https://peermr.test/r", "https://peermr.test/f"
    )
    connect.accounts["acct_0001"].update(details_submitted=True, payouts_enabled=True)
    await worker_earnings(walt.id, APRIL, "a", 5)
    real_update = settlement._update_payout

    async def crash_on_commit(payout_id, **values):
        if "stripe_transfer" in values:
            raise SimulatedCrash()
        await real_update(payout_id, **values)

    monkeypatch.setattr(settlement, "_update_payout", crash_on_commit)
    with pytest.raises(SimulatedCrash):
        await settlement.close_due(billing, at=AFTER_APRIL)
    assert len(connect.transfers) == 1
    assert (await Payout.select(Payout.state).first())["state"] == "pending"
    monkeypatch.setattr(settlement, "_update_payout", real_update)
    await settlement.close_due(billing, at=AFTER_APRIL)
    assert len(connect.transfers) == 1
    assert all(p["key"] == f"peermr-payout-{walt.id}-2026-04" for p in connect.posts("/v1/transfers"))
    assert await Payout.select(Payout.state, Payout.stripe_transfer, Payout.amount) == [
        {"state": "sent", "stripe_transfer": "tr_0001", "amount": 400}
    ]


async def test_verified_webhook_events_update_invoice_payout_and_account_status(connect):
    billing = connect.billing
    walt, _ = await users.create_user("walt@example.com", "worker", "walt-password-12")
    await prices.set_price("cpu_ms", "120", "80", dt.date(2026, 1, 1), tz=UTC)
    await settlement.onboarding_link(
        billing.require_gateway(), walt.id, "https://peermr.test/r", "https://peermr.test/f"
    )
    await worker_earnings(walt.id, MARCH, "m", 1)
    await settlement.close_due(billing, at=AFTER_MARCH)
    outcome = await settlement.apply_event(
        billing, {"type": "account.updated", "data": {"object": {"id": "acct_0001", "payouts_enabled": True}}}
    )
    assert "payouts enabled" in outcome
    assert (await settlement.connected_account(walt.id)).payouts_enabled
    await settlement.settle(billing)
    key = f"peermr-payout-{walt.id}-2026-03"
    event = {
        "type": "transfer.reversed",
        "data": {"object": {"id": "tr_0001", "reversed": True, "transfer_group": key}},
    }
    assert await settlement.apply_event(billing, event) == f"payout {key}: reversed"
    assert (await Payout.select(Payout.stripe_status).first())["stripe_status"] == "reversed"
    assert await settlement.apply_event(billing, {"type": "invoice.paid", "data": {"object": {"id": "in_nope"}}}) == (
        "no such invoice"
    )
