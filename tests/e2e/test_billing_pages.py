"""The Billing and Payments pages in a real Chromium: the usage chart (server-rendered SVG) and the worker's earnings.

Usage is recorded with the backend's ``ledger.record`` in a process of its own on the appliance's
store (as the meters write it), on several days of this month; prices are set with the admin's form.
"""

from __future__ import annotations

import datetime as dt

import pytest
from playwright.sync_api import Page, expect

from appliance.billing import periods
from appliance.billing.views import month_days, month_label
from tests.integration.test_billing_pages import UTC, account_id, run_python
from tests.support import ADMIN_EMAIL, ADMIN_PASSWORD, Appliance

pytestmark = pytest.mark.e2e
PASSWORD = "billing-password-1"
HOUR = 3_600_000
GB = 10**9


def sign_in(page: Page, appliance: Appliance, email: str, password: str = PASSWORD) -> None:
    page.goto(f"{appliance.url}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()


@pytest.fixture(scope="module")
def usage(appliance: Appliance):
    appliance.add_user("cora@example.com", "coordinator", PASSWORD)
    appliance.add_user("wes@example.com", "worker", PASSWORD)
    cora, wes = account_id(appliance, "cora@example.com"), account_id(appliance, "wes@example.com")
    now = dt.datetime.now(dt.UTC)
    start = periods.bounds(periods.of(now, UTC), UTC)[0]
    # Usage on up to four days of this month so far (the 1st, 3rd, 6th and 10th, those that have come).
    days = sorted({start + dt.timedelta(days=d, hours=1) for d in (0, 2, 5, 9) if start + dt.timedelta(days=d) <= now})
    entries = []
    for i in range(len(days)):
        entries += [
            f"Entry({cora}, 'cpu_ms', 'consumer', {(i + 1) * HOUR}, 'e2e:cpu:{i}', at{i})",
            f"Entry({cora}, 'p2p_bytes', 'consumer', {(i + 2) * GB}, 'e2e:p2p:{i}', at{i})",
            f"Entry({wes}, 'cpu_ms', 'provider', {(i + 1) * HOUR}, 'e2e:paid:{i}', at{i})",
        ]
    # And one earning of the worker's last month, so its Payments page has two months to choose from.
    earlier = periods.bounds(periods.preceding(periods.of(now, UTC)), UTC)[0] + dt.timedelta(days=3)
    days_and_earlier = [*days, earlier]
    entries.append(f"Entry({wes}, 'cpu_ms', 'provider', {HOUR}, 'e2e:paid:earlier', at{len(days)})")
    times = "\n".join(f"at{i} = dt.datetime.fromisoformat({at.isoformat()!r})" for i, at in enumerate(days_and_earlier))
    run_python(
        appliance,
        f"""
        from appliance.billing import prices
        await prices.set_price("cpu_ms", "60", "40", dt.date(2026, 1, 1), tz=billing.tz)
        await prices.set_price("p2p_bytes", "5", "2", dt.date(2026, 1, 1), tz=billing.tz)
        {times.replace(chr(10), chr(10) + "        ")}
        assert await ledger.record([{", ".join(entries)}], billing.tz) == {len(entries)}
        """,
    )
    return len(days)


def test_the_coordinator_billing_page_shows_the_usage_chart(page: Page, appliance: Appliance, usage: int):
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    sign_in(page, appliance, "cora@example.com")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Billing").click()
    expect(page.get_by_role("heading", name="Billing", exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="Usage in")).to_be_visible()

    chart = page.locator("#usage-chart svg")
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    assert box and box["width"] > 300 and box["height"] > 200, box
    # A band per resource; the CPU and peer-to-peer bands have a bar per day with usage, drawn (not empty).
    expect(chart.locator("g.band")).to_have_count(5)
    cpu_bars = chart.locator("g.band-cpu_ms rect.bar")
    expect(cpu_bars).to_have_count(usage)
    expect(chart.locator("g.band-p2p_bytes rect.bar")).to_have_count(usage)
    expect(chart.locator("g.band-gpu_ms rect.bar")).to_have_count(0)
    heights = [cpu_bars.nth(i).bounding_box()["height"] for i in range(usage)]
    assert all(h > 0 for h in heights) and heights == sorted(heights), heights  # each day used more than the last
    fill = cpu_bars.first.evaluate("bar => getComputedStyle(bar).fill")
    assert fill not in ("", "none", "rgb(0, 0, 0)"), fill  # the stylesheet coloured it (no inline style needed)
    days = int(chart.get_attribute("data-days"))
    assert days == len(month_days(periods.of(dt.datetime.now(dt.UTC), UTC)))
    expect(chart.locator("text.tick").last).to_have_text(str(days))
    expect(chart.locator("g.band-gpu_ms text.band-peak")).to_have_text("no usage")

    # The estimate: CPU at 0.60 USD per CPU-hour and peer-to-peer at 0.05 USD per GB.
    hours = sum(range(1, usage + 1))
    gigabytes = sum(range(2, usage + 2))
    cents = hours * 60 + gigabytes * 5
    expect(page.locator("#estimate-total")).to_have_text(f"{cents // 100}.{cents % 100:02d} USD")
    expect(page.locator('#usage-table tr[data-resource="cpu_ms"] td.quantity')).to_have_text(f"{hours} h")
    expect(page.locator("#no-invoices")).to_be_visible()

    # The table behind the chart opens without a script of ours (a <details> element).
    page.get_by_text("The same figures as a table").click()
    expect(page.locator(".chart-table tbody tr")).to_have_count(usage)
    assert not [p for p in problems if "Content Security Policy" in p or "Refused" in p], problems


def test_the_worker_payments_page_shows_earnings_and_onboarding(page: Page, appliance: Appliance, usage: int):
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    sign_in(page, appliance, "wes@example.com")
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Billing")).to_have_count(0)
    nav.get_by_role("link", name="Payments").click()
    expect(page.get_by_role("heading", name="Payments", exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="Contribution in")).to_be_visible()
    hours = sum(range(1, usage + 1))
    expect(page.locator("#estimate-total")).to_have_text(f"{hours * 40 // 100}.{hours * 40 % 100:02d} USD")
    expect(page.locator("#earned")).to_have_text(f"{hours * 40 // 100}.{hours * 40 % 100:02d} USD")
    expect(page.locator("#usage-chart g.band-cpu_ms rect.bar")).to_have_count(usage)
    # No Stripe keys on this appliance: the page says how the worker gets paid instead of a button.
    expect(page.locator("#stripe-not-configured")).to_be_visible()
    expect(page.get_by_role("button", name="Set up payouts with Stripe")).to_have_count(0)
    expect(page.locator("#no-payouts")).to_be_visible()

    # Choosing another month swaps only the usage panel (htmx), without reloading the page.
    page.evaluate("window.__marker = 'same page'")
    last_month = periods.preceding(periods.of(dt.datetime.now(dt.UTC), UTC))
    page.locator('#usage select[name="period"]').select_option(last_month)
    expect(page.locator("#usage h2")).to_have_text(f"Contribution in {month_label(last_month)}")
    expect(page.locator("#estimate-total")).to_have_text("0.40 USD")
    expect(page.locator("#usage-chart g.band-cpu_ms rect.bar")).to_have_count(1)
    assert page.evaluate("window.__marker") == "same page"
    expect(page.locator("#onboarding")).to_be_visible()  # the rest of the page stayed
    assert not problems, problems


def test_the_admin_sets_a_price_with_the_form(page: Page, appliance: Appliance, usage: int):
    sign_in(page, appliance, ADMIN_EMAIL, ADMIN_PASSWORD)
    page.goto(f"{appliance.url}/ui/admin/billing")
    form = page.locator("#price-form")
    form.get_by_label("Resource").select_option("turn_bytes")
    form.get_by_label("Coordinator price").fill("0.08")
    form.get_by_label("Worker payout rate").fill("0.10")
    form.get_by_role("button", name="Save price").click()
    expect(page.locator(".field-error")).to_have_text("The worker payout rate cannot be above the coordinator price.")
    page.locator("#price-form").get_by_label("Worker payout rate").fill("0")
    page.locator("#price-form").get_by_role("button", name="Save price").click()
    expect(page.get_by_role("status")).to_contain_text("TURN relay: new price from")
    expect(page.locator('#current-prices tr[data-resource="turn_bytes"]')).to_contain_text("0.08 USD")
