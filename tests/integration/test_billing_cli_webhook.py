"""`peermr bill` and the Stripe webhook on a running appliance (`peermr serve` in a subprocess)."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support import Appliance

SECRET = "whsec_peermr_test_secret"


@pytest.fixture(scope="module")
def server(appliance_with):
    return appliance_with(stripe_webhook_secret=SECRET)


def run_python(appliance: Appliance, code: str) -> str:
    """Billing service calls in a process of their own on the appliance's store (as the CLI works)."""
    header = textwrap.dedent(
        f"""
        import asyncio, datetime as dt
        from appliance import db
        from appliance.billing import ledger, prices, settlement
        from appliance.billing.context import BillingContext
        from appliance.billing.ledger import Entry
        from appliance.billing.tables import Invoice
        from appliance.config import load_settings

        settings = load_settings({{"data_dir": {str(appliance.data_dir)!r}}})
        db.configure(settings)
        billing = BillingContext.from_settings(settings)

        async def main():
        """
    )
    script = header + textwrap.indent(textwrap.dedent(code).strip(), "    ") + "\n\nasyncio.run(main())\n"
    result = subprocess.run(
        [sys.executable, "-c", script], env=appliance.env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def signed(payload: bytes, secret: str = SECRET, at: int | None = None) -> str:
    at = int(time.time()) if at is None else at
    signature = hmac.new(secret.encode(), f"{at}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={at},v1={signature}"


@pytest.fixture(scope="module")
def closed_march(server):
    server.add_user("carol@example.com", "coordinator", "carol-password-1")
    [(carol,)] = server.query("SELECT id FROM accounts_user WHERE email = 'carol@example.com'")
    run_python(
        server,
        f"""
        await prices.set_price("cpu_ms", "100", "50", dt.date(2026, 1, 1), tz=billing.tz)
        at = dt.datetime(2026, 3, 9, tzinfo=dt.UTC)
        await ledger.record([Entry({carol}, "cpu_ms", "consumer", 2 * 3_600_000, "cli-test", at)], billing.tz)
        """,
    )
    return carol


def test_bill_dry_run_prints_the_statements_without_writing(server, closed_march):
    result = server.cli("bill", "--period", "2026-03", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "would close with these statements (nothing was written)" in result.stdout
    assert "carol@example.com: invoice 2.00 USD" in result.stdout
    assert "7200000 millisecond of task execution(s) at 100 per CPU-hour: 2.00 USD" in result.stdout
    assert server.query("SELECT COUNT(*) FROM billing_statement") == [(0,)]
    assert server.query("SELECT COUNT(*) FROM billing_period") == [(0,)]

    closed = server.cli("bill", "--period", "2026-03")
    assert closed.returncode == 0, closed.stderr
    assert "2026-03 closed now." in closed.stdout and "carol@example.com: invoice 2.00 USD" in closed.stdout
    again = server.cli("bill", "--period", "2026-03")
    assert "2026-03 was already closed." in again.stdout
    assert server.query("SELECT key, amount, state FROM billing_invoice") == [
        (f"peermr-invoice-{closed_march}-2026-03", 200, "offline")  # no Stripe key: a statement to settle by hand
    ]
    csv_out = server.cli("bill", "--period", "2026-03", "--dry-run", "--csv").stdout
    assert csv_out.splitlines()[1].startswith(f"2026-03,{closed_march},carol@example.com,invoice,cpu_ms,7200000,")


def test_bill_refuses_a_malformed_or_unfinished_period(server):
    result = server.cli("bill", "--period", "March")
    assert result.returncode == 1 and "is not a period like 2026-05" in result.stderr
    result = server.cli("bill", "--period", "2999-01")
    assert result.returncode == 1 and "not over yet" in result.stderr
    result = server.cli("bill", "--period", "2999-01", "--dry-run")
    assert result.returncode == 1 and "has not started yet" in result.stderr


def test_bill_dry_run_previews_the_month_under_way(server, closed_march):
    this_month = dt.datetime.now(dt.UTC).strftime("%Y-%m")  # the appliance's time zone is UTC here
    run_python(
        server,
        f"""
        at = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        await ledger.record([Entry({closed_march}, "cpu_ms", "consumer", 3_600_000, "cli-now", at)], billing.tz)
        """,
    )
    preview = server.cli("bill", "--period", this_month, "--dry-run")
    assert preview.returncode == 0, preview.stderr
    assert f"Preview: {this_month} so far, as it would close now (nothing was written)." in preview.stdout
    assert "carol@example.com: invoice 1.00 USD" in preview.stdout
    assert server.query(f"SELECT COUNT(*) FROM billing_period WHERE period = '{this_month}'") == [(0,)]
    closing = server.cli("bill", "--period", this_month)  # closing it still waits for the month's end
    assert closing.returncode == 1 and "not over yet" in closing.stderr


def test_a_webhook_with_a_bad_signature_is_refused_and_a_good_one_updates_the_status(server, closed_march):
    if not server.query("SELECT COUNT(*) FROM billing_invoice")[0][0]:
        assert server.cli("bill", "--period", "2026-03").returncode == 0
    run_python(server, "await Invoice.update({Invoice.stripe_invoice: 'in_test_1', Invoice.state: 'sent'}, force=True)")
    client = server.client()
    event = {
        "id": "evt_1",
        "object": "event",
        "type": "invoice.paid",
        "data": {"object": {"id": "in_test_1", "object": "invoice", "status": "paid"}},
    }
    payload = json.dumps(event).encode()
    headers = {"Content-Type": "application/json"}
    for bad in (
        signed(payload, secret="whsec_someone_else"),
        signed(payload, at=int(time.time()) - 3600),  # replayed an hour later
        "t=1,v1=00",
        None,
    ):
        response = client.post(
            "/billing/stripe/webhook",
            content=payload,
            headers={**headers, **({"Stripe-Signature": bad} if bad else {})},
        )
        assert response.status_code == 400, response.text
    assert server.query("SELECT stripe_status FROM billing_invoice") == [("",)]
    response = client.post(
        "/billing/stripe/webhook", content=payload, headers={**headers, "Stripe-Signature": signed(payload)}
    )
    assert response.status_code == 200, response.text
    assert response.json()["outcome"].endswith(": paid")
    assert server.query("SELECT stripe_status FROM billing_invoice") == [("paid",)]
    # A body changed after signing is refused.
    tampered = payload.replace(b'"paid"', b'"void"')
    response = client.post(
        "/billing/stripe/webhook", content=tampered, headers={**headers, "Stripe-Signature": signed(payload)}
    )
    assert response.status_code == 400
    assert server.query("SELECT stripe_status FROM billing_invoice") == [("paid",)]


def test_months_missed_while_the_appliance_was_down_are_closed_at_the_next_start(tmp_path):
    appliance = Appliance(tmp_path / "data")
    appliance.start()
    appliance.stop()
    # Usage of a month long past, recorded while the appliance is down (as if it had been down since).
    run_python(
        appliance,
        """
        at = dt.datetime(2026, 2, 20, tzinfo=dt.UTC)
        await ledger.record([Entry(1, "turn_bytes", "consumer", 123, "missed", at)], billing.tz)
        """,
    )
    assert appliance.query("SELECT COUNT(*) FROM billing_period") == [(0,)]
    appliance.start()
    try:
        # Every missed month is closed before the log line says so (about half a second each here).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "missed while the appliance was down" not in appliance.log():
            time.sleep(0.2)
        periods = [p for (p,) in appliance.query("SELECT period FROM billing_period ORDER BY period")]
        assert periods[0] == "2026-02" and len(periods) >= 1
        assert appliance.query("SELECT account, period, total FROM billing_statement") == [(1, "2026-02", 0)]
        assert "closed billing period(s) missed while the appliance was down: 2026-02" in appliance.log()
    finally:
        appliance.stop()
