"""The usage ledger, the meters' rules, prices and statements, on a SQLite store of their own (no Stripe)."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from zoneinfo import ZoneInfo

import pytest

from appliance import db
from appliance.accounts import users
from appliance.accounts.actor import Actor
from appliance.billing import ledger, meters, prices, settlement, statements
from appliance.billing.context import BillingContext
from appliance.billing.ledger import CONSUMER, PROVIDER, Entry
from appliance.billing.tables import Invoice, Payout, UsageEntry
from appliance.config import load_settings
from appliance.events import TransferFinished
from appliance.fleet.transfers import Transfers, TransferTag
from appliance.pmrfs import namenode, service
from appliance.turn.tables import RelayUsage

MARCH = dt.datetime(2026, 3, 10, 12, tzinfo=dt.UTC)
UTC = ZoneInfo("UTC")
# The appliance's billing context as create_app builds it without Stripe, in UTC.
BILLING = BillingContext(UTC)


@pytest.fixture
async def store(tmp_path):
    settings = load_settings({"data_dir": str(tmp_path / "data")}, environ={})
    db.configure(settings)
    await db.migrate()
    yield settings


def entry(account, resource, quantity, source, side=CONSUMER, at=MARCH, run=None) -> Entry:
    return Entry(account, resource, side, quantity, source, at, run)


async def test_sums_equal_the_events_fed_in_to_the_unit(store):
    rng = random.Random(6)
    expected: Counter = Counter()
    events = []
    for i in range(600):
        account = rng.randint(1, 5)
        resource = rng.choice(list(ledger.RESOURCES))
        side = rng.choice([CONSUMER, PROVIDER])
        quantity = rng.randint(1, 10**12)
        at = MARCH + dt.timedelta(minutes=rng.randint(-8000, 8000))
        events.append(entry(account, resource, quantity, f"event-{i}", side, at))
        expected[(account, resource, side, at.strftime("%Y-%m"))] += quantity
    # Every event is reported twice, in another order: the second report of a source is ignored.
    assert await ledger.record(events, UTC) == 600
    assert await ledger.record(list(reversed(events)), UTC) == 0
    got = Counter()
    for period in ("2026-03",):
        for total in await ledger.totals(period):
            got[(total.account, total.resource, total.side, period)] = total.quantity
    assert got == Counter({k: v for k, v in expected.items() if k[3] == "2026-03"})
    assert sum((await ledger.sums("2026-03", 1)).values()) == sum(
        v for (a, _, s, p), v in expected.items() if a == 1 and s == CONSUMER and p == "2026-03"
    )


async def test_entries_are_checked_and_corrections_are_new_rows(store):
    with pytest.raises(ledger.LedgerError):
        await ledger.record([entry(1, "bitcoins", 1, "x")], UTC)
    with pytest.raises(ledger.LedgerError):
        await ledger.record([Entry(1, "cpu_ms", "seller", 1, "x", MARCH)], UTC)
    with pytest.raises(ledger.LedgerError):
        await ledger.record([Entry(1, "cpu_ms", CONSUMER, 1, "x", MARCH.replace(tzinfo=None))], UTC)
    await ledger.record([entry(1, "cpu_ms", 1000, "run:1")], UTC)
    await ledger.record([entry(1, "cpu_ms", -250, "run:1:correction")], UTC)
    assert (await ledger.sums("2026-03", 1))["cpu_ms"] == 750
    assert await UsageEntry.count() == 2


async def test_the_appliance_time_zone_decides_the_period(store):
    late_march_utc = dt.datetime(2026, 3, 31, 20, tzinfo=dt.UTC)  # already 1 April in Auckland
    await ledger.record([entry(1, "cpu_ms", 5, "tz", at=late_march_utc)], ZoneInfo("Pacific/Auckland"))
    assert (await ledger.sums("2026-04", 1))["cpu_ms"] == 5
    assert (await ledger.sums("2026-03", 1))["cpu_ms"] == 0


def half_even(value: Decimal) -> int:
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


async def test_statement_lines_are_ledger_sums_times_prices_rounded_half_even(store):
    await prices.set_price("cpu_ms", "150", "100", dt.date(2026, 1, 1), tz=UTC)  # cents per CPU-hour
    await prices.set_price("p2p_bytes", "2.5", "1", dt.date(2026, 1, 1), tz=UTC)  # cents per GB
    await prices.set_price("turn_bytes", "9", "0", dt.date(2026, 1, 1), tz=UTC)
    # 1/2 cent exactly: rounds to the even neighbour (0), and 3/2 to 2.
    await ledger.record([entry(1, "p2p_bytes", 200_000_000, "a")], UTC)  # 0.2 GB * 2.5 = 0.5 cent
    await ledger.record([entry(2, "p2p_bytes", 600_000_000, "b")], UTC)  # 0.6 GB * 2.5 = 1.5 cents
    cpu = 12_345_678  # ms
    await ledger.record([entry(1, "cpu_ms", cpu, "c"), entry(3, "cpu_ms", cpu, "d", PROVIDER)], UTC)
    await ledger.record([entry(1, "turn_bytes", 3 * 10**9 + 1, "e")], UTC)
    found = {(s.account, s.kind): s for s in await statements.compute("2026-03", UTC)}
    one = {line.resource: line for line in found[(1, CONSUMER)].lines}
    assert one["p2p_bytes"].amount == 0
    assert {line.resource: line for line in found[(2, CONSUMER)].lines}["p2p_bytes"].amount == 2
    assert one["cpu_ms"].amount == half_even(Decimal(cpu) * 150 / 3_600_000) == 514
    assert one["turn_bytes"].amount == half_even(Decimal(3 * 10**9 + 1) * 9 / 10**9) == 27
    assert found[(1, CONSUMER)].total == sum(line.amount for line in found[(1, CONSUMER)].lines)
    assert found[(3, PROVIDER)].lines[0].amount == half_even(Decimal(cpu) * 100 / 3_600_000) == 343
    assert found[(3, PROVIDER)].lines[0].rate == Decimal("100")


async def test_a_price_change_mid_month_gives_a_line_per_price_and_never_rewrites_a_closed_month(store):
    await prices.set_price("cpu_ms", "100", "50", dt.date(2026, 1, 1), tz=UTC)
    await prices.set_price("cpu_ms", "300", "150", dt.date(2026, 3, 16), tz=UTC)
    hour = 3_600_000
    await ledger.record([entry(1, "cpu_ms", hour, "early", at=dt.datetime(2026, 3, 2, tzinfo=dt.UTC))], UTC)
    await ledger.record([entry(1, "cpu_ms", 2 * hour, "late", at=dt.datetime(2026, 3, 20, tzinfo=dt.UTC))], UTC)
    [statement] = await statements.compute("2026-03", UTC)
    assert [(line.quantity, line.rate, line.amount) for line in statement.lines] == [
        (hour, Decimal(100), 100),
        (2 * hour, Decimal(300), 600),
    ]
    result = await settlement.close_period(BILLING, "2026-03")
    assert result.closed_now and result.statements[0].total == 700
    with pytest.raises(prices.PriceError, match="closed"):
        await prices.set_price("cpu_ms", "1", "1", dt.date(2026, 3, 20), tz=UTC)
    await prices.set_price("cpu_ms", "1000", "1", dt.date(2026, 4, 1), tz=UTC)
    # Usage of March that arrives after the close counts in April, at April's price.
    await ledger.record([entry(1, "cpu_ms", hour, "straggler", at=dt.datetime(2026, 3, 30, tzinfo=dt.UTC))], UTC)
    assert (await settlement.close_period(BILLING, "2026-03")).statements[0].total == 700
    assert (await ledger.sums("2026-04", 1))["cpu_ms"] == hour
    [april] = await statements.compute("2026-04", UTC)
    assert april.total == 1000


async def test_one_currency_and_valid_rates(store):
    await prices.set_price("cpu_ms", "1", "1", currency="eur", tz=UTC)
    with pytest.raises(prices.PriceError, match="one currency"):
        await prices.set_price("gpu_ms", "1", "1", currency="usd", tz=UTC)
    for bad in ("-1", "abc", "NaN", "1e30"):
        with pytest.raises(prices.PriceError):
            await prices.set_price("gpu_ms", bad, "1", tz=UTC)
    assert (await prices.current(UTC))["cpu_ms"].currency == "eur"


# ------------------------------------------------------------------ meters and rules


def task(worker: str, account: int | None, cpu_ms: int, state: str = "done") -> meters.TaskUsage:
    return meters.TaskUsage(worker, account, state, cpu_ms)


async def test_a_run_bills_its_owner_and_pays_other_accounts_workers_but_not_its_own(store):
    owner, other, third = 10, 20, 30
    tasks = [
        task("w-own", owner, 1_000),
        task("w-other", other, 2_000),
        task("w-other", other, 500),
        task("w-third", third, 4_000, "lost"),  # not completed: neither billed nor paid
        task("w-third", third, 300),
    ]
    await meters.meter_run(7, owner, tasks, private=False, gpu=False, tz=UTC, at=MARCH)
    await meters.meter_run(7, owner, tasks, private=False, gpu=False, tz=UTC, at=MARCH)  # reported again: no change
    totals = {(t.account, t.resource, t.side): t.quantity for t in await ledger.totals("2026-03")}
    assert totals == {
        (owner, "cpu_ms", CONSUMER): 1_000 + 2_000 + 500 + 300,
        (other, "cpu_ms", PROVIDER): 2_500,
        (third, "cpu_ms", PROVIDER): 300,
    }


async def test_an_attempt_a_backup_beat_is_metered_too(store):
    # Speculation: the slow original and its backup both worked; the cancelled original's wall time counts.
    tasks = [task("w-slow", 20, 9_000, "superseded"), task("w-backup", 30, 2_000), task("w-x", 30, 50, "cancelled")]
    await meters.meter_run(11, 10, tasks, private=False, gpu=False, tz=UTC, at=MARCH)
    totals = {(t.account, t.resource, t.side): t.quantity for t in await ledger.totals("2026-03")}
    assert totals == {
        (10, "cpu_ms", CONSUMER): 11_000,
        (20, "cpu_ms", PROVIDER): 9_000,
        (30, "cpu_ms", PROVIDER): 2_000,
    }


async def test_a_gpu_run_is_metered_in_gpu_milliseconds(store):
    await meters.meter_run(8, 10, [task("w", 20, 900)], private=False, gpu=True, tz=UTC, at=MARCH)
    totals = {(t.account, t.resource, t.side): t.quantity for t in await ledger.totals("2026-03")}
    assert totals == {(10, "gpu_ms", CONSUMER): 900, (20, "gpu_ms", PROVIDER): 900}


async def test_a_private_run_bills_only_turn_bytes(store):
    await prices.set_price("cpu_ms", "100", "100", dt.date(2026, 1, 1), tz=UTC)
    await prices.set_price("turn_bytes", "10", "0", dt.date(2026, 1, 1), tz=UTC)
    await meters.meter_run(9, 10, [task("w", 10, 3_600_000)], private=True, gpu=False, tz=UTC, at=MARCH)
    transfers = Transfers()

    async def finished(tag):
        transfer = transfers.arrange("ab" * 32, 1000, "w1", "w2", tag, {"w1": 10, "w2": 10})
        transfers.report(transfer.id, "w1", 1000)
        transfers.report(transfer.id, "w2", 1000)
        transfers.finish(transfer, True)
        return transfer

    transfer = await finished(TransferTag(account=10, run=9, private=True))
    await ledger.record(meters.transfer_entries(transfer, MARCH), UTC)
    await RelayUsage.insert(relay_row("alloc-p", "10", "9", 10**9, 0, MARCH))
    await meters.sweep_turn(UTC)
    [statement] = await statements.compute("2026-03", UTC)
    assert [(line.resource, line.quantity, line.amount) for line in statement.lines] == [("turn_bytes", 10**9, 10)]
    assert (await ledger.totals("2026-03", side=PROVIDER)) == []


def relay_row(allocation: str, account: str, run: str | None, to_peer: int, from_peer: int, at: dt.datetime):
    return RelayUsage(
        allocation_id=allocation,
        account=account,
        run=run,
        client="udp 127.0.0.1:1",
        relay="127.0.0.1:2",
        started_at=at,
        updated_at=at,
        bytes_to_peer=to_peer,
        bytes_from_peer=from_peer,
    )


async def test_p2p_bytes_count_the_smaller_report_for_the_tagged_account(store):
    transfers = Transfers()
    tag = TransferTag(account=10, run=3)
    transfer = transfers.arrange("cd" * 32, 5000, "src", "dst", tag, {"src": 20, "dst": 30})
    transfers.report(transfer.id, "src", 5000)
    transfers.report(transfer.id, "dst", 4000)  # the receiver saw less: that counts
    transfers.report(transfer.id, "someone-else", 10**9)  # not an end of this transfer: ignored
    transfers.finish(transfer, True)
    entries = meters.transfer_entries(transfer, MARCH)
    assert {(e.account, e.side, e.quantity) for e in entries} == {
        (10, CONSUMER, 8000),  # ingress + egress
        (20, PROVIDER, 4000),
        (30, PROVIDER, 4000),
    }
    # A report that only arrives after the transfer finished still counts; an inflated one is capped.
    late = transfers.arrange("ef" * 32, 100, "src", "own", tag, {"src": 20, "own": 10})
    transfers.report(late.id, "own", 100)
    transfers.finish(late, True)
    assert meters.transfer_entries(late, MARCH) == []  # one report only: nothing counts yet
    transfers.report(late.id, "src", 10**9)
    assert {(e.account, e.side, e.quantity) for e in meters.transfer_entries(late, MARCH)} == {
        (10, CONSUMER, 200),
        (20, PROVIDER, 100),  # the owner's own browser ("own") earns nothing
    }


async def test_the_transfer_meter_waits_for_the_second_report(store):
    transfers = Transfers()
    meter = meters.TransferMeter(UTC, grace=5)
    transfer = transfers.arrange("01" * 32, 700, "a", "b", TransferTag(account=1), {"a": 2, "b": 3})
    transfers.report(transfer.id, "b", 700)
    transfers.finish(transfer, True)
    meter.transfer_finished(TransferFinished(transfer, True))
    await asyncio.sleep(0.3)
    transfers.report(transfer.id, "a", 700)
    await meter.stop()
    totals = {(t.account, t.side): t.quantity for t in await ledger.totals(side=None)}
    assert totals == {(1, CONSUMER): 1400, (2, PROVIDER): 700, (3, PROVIDER): 700}


async def test_turn_bytes_are_swept_once_by_run_owner_or_named_account(store):
    coordinator, _ = await users.create_user("coord@example.com", "coordinator", "coordinator-pass-1")
    from appliance.jobs.tables import Run

    run = Run(owner=coordinator.id, job_name="j", spec="{}", state="succeeded", queued_at=MARCH)
    await run.save()
    await RelayUsage.insert(
        relay_row("alloc-1", "77", str(run.id), 1000, 500, MARCH),  # a worker of account 77 relayed for the run
        relay_row("alloc-2", "77", None, 40, 2, MARCH),
    )
    assert await meters.sweep_turn(UTC) == 2
    assert await meters.sweep_turn(UTC) == 0
    await RelayUsage.update({RelayUsage.bytes_to_peer: 3000, RelayUsage.updated_at: MARCH}).where(
        RelayUsage.allocation_id == "alloc-1"
    )
    assert await meters.sweep_turn(UTC) == 1
    totals = {(t.account, t.resource): t.quantity for t in await ledger.totals("2026-03")}
    assert totals == {(coordinator.id, "turn_bytes"): 3500, (77, "turn_bytes"): 42}


async def test_storage_byte_hours_charge_the_owner_and_credit_connected_holders(store):
    owner_account, _ = await users.create_user("owner@example.com", "coordinator", "owner-password-1")
    owner = Actor(user_id=owner_account.id, role="coordinator")
    await service.create_bucket(owner, "shared", private=False)
    await service.create_bucket(owner, "mine", private=True)
    from appliance.pmrfs.blobstore import store_for
    from appliance.pmrfs.namenode import LiveHolders

    blobs = store_for(store.data_path)

    async def put(bucket, key, data):
        async def body():
            yield data

        await service.put_object(owner, bucket, key, body(), blobs, max_bytes=1 << 30)
        return [b.sha256 for b in (await service.object_status(owner, bucket, key, LiveHolders())).blobs][0]

    public_sha = await put("shared", "a", b"p" * 1000)
    private_sha = await put("mine", "b", b"q" * 300)
    for holder in ("worker-x", "worker-own", "worker-gone"):
        await namenode.add_replica(public_sha, holder)
    await namenode.add_replica(private_sha, "worker-own")
    await namenode.add_replica(public_sha, "worker-unconfirmed", confirmed=False)
    live = {"worker-x": 55, "worker-own": owner_account.id}  # worker-gone is not connected
    hour = dt.datetime(2026, 3, 5, 14, 37, tzinfo=dt.UTC)
    await meters.sample_storage(live, UTC, hour)
    await meters.sample_storage(live, UTC, hour + dt.timedelta(minutes=10))  # same hour: nothing new
    await meters.sample_storage(live, UTC, hour + dt.timedelta(hours=1))
    totals = {(t.account, t.side): t.quantity for t in await ledger.totals("2026-03")}
    assert totals == {
        (owner_account.id, CONSUMER): 2 * (1000 + 1000),  # two connected replicas of the public blob, 2 hours
        (55, PROVIDER): 2 * 1000,
    }


async def test_close_twice_and_dry_run_write_nothing_more(store):
    await prices.set_price("cpu_ms", "3600000", "1800000", dt.date(2026, 1, 1), tz=UTC)  # a cent per ms (and half)
    await ledger.record([entry(1, "cpu_ms", 7, "x"), entry(2, "cpu_ms", 7, "y", PROVIDER)], UTC)
    dry = await settlement.close_period(BILLING, "2026-03", dry_run=True)
    assert dry.dry_run and not dry.closed_now and [s.total for s in dry.statements] == [7, 4]  # 3.5 -> 4
    assert await Invoice.count() == 0 and not await settlement.is_closed("2026-03")
    first = await settlement.close_period(BILLING, "2026-03")
    again = await settlement.close_period(BILLING, "2026-03")
    assert first.closed_now and not again.closed_now
    assert [s.total for s in again.statements] == [7, 4]
    assert await Invoice.count() == 1 and await Payout.count() == 1
    invoice = await Invoice.select().first()
    assert (invoice["key"], invoice["state"]) == ("peermr-invoice-1-2026-03", "offline")  # no Stripe keys
    with pytest.raises(settlement.BillingError, match="not over"):
        await settlement.close_period(BILLING, "2099-01")


async def test_missed_months_are_closed_in_order(store):
    await ledger.record([entry(1, "cpu_ms", 1, "jan", at=dt.datetime(2026, 1, 3, tzinfo=dt.UTC))], UTC)
    await ledger.record([entry(1, "cpu_ms", 1, "mar", at=MARCH)], UTC)
    closed = await settlement.close_due(BILLING, at=dt.datetime(2026, 4, 2, tzinfo=dt.UTC))
    assert closed == ["2026-01", "2026-02", "2026-03"]
    assert await settlement.close_due(BILLING, at=dt.datetime(2026, 4, 2, tzinfo=dt.UTC)) == []


# ------------------------------------------------------------------ the service the pages use


async def test_the_service_gives_usage_the_daily_chart_an_estimate_and_csv(store):
    from appliance.billing import service

    await prices.set_price("cpu_ms", "360", "0", dt.date(2026, 1, 1), tz=UTC)  # 0.1 cent per second
    await ledger.record(
        [
            entry(1, "cpu_ms", 10_000, "d3", at=dt.datetime(2026, 3, 3, 10, tzinfo=dt.UTC)),
            entry(1, "cpu_ms", 5_000, "d3b", at=dt.datetime(2026, 3, 3, 23, tzinfo=dt.UTC)),
            entry(1, "turn_bytes", 99, "d9", at=dt.datetime(2026, 3, 9, tzinfo=dt.UTC)),
        ],
        UTC,
    )
    assert (await service.usage(UTC, 1, "2026-03"))["cpu_ms"] == 15_000
    days = dict(await service.usage_by_day(UTC, 1, "2026-03"))
    assert len(days) == 31 and days[dt.date(2026, 3, 3)]["cpu_ms"] == 15_000
    assert days[dt.date(2026, 3, 9)]["turn_bytes"] == 99 and days[dt.date(2026, 3, 4)]["cpu_ms"] == 0
    estimate = await service.estimate(UTC, 1, "2026-03")
    assert (estimate.total, estimate.id) == (2, None)  # 1.5 cents rounds half-to-even to 2
    empty = await service.estimate(UTC, 42, "2026-03", kind=PROVIDER)
    assert (empty.lines, empty.total, empty.currency) == ([], 0, "usd")
    await settlement.close_period(BILLING, "2026-03")
    assert (await service.estimate(UTC, 1, "2026-03")).id is not None  # a closed month: its stored statement
    [invoice] = await service.invoices(account=1)
    assert (invoice.amount, invoice.state, invoice.key) == (2, "offline", "peermr-invoice-1-2026-03")
    rows = (await service.statements_csv("2026-03")).splitlines()
    assert rows[0].startswith("period,account,email,kind,resource,quantity")
    assert rows[1].startswith("2026-03,1,,invoice,cpu_ms,15000,millisecond of task execution,360,CPU-hour,2,usd,2,")
    assert rows[1].endswith(",offline") and len(rows) == 3
    assert service.format_money(123456, "usd") == "1,234.56 USD"
    assert service.format_money(-5, "eur") == "-0.05 EUR"
    assert service.format_money(1200, "jpy") == "1,200 JPY"


def test_the_monthly_close_runs_on_the_first_in_the_appliance_time_zone():
    from appliance.billing import housekeeping
    from appliance.events import EventHub
    from appliance.fleet.registry import Fleet
    from appliance.scheduler import create_scheduler

    scheduler = create_scheduler(housekeeping.jobs(Fleet(EventHub()), BILLING), "Europe/Paris")
    job = next(j for j in scheduler.get_jobs() if j.id == "billing.monthly_close")
    after = dt.datetime.now(dt.UTC) + dt.timedelta(days=40)
    fire = job.trigger.get_next_fire_time(None, after)
    assert (fire.day, fire.hour, fire.minute, str(fire.tzinfo)) == (1, 0, 15, "Europe/Paris")
    assert fire - after < dt.timedelta(days=32)
    storage = next(j for j in scheduler.get_jobs() if j.id == "billing.sample_storage")
    assert storage.trigger.get_next_fire_time(None, after).minute == 0
