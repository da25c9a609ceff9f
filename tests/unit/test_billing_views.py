"""Read helpers of the Billing, Payments and admin Billing pages: units, rates, the chart, the price form."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from appliance.billing import views
from appliance.billing.ledger import CONSUMER, RESOURCES
from appliance.billing.statements import Line, StatementInfo

TODAY = dt.date(2026, 11, 21)


@pytest.mark.parametrize(
    "resource,quantity,shown",
    [
        ("cpu_ms", 0, "—"),
        ("cpu_ms", 850, "850 ms"),
        ("cpu_ms", 12_500, "12.5 s"),
        ("cpu_ms", 9_000_000, "2.5 h"),
        ("gpu_ms", 252_000, "4.2 min"),
        ("p2p_bytes", 3 * 10**9, "2.79 GiB"),
        ("turn_bytes", 1_234_567, "1.18 MiB"),
        ("turn_bytes", 999, "999 B"),
        ("storage_byte_hours", 1_460 * 10**9, "1.33 TiB·h"),
        ("p2p_bytes", -2 * 10**9, "-1.86 GiB"),
    ],
)
def test_quantities_in_human_units(resource, quantity, shown):
    assert views.human_quantity(resource, quantity) == shown


def test_pricing_units_and_rates():
    assert views.in_price_units("cpu_ms", 9_000_000) == "2.5 CPU-hour"
    assert views.in_price_units("storage_byte_hours", 1_460 * 10**9) == "2 GB-month (10^9 bytes for 730 h)"
    assert views.in_price_units("storage_byte_hours", 10_200 * 10**9).startswith("13.97 GB-month")
    assert views.in_price_units("cpu_ms", 1500) == "0.0004167 CPU-hour"
    assert views.in_price_units("p2p_bytes", 1234 * 10**9) == "1,234 GB (10^9 bytes)"
    assert views.format_rate(Decimal("60"), "usd") == "0.60 USD"
    assert views.format_rate(Decimal("0.5"), "eur") == "0.005 EUR"
    assert views.format_rate(Decimal("1200"), "usd") == "12.00 USD"
    assert views.format_rate(Decimal("15"), "jpy") == "15 JPY"
    assert views.rate_in_major(Decimal("7.5"), "usd") == "0.075"
    assert views.month_label("2026-03") == "March 2026"


def test_usage_rows_merge_the_estimate_lines_of_a_resource():
    estimate = StatementInfo(
        7,
        "2026-11",
        CONSUMER,
        "usd",
        [
            Line("cpu_ms", 3_600_000, Decimal(60), 60, 1),
            Line("cpu_ms", 3_600_000, Decimal(80), 80, 2),  # the price changed mid-month
            Line("gpu_ms", 1000, Decimal(0), 0, None),  # no price
        ],
        140,
    )
    rows = {r.resource: r for r in views.usage_rows({"cpu_ms": 7_200_000, "gpu_ms": 1000}, estimate)}
    assert list(rows) == list(RESOURCES)
    assert rows["cpu_ms"].amount == 140 and rows["cpu_ms"].rates == ["0.60 USD", "0.80 USD"]
    assert rows["cpu_ms"].human == "2 h" and rows["cpu_ms"].used
    assert rows["gpu_ms"].rates == [] and rows["gpu_ms"].amount == 0
    assert not rows["turn_bytes"].used and rows["turn_bytes"].human == "—"


def test_the_chart_has_a_band_per_resource_and_a_bar_per_day_with_usage():
    daily = [
        (dt.date(2026, 11, 1), {"cpu_ms": 1000, "p2p_bytes": 0}),
        (dt.date(2026, 11, 2), {"cpu_ms": 4000}),
        (dt.date(2026, 11, 21), {"p2p_bytes": 5 * 10**9}),
    ]
    chart = views.usage_chart("2026-11", daily, TODAY)
    assert chart.days == 30 and [b.resource for b in chart.bands] == list(RESOURCES)
    cpu, gpu, storage, p2p, turn = chart.bands
    assert len(cpu.bars) == 2 and not gpu.bars and not storage.bars and len(p2p.bars) == 1
    # Each band is scaled to its own busiest day; the bars sit on the band's baseline.
    small, big = cpu.bars
    assert big.height == pytest.approx(views.BAND_HEIGHT) and small.height == pytest.approx(views.BAND_HEIGHT / 4)
    assert all(bar.y + bar.height == pytest.approx(cpu.baseline) for bar in cpu.bars)
    assert small.x < big.x < p2p.bars[0].x < chart.width
    assert cpu.peak == "4 s" and cpu.total == "5 s" and gpu.peak == "" and p2p.peak == "4.66 GiB"
    assert "2026-11-02: 4 s of CPU" in big.title
    assert chart.bar_count == 3 and not chart.empty
    assert chart.today_x == pytest.approx(21 * views.CHART_WIDTH / 30)
    assert [label for _, label in chart.ticks] == ["1", "5", "10", "15", "20", "25", "30"]
    assert chart.height > views.TOP + 5 * views.BAND_HEIGHT
    # A day far smaller than the busiest stays visible.
    tiny = views.usage_chart("2026-11", [(dt.date(2026, 11, 3), {"cpu_ms": 1}), (TODAY, {"cpu_ms": 10**9})])
    assert tiny.bands[0].bars[0].height >= 1.5
    assert views.usage_chart("2026-02", []).days == 28 and views.usage_chart("2026-02", []).empty


def form(**fields):
    values = {"resource": "cpu_ms", "consumer": "0.60", "provider": "0.40", "effective": "", "currency": "USD"}
    values.update(fields)
    return views.parse_price_form(
        values["resource"], values["consumer"], values["provider"], values["effective"], values["currency"], TODAY
    )


def test_the_price_form_takes_major_units_and_a_date():
    parsed, errors = form(effective="2026-12-01")
    assert errors == {}
    assert (parsed.consumer_rate, parsed.provider_rate) == (Decimal("60.00"), Decimal("40.00"))
    assert parsed.effective_from == dt.date(2026, 12, 1) and parsed.currency == "usd"
    assert form(effective="")[0].effective_from == TODAY
    assert form(consumer="0.000125", provider="0")[0].consumer_rate == Decimal("0.012500")
    assert form(consumer="1,000", provider="0", currency="jpy")[0].consumer_rate == Decimal(1000)


@pytest.mark.parametrize(
    "fields,field,message",
    [
        ({"resource": "bananas"}, "resource", "Choose a resource"),
        ({"consumer": ""}, "consumer_rate", "enter an amount"),
        ({"consumer": "-1"}, "consumer_rate", "non-negative amount in USD"),
        ({"consumer": "abc"}, "consumer_rate", "non-negative amount"),
        ({"consumer": "1e3"}, "consumer_rate", "non-negative amount"),
        ({"provider": "0.0000001"}, "provider_rate", "at most 6 decimals"),
        ({"provider": "0.70"}, "provider_rate", "cannot be above the coordinator price"),
        ({"effective": "01/12/2026"}, "effective_from", "A date like"),
        ({"currency": "dollars"}, "currency", "three-letter currency code"),
    ],
)
def test_the_price_form_refuses_bad_fields(fields, field, message):
    parsed, errors = form(**fields)
    assert parsed is None and message in errors[field]
