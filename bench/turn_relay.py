"""TURN relay throughput of the appliance against coturn's turnserver, in the same run.

The same load from coturn's own test client goes through each server, over UDP and over TCP:
``turnutils_uclient -m 10 -l 1000 -z 0 -n 10000`` (10 sessions, 1000-byte messages sent through
a channel as fast as uclient can, 10,000 each), relayed to ``turnutils_peer`` (a UDP echo server)
and back. Debian's coturn package provides all three programs; they are installed when missing.
Unpaced, the UDP legs overflow socket buffers with coturn too, so loss varies from run to run;
``--repeat 3`` prints medians.

Printed for each server and transport:
  transmit s   uclient's own "Total transmit time" (whole seconds; it counts the 1-6 s random
               start of each session and, when a message was lost, 10 s spent waiting for it)
  active s     seconds during which messages flowed, from uclient's per-second progress lines
  msgs/s       echoes received per active second
  peak/s       most echoes received in one second
  loss %       messages sent that never came back
and the ratio ours/coturn. Target: at least 0.5 of coturn's rate with no more loss.

  .venv/bin/python bench/turn_relay.py                   # both servers
  .venv/bin/python bench/turn_relay.py --reference-only  # coturn only
Exits non-zero when our server fails to start or a run errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import secrets
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import Appliance  # noqa: E402
from tests.turn_tools import (  # noqa: E402
    CoturnServer,
    TurnPeer,
    UclientResult,
    ensure_coturn_tools,
    free_port_range,
    free_udp_tcp_port,
    run_uclient,
    wait_for_stun,
)

HOST = "127.0.0.1"
ACCOUNT = "1"  # the appliance's first account (the admin it creates); coturn takes any
TARGET_RATIO = 0.5
TRANSPORTS = ("udp", "tcp")


@dataclasses.dataclass
class Figures:
    transmit: float  # uclient's "Total transmit time", s
    active: float  # s during which messages flowed
    rate: float  # echoes received per active second
    peak: float  # most echoes received in one second
    loss: float  # % of the messages sent that never came back
    received: int
    sent: int


def figures(result: UclientResult) -> Figures:
    counts = [sample.received for sample in result.progress]
    peak = max((b - a for a, b in zip([0, *counts], counts, strict=False)), default=0)
    return Figures(
        transmit=float(result.transmit_seconds or 0),
        active=result.active_seconds or 0.0,
        rate=result.received_per_second or 0.0,
        peak=float(peak),
        loss=result.lost_percent or 0.0,
        received=result.received or 0,
        sent=result.sent or 0,
    )


def median(runs: list[UclientResult]) -> Figures:
    each = [figures(run) for run in runs]
    return Figures(
        **{field.name: statistics.median(getattr(f, field.name) for f in each) for field in dataclasses.fields(Figures)}
    )


def row(server: str, transport: str, f: Figures) -> str:
    return (
        f"{server:<10}{transport:<6}{f.transmit:>11.0f}{f.active:>9.0f}{f.rate:>10.0f}{f.peak:>9.0f}{f.loss:>9.2f}"
        f"{f.received:>10.0f}/{f.sent:.0f}"
    )


def failure(result: UclientResult) -> str | None:
    """Why a run cannot be measured, or None."""
    if result.timed_out:
        return f"uclient still running after {result.wall_seconds:.0f}s"
    if result.exit_code != 0:
        return f"uclient exited with {result.exit_code}: {'; '.join(result.errors[:3]) or result.output[-500:]}"
    if not result.sent or not result.received:
        return f"no messages relayed (sent {result.sent}, received {result.received})"
    return None


def start_ours(data_dir: Path, secret: str) -> tuple[Appliance, int]:
    port = free_udp_tcp_port(HOST)
    low, high = free_port_range(200, HOST)
    appliance = Appliance(
        data_dir,
        env={
            "PEERMR_LOG_LEVEL": "warning",
            "PEERMR_TURN_PORT": str(port),
            "PEERMR_TURN_SECRET": secret,
            "PEERMR_TURN_ALLOWED_PEERS": f"{HOST}/32",
            "PEERMR_TURN_MIN_PORT": str(low),
            "PEERMR_TURN_MAX_PORT": str(high),
            # Like coturn's default (no --max-bps): the same configuration for both servers.
            "PEERMR_TURN_BANDWIDTH_PER_ALLOCATION": "0",
        },
    )
    try:
        appliance.start()
        wait_for_stun(HOST, port, timeout=30)
    except Exception:
        appliance.stop()
        raise
    return appliance, port


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-only", action="store_true", help="measure coturn only, not our server")
    parser.add_argument("--clients", type=int, default=10, help="uclient -m (default 10)")
    parser.add_argument("--length", type=int, default=1000, help="uclient -l, bytes per message (default 1000)")
    parser.add_argument("--messages", type=int, default=10000, help="uclient -n, messages per session (default 10000)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per server and transport; medians printed")
    parser.add_argument("--timeout", type=float, default=180, help="seconds one uclient run may take (default 180)")
    return parser.parse_args()


def report_error(errors: list[str], text: str, line: str) -> None:
    errors.append(text)
    print(line, flush=True)


def run_round(
    transport: str,
    servers: dict[str, int],
    ours: Appliance | None,
    uclient: Callable[[int, bool], UclientResult],
    results: dict[tuple[str, str], list[UclientResult]],
    errors: list[str],
) -> None:
    """One uclient run through each server still up; ``servers`` loses ours when it has exited."""
    for name, port in list(servers.items()):
        if name == "ours" and ours is not None and ours.proc.poll() is not None:
            text = f"OUR SERVER EXITED with {ours.proc.returncode}:\n{ours.log()[-3000:]}"
            report_error(errors, text, f"*** {text}")
            del servers["ours"]
            continue
        result = uclient(port, transport == "tcp")
        if reason := failure(result):
            report_error(errors, f"{name} {transport}: {reason}", f"{name:<10}{transport:<6}  *** ERROR: {reason}")
        else:
            results.setdefault((name, transport), []).append(result)
            print(row(name, transport, figures(result)), flush=True)


def print_ratios(results: dict[tuple[str, str], list[UclientResult]], reference_only: bool) -> None:
    print(f"\nTarget: ours at least {TARGET_RATIO:.2f} x coturn's msgs/s, with no more loss.")
    for transport in TRANSPORTS:
        if ("coturn", transport) not in results or ("ours", transport) not in results:
            missing = "coturn" if ("coturn", transport) not in results else "ours"
            print(f"{transport}: no ratio ({'skipped' if reference_only else 'failed'}: {missing})")
            continue
        reference, mine = median(results["coturn", transport]), median(results["ours", transport])
        ratio = mine.rate / reference.rate if reference.rate else 0.0
        meets = ratio >= TARGET_RATIO and mine.loss <= reference.loss
        print(
            f"{transport}: ours/coturn msgs/s {ratio:.2f} (target >= {TARGET_RATIO:.2f}, peak/s "
            f"{mine.peak / reference.peak if reference.peak else 0:.2f}); loss ours {mine.loss:.2f}% vs coturn "
            f"{reference.loss:.2f}% (target: no more): {'meets the target' if meets else 'BELOW TARGET'}"
        )


def main() -> int:
    args = arguments()
    ensure_coturn_tools()
    secret = secrets.token_urlsafe(24)
    load = {"clients": args.clients, "messages": args.messages, "length": args.length, "interval_ms": 0}
    print(
        f"turnutils_uclient -m {args.clients} -n {args.messages} -l {args.length} -z 0 (-t for TCP), "
        f"{args.clients * args.messages} messages per run, peer turnutils_peer, all on {HOST}",
        flush=True,
    )
    errors: list[str] = []
    results: dict[tuple[str, str], list[UclientResult]] = {}
    with tempfile.TemporaryDirectory() as tmp, TurnPeer(HOST) as peer, CoturnServer(secret, host=HOST) as coturn:
        servers: dict[str, int] = {"coturn": coturn.port}
        ours: Appliance | None = None
        if not args.reference_only:
            try:
                ours, servers["ours"] = start_ours(Path(tmp) / "data", secret)
            except Exception as error:  # reported, then the reference half still runs
                text = f"OUR TURN SERVER FAILED TO START: {error}"
                report_error(errors, text, f"\n*** {text}\n")
        print(
            f"{'server':<10}{'tport':<6}{'transmit s':>11}{'active s':>9}{'msgs/s':>10}{'peak/s':>9}{'loss %':>9}"
            f"{'recv/sent':>14}",
            flush=True,
        )

        def uclient(port: int, tcp: bool) -> UclientResult:
            return run_uclient(
                HOST, port, secret=secret, user=ACCOUNT, peer_port=peer.port, tcp=tcp, timeout=args.timeout, **load
            )

        try:
            for transport in TRANSPORTS:
                for _ in range(args.repeat):
                    run_round(transport, servers, ours, uclient, results, errors)
        finally:
            if ours is not None:
                ours.stop()

    if args.repeat > 1:
        print(f"\nmedian of {args.repeat} runs")
        for (name, transport), runs in results.items():
            print(row(name, transport, median(runs)))
    print_ratios(results, args.reference_only)
    if errors:
        print("\nFAILED:\n  " + "\n  ".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
