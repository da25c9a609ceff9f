"""The Billing, Payments and admin Billing pages on a running appliance, fed through the ledger.

Usage gets into the ledger two ways: a real run on simulated workers (tests/sim_workers.py) meters
its CPU time as the coordinator does when a run ends, and the resources no run here produces
(PMRFS storage, peer-to-peer and TURN bytes, and last month's usage) are recorded with the
backend's own ``ledger.record`` from a process of its own on the appliance's store, the way the
meters and ``peermr bill`` write it. Last month is closed with ``peermr bill``. Prices are set with
the admin's form.
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import re
import subprocess
import sys
import textwrap
import threading
from zoneinfo import ZoneInfo

import pytest

from appliance.billing import periods
from tests.integration.test_billing_stripe import KEY, RecordingStripe
from tests.integration.test_job_scheduling import Api, job_script, token_for
from tests.sim_workers import SimWorker, cookie_of
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

CAROL, WENDY, DAVE = "carol@example.com", "wendy@example.com", "dave@example.com"
PASSWORD = "billing-password-1"
HOUR = 3_600_000
GB = 10**9
UTC = ZoneInfo("UTC")  # the appliance runs in UTC here
THIS = periods.of(dt.datetime.now(dt.UTC), UTC)
LAST = periods.preceding(THIS)


def run_python(appliance: Appliance, code: str) -> str:
    """Billing calls in a process of their own on the appliance's store (as the meters and the CLI write)."""
    header = textwrap.dedent(
        f"""
        import asyncio, datetime as dt
        from appliance import db
        from appliance.billing import ledger
        from appliance.billing.context import BillingContext
        from appliance.billing.ledger import Entry
        from appliance.config import load_settings

        settings = load_settings({{"data_dir": {str(appliance.data_dir)!r}}})
        db.configure(settings)
        billing = BillingContext.from_settings(settings)

        async def main():
        """
    )
    script = header + textwrap.indent(textwrap.dedent(code).strip(), "    ") + "\n\nasyncio.run(main())\n"
    result = subprocess.run([sys.executable, "-c", script], env=appliance.env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def account_id(appliance: Appliance, email: str) -> int:
    [(found,)] = appliance.query(f"SELECT id FROM accounts_user WHERE email = '{email}'")
    return found


def signed_in(appliance: Appliance, email: str, password: str):
    client = appliance.client()
    client.login(email, password)
    return client


@pytest.fixture(scope="module")
def people(appliance):
    appliance.add_user(CAROL, "coordinator", PASSWORD)
    appliance.add_user(DAVE, "coordinator", PASSWORD)
    appliance.add_user(WENDY, "worker", PASSWORD)
    clients = {
        "admin": signed_in(appliance, ADMIN_EMAIL, ADMIN_PASSWORD),
        "carol": signed_in(appliance, CAROL, PASSWORD),
        "dave": signed_in(appliance, DAVE, PASSWORD),
        "wendy": signed_in(appliance, WENDY, PASSWORD),
    }
    yield clients
    for client in clients.values():
        client.close()


def price(admin, resource: str, consumer: str, provider: str, effective: str = "2026-01-01", **extra):
    return admin.form(
        "/ui/admin/billing/prices",
        {
            "resource": resource,
            "consumer_rate": consumer,
            "provider_rate": provider,
            "effective_from": effective,
            **extra,
        },
    )


async def run_on_wendys_browsers(appliance, people) -> int:
    """A two-worker run of carol's on two of wendy's browsers, each task reporting 30 min of CPU."""

    async def work(worker: SimWorker, task: dict) -> None:
        await worker.send({"type": "task-done", "taskId": task["taskId"], "outputs": [], "cpuMs": HOUR // 2})

    api = Api(appliance, token_for(appliance, CAROL))
    workers = [await SimWorker(appliance.url, cookie_of(people["wendy"]), on_task=work).start() for _ in range(2)]
    try:
        run = api.run(api.job(job_script(workers=2)))
        assert (await api.wait(run["id"]))["state"] == "succeeded"
        assert sum(len(w.tasks) for w in workers) == 5  # input, two maps, two reduces
        for _ in range(50):  # metered just after the run shows as ended
            if appliance.query(f"SELECT COUNT(*) FROM billing_usage WHERE run = {run['id']}")[0][0]:
                break
            await asyncio.sleep(0.1)
        return run["id"]
    finally:
        for w in workers:
            await w.close()


@pytest.fixture(scope="module")
def billed(appliance, people):
    """Prices, this month's usage (a real run plus recorded entries) and last month closed."""
    admin = people["admin"]
    for resource, consumer, provider in (
        ("cpu_ms", "0.60", "0.40"),
        ("storage_byte_hours", "0.10", "0.05"),
        ("p2p_bytes", "0.05", "0.02"),
        ("turn_bytes", "0.08", "0"),
    ):
        response = price(admin, resource, consumer, provider)
        assert response.status_code == 303, response.text
    asyncio.run(run_on_wendys_browsers(appliance, people))
    carol, wendy = account_id(appliance, CAROL), account_id(appliance, WENDY)
    first = periods.bounds(THIS, UTC)[0] + dt.timedelta(minutes=1)
    last_month = periods.bounds(LAST, UTC)[0] + dt.timedelta(days=2)
    run_python(
        appliance,
        f"""
        first = dt.datetime.fromisoformat({first.isoformat()!r})
        earlier = dt.datetime.fromisoformat({last_month.isoformat()!r})
        added = await ledger.record([
            Entry({carol}, "p2p_bytes", "consumer", 3 * {GB}, "pages:p2p", first),
            Entry({carol}, "storage_byte_hours", "consumer", 1460 * {GB}, "pages:storage", first),
            Entry({carol}, "turn_bytes", "consumer", {GB}, "pages:turn", first),
            Entry({carol}, "cpu_ms", "consumer", 2 * {HOUR}, "pages:last-month", earlier),
            Entry({wendy}, "cpu_ms", "provider", 2 * {HOUR}, "pages:last-month-paid", earlier),
        ], billing.tz)
        assert added == 5, added
        """,
    )
    result = appliance.cli("bill", "--period", LAST)
    assert result.returncode == 0, result.stderr
    return {"carol": carol, "wendy": wendy}


def statement_ids(appliance, kind: str, account: int) -> list[int]:
    return [
        r[0]
        for r in appliance.query(
            f"SELECT id FROM billing_statement WHERE kind = '{kind}' AND account = {account} AND period = '{LAST}'"
        )
    ]


def test_the_coordinator_sees_usage_chart_estimate_and_invoices(appliance, people, billed):
    page = people["carol"].get("/ui/billing")
    assert page.status_code == 200
    html = page.text
    # This month: 5 tasks × 30 min of CPU (the run), 3 GB peer-to-peer, 1.46 TB·h of storage, 1 GB relayed.
    row_re = r'<tr data-resource="(\w+)"[^>]*>\s*<td>[^<]+</td>\s*<td class="quantity">([^<]+)</td>'
    rows = dict(re.findall(row_re, html))
    assert rows == {
        "cpu_ms": "2.5 h",
        "gpu_ms": "—",
        "storage_byte_hours": "1.33 TiB·h",  # bytes in binary units, as on every page; prices per 10^9 bytes
        "p2p_bytes": "2.79 GiB",
        "turn_bytes": "954 MiB",
    }
    # 2.5 h × 0.60 + 2 GB-months × 0.10 + 3 GB × 0.05 + 1 GB × 0.08 = 1.50 + 0.20 + 0.15 + 0.08
    assert re.search(r'id="estimate-total">1\.93 USD<', html)
    assert "0.60 USD per CPU-hour" in html and "no price set" in html  # GPU has no price
    # The chart: a band per resource, a bar per day with usage, the whole month along the axis.
    svg = re.search(r'<svg viewBox="0 0 720 \d+" role="img"[^>]*data-days="(\d+)" data-bars="(\d+)"', html)
    days, bars = int(svg.group(1)), int(svg.group(2))
    assert days == len(periods_days(THIS)) and bars >= 3
    assert len(re.findall(r'<g class="band band-\w+"', html)) == 5
    assert re.search(r'<g class="band band-p2p_bytes".*?<rect class="bar"', html, re.S)
    assert re.search(r'<g class="band band-gpu_ms"[^>]*>.*?no usage</text>', html, re.S)
    # Last month's invoice, as a statement (no Stripe here), with its downloads.
    [statement] = statement_ids(appliance, "consumer", billed["carol"])
    invoice = re.search(r'<tr data-invoice="\d+">.*?</tr>', html, re.S).group(0)
    assert "1.20 USD" in invoice and "statement only" in invoice
    assert f'href="/ui/statements/{statement}/statement.csv"' in invoice
    assert f'href="/ui/statements/{statement}/statement.html"' in invoice
    # Carol's browsers earned nothing: no pointer to Payments.
    assert 'id="also-earned"' not in html


def periods_days(period: str) -> list:
    from appliance.billing.views import month_days

    return month_days(period)


def test_a_closed_month_in_the_usage_panel_through_htmx(people, billed):
    response = people["carol"].get(f"/ui/billing?period={LAST}", headers={"HX-Request": "true", "HX-Target": "usage"})
    assert response.status_code == 200
    assert response.text.lstrip().startswith('<section class="panel" id="usage">')
    assert "<html" not in response.text
    assert "the month is closed" in response.text and re.search(r'id="estimate-total">1\.20 USD<', response.text)
    # A month not yet started, or not a month, shows this one.
    assert 'estimate-total">1.93 USD' in people["carol"].get("/ui/billing?period=2999-01").text
    assert 'estimate-total">1.93 USD' in people["carol"].get("/ui/billing?period=nonsense").text


def test_statements_download_as_html_and_csv_for_their_account_only(appliance, people, billed):
    [statement] = statement_ids(appliance, "consumer", billed["carol"])
    carol = people["carol"]
    view = carol.get(f"/ui/statements/{statement}")
    assert view.status_code == 200 and 'id="statement-total">1.20 USD<' in view.text
    assert "0.60 USD per CPU-hour" in view.text and '2 h <span class="muted small">(7,200,000 ms)</span>' in view.text
    file = carol.get(f"/ui/statements/{statement}/statement.html")
    assert file.status_code == 200
    assert file.headers["content-disposition"] == f'attachment; filename="peermr-invoice-{LAST}-{billed["carol"]}.html"'
    assert "<link" not in file.text and "<script" not in file.text and "1.20 USD" in file.text
    assert "Status: statement only" in file.text
    download = carol.get(f"/ui/statements/{statement}/statement.csv")
    assert download.headers["content-type"].startswith("text/csv")
    [row] = list(csv.DictReader(io.StringIO(download.text)))
    assert (row["period"], row["email"], row["kind"], row["resource"], row["quantity"], row["amount"]) == (
        LAST,
        CAROL,
        "invoice",
        "cpu_ms",
        str(2 * HOUR),
        "120",
    )
    assert row["state"] == "offline"
    # Another coordinator, and a worker account, are told there is no such statement; the admin sees it.
    for other in ("dave", "wendy"):
        for suffix in ("", "/statement.html", "/statement.csv"):
            assert people[other].get(f"/ui/statements/{statement}{suffix}").status_code == 404
    assert people["admin"].get(f"/ui/statements/{statement}").status_code == 200


def test_the_worker_sees_contribution_earnings_browsers_and_payouts(appliance, people, billed):
    page = people["wendy"].get("/ui/payments")
    assert page.status_code == 200
    html = page.text
    assert re.search(r'<td class="quantity">2\.5 h</td>', html)  # what its browsers ran for carol
    assert re.search(r'id="estimate-total">1\.00 USD<', html)  # 2.5 h × 0.40
    assert 'id="stripe-not-configured"' in html and "Set up payouts with Stripe" not in html
    assert len(re.findall(r'<tr data-worker="[0-9a-f]+">', html)) == 2  # its two browsers, with their scores
    payout = re.search(r'<tr data-payout="\d+">.*?</tr>', html, re.S).group(0)
    assert "0.80 USD" in payout and "statement only" in payout
    [statement] = statement_ids(appliance, "provider", billed["wendy"])
    assert people["wendy"].get(f"/ui/statements/{statement}").status_code == 200
    # The navigation: Payments, not Billing; the onboarding button says Stripe is not set up.
    nav = re.search(r'<nav class="mainnav".*?</nav>', html, re.S).group(0)
    assert "/ui/payments" in nav and "/ui/billing" not in nav
    assert people["wendy"].get("/ui/billing").status_code == 403
    onboard = people["wendy"].form("/ui/payments/onboard")
    assert onboard.status_code == 303 and onboard.headers["location"] == "/ui/payments"
    assert "not set up on this appliance" in people["wendy"].get("/ui/payments").text


def test_the_admin_sees_prices_every_account_invoices_and_payouts(appliance, people, billed):
    admin = people["admin"]
    html = admin.get("/ui/admin/billing").text
    cpu = re.search(r'<tr data-resource="cpu_ms">.*?</tr>', html, re.S).group(0)
    assert "0.60 USD" in cpu and "0.40 USD" in cpu and "2026-01-01" in cpu
    assert "not set (free, nothing paid)" in re.search(r'<tr data-resource="gpu_ms">.*?</tr>', html, re.S).group(0)
    carol = re.search(rf'<tr data-account="{billed["carol"]}">.*?</tr>', html, re.S).group(0)
    assert "CPU 2.5 h" in carol and "1.93 USD" in carol
    wendy = re.search(rf'<tr data-account="{billed["wendy"]}">.*?</tr>', html, re.S).group(0)
    assert "1.00 USD" in wendy and "CPU 2.5 h" in wendy
    invoices = re.search(r'<section class="panel" id="invoices">.*?</section>', html, re.S).group(0)
    assert CAROL in invoices and "1.20 USD" in invoices and "statement only" in invoices
    payouts = re.search(r'<section class="panel" id="payouts">.*?</section>', html, re.S).group(0)
    assert WENDY in payouts and "0.80 USD" in payouts
    # Without Stripe there is nothing to retry; asking anyway says why.
    [(invoice_id,)] = appliance.query(f"SELECT id FROM billing_invoice WHERE account = {billed['carol']}")
    retried = admin.form(f"/ui/admin/billing/invoices/{invoice_id}/retry")
    assert retried.status_code == 303
    assert "Stripe is not configured" in admin.get("/ui/admin/billing").text
    # The CSV export: this month as it stands, last month as closed.
    rows = list(csv.DictReader(io.StringIO(admin.get(f"/ui/admin/billing/statements.csv?period={THIS}").text)))
    assert {(r["email"], r["kind"]) for r in rows} == {(CAROL, "invoice"), (WENDY, "payout")}
    assert sum(int(r["amount"]) for r in rows if r["kind"] == "invoice") == 193
    closed = list(csv.DictReader(io.StringIO(admin.get(f"/ui/admin/billing/statements.csv?period={LAST}").text)))
    assert {(r["email"], r["amount"], r["state"]) for r in closed} == {
        (CAROL, "120", "offline"),
        (WENDY, "80", "offline"),
    }
    last = admin.get(f"/ui/admin/billing?period={LAST}").text
    assert "This month is closed" in last


@pytest.mark.parametrize(
    "fields,message",
    [
        ({"consumer_rate": "-1"}, "Coordinator price: a non-negative amount in USD"),
        ({"consumer_rate": "free"}, "Coordinator price: a non-negative amount in USD"),
        ({"provider_rate": ""}, "Worker payout rate: enter an amount"),
        ({"provider_rate": "0.0000001"}, "at most 6 decimals"),
        ({"provider_rate": "5"}, "cannot be above the coordinator price"),
        ({"effective_from": "next week"}, "A date like"),
        ({"resource": "bananas"}, "Choose a resource"),
        ({"currency": "EUR"}, "all prices are in one currency: this appliance&#39;s are in USD"),
    ],
)
def test_the_price_form_refuses_bad_values_with_the_reason(people, billed, fields, message):
    first = periods.bounds(THIS, UTC)[0].date().isoformat()
    values = {"resource": "gpu_ms", "consumer_rate": "1.20", "provider_rate": "0.90", "effective_from": first}
    response = people["admin"].form("/ui/admin/billing/prices", {**values, **fields})
    assert response.status_code == 400
    assert message in response.text
    assert 'id="price-form"' in response.text


def test_a_price_cannot_start_in_a_closed_month_and_a_new_one_applies_from_its_date(appliance, people, billed):
    admin = people["admin"]
    start = periods.bounds(LAST, UTC)[0].date().isoformat()
    refused = price(admin, "gpu_ms", "1", "0.5", start)
    assert refused.status_code == 400 and f"{LAST} is closed" in refused.text
    saved = price(admin, "gpu_ms", "1.20", "0.90", periods.bounds(THIS, UTC)[0].date().isoformat())
    assert saved.status_code == 303
    html = admin.get("/ui/admin/billing").text
    assert "GPU: new price from" in html
    gpu = re.search(r'<tr data-resource="gpu_ms">.*?</tr>', html, re.S).group(0)
    assert "1.20 USD" in gpu and "0.90 USD" in gpu
    assert "1.20 USD per GPU-hour" in people["carol"].get("/ui/billing").text


@pytest.fixture
def stripe_appliance(tmp_path):
    """An appliance whose Stripe is a recording test server (localstripe has no Connect endpoints)."""
    server = RecordingStripe()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    appliance = Appliance(
        tmp_path / "data",
        env={"PEERMR_STRIPE_API_KEY": KEY, "PEERMR_STRIPE_API_BASE": server.url},
    ).start()
    yield appliance, server
    appliance.stop()
    server.shutdown()
    server.server_close()


def test_onboarding_to_stripe_connect_from_the_payments_page(stripe_appliance):
    appliance, server = stripe_appliance
    appliance.add_user("walt@example.com", "worker", PASSWORD)
    walt = signed_in(appliance, "walt@example.com", PASSWORD)
    page = walt.get("/ui/payments").text
    assert "Set up payouts with Stripe" in page and 'hx-post="/ui/payments/onboard"' in page
    # With htmx (the page's button): the browser is sent on to Stripe's onboarding.
    sent = walt.post("/ui/payments/onboard", headers={"HX-Request": "true", "x-csrftoken": walt.csrf()})
    assert sent.status_code == 200 and sent.headers["hx-redirect"] == "https://connect.example/setup/acct_0001"
    [link] = server.posts("/v1/account_links")
    base = f"http://127.0.0.1:{appliance.port}"
    assert link["params"]["return_url"] == f"{base}/ui/payments/onboarding/return"
    assert link["params"]["refresh_url"] == f"{base}/ui/payments/onboarding/refresh"
    # Without JavaScript: a page with the link (the CSP's form-action keeps a form post on this site).
    plain = walt.form("/ui/payments/onboard")
    assert plain.status_code == 200 and 'href="https://connect.example/setup/acct_0001"' in plain.text
    assert len(server.posts("/v1/accounts")) == 1  # one connected account per worker account
    # Back from Stripe before finishing: the page says so, and offers to continue.
    back = walt.get("/ui/payments/onboarding/return")
    assert back.status_code == 303 and back.headers["location"] == "/ui/payments"
    page = walt.get("/ui/payments").text
    assert "Stripe still needs some details" in page and "Continue Stripe onboarding" in page
    # An expired link: a new one, straight back to Stripe.
    refreshed = walt.get("/ui/payments/onboarding/refresh")
    assert refreshed.status_code == 303 and refreshed.headers["location"] == "https://connect.example/setup/acct_0001"
    assert len(server.posts("/v1/account_links")) == 3
    # Finished: payouts enabled.
    server.accounts["acct_0001"].update(details_submitted=True, payouts_enabled=True)
    walt.get("/ui/payments/onboarding/return")
    page = walt.get("/ui/payments").text
    assert "Stripe onboarding is complete" in page and 'id="onboarded"' in page
    assert "Set up payouts with Stripe" not in page
