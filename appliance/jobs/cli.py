"""`peermr job ...`: run jobs on an appliance and follow them, from a terminal.

    peermr job run wordcount.js --server URL [--workers N] [--private]
                               [--wait [--detach]] [--output out.jsonl]
    peermr job list | status RUN | cancel RUN | logs RUN [--follow]

The API token comes from PEERMR_TOKEN or --token-file FILE (or --token T, which shows in ps).
`run` saves the job under the file's name (replacing the script of a job of that name), says how many
workers are connected and eligible for the run, and queues it; it warns when fewer eligible workers
are connected than the run asks. With --wait a progress
bar follows the run; the exit status is 0 when it succeeded and 1, with the reason, when it failed
or was cancelled. Ctrl-C while waiting cancels the run (--detach leaves it running). --output
writes the output as JSON lines of [key, value] (one file per group when the run has several:
out.A.jsonl, out.B.jsonl, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from appliance.api_client import Api
from appliance.commands import CommandError, add_token_flags

# --workers connected: as many workers per group as are connected and eligible now.
CONNECTED = "connected"
# --workers connected while none is connected: how long to wait for some, and for their number to settle.
JOIN_WAIT_SECONDS = 60
SETTLE_SECONDS = 5
POLL_SECONDS = 0.5
LOG_POLL_SECONDS = 1.0
BAR_WIDTH = 30
ENDED = ("succeeded", "failed", "cancelled")


def _save_job(api: Api, name: str, script: str, path: Path) -> int:
    existing = next((j for j in api.request("GET", "/jobs").json() if j["name"] == name), None)
    with api.reaching():
        if existing:
            response = api.client.put(f"/jobs/{existing['id']}", json={"script": script})
        else:
            response = api.client.post("/jobs", json={"name": name, "script": script})
    if response.status_code == 400 and "line" in response.text:
        body = response.json()
        extra = body.get("extra") or {}
        where = f"{path}:{extra['line']}" if extra.get("line") else str(path)
        if extra.get("column"):
            where += f":{extra['column']}"
        raise CommandError(f"{where}: {body.get('detail')}")
    if response.status_code >= 400:
        raise api.fail(response)
    return response.json()["id"]


def _progress_line(run: dict) -> tuple[str, float]:
    if run["state"] == "queued":
        position = run.get("queue_position")
        reason = run.get("reason") or "waiting for workers"
        return f"queued{f' (#{position})' if position else ''}: {reason}", 0.0
    rows = run.get("progress") or []
    total = sum(r["total"] for r in rows) or 1
    done = sum(r["done"] for r in rows)
    current = next((r for r in rows if r["done"] < r["total"]), None)
    stage = "input" if current and current["stage"] < 0 else f"stage {current['stage'] + 1}" if current else "done"
    return f"{run['state']} {done}/{total} tasks, {stage}", done / total


class Bar:
    """One line redrawn in place on a terminal; state changes as plain lines otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = ""

    def show(self, text: str, fraction: float) -> None:
        if self.tty:
            filled = int(BAR_WIDTH * fraction)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {text[:80]:<80}")
            sys.stderr.flush()
        elif text != self.last:
            print(text, file=sys.stderr)
        self.last = text

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def _wait(api: Api, run_id: int) -> dict:
    bar = Bar()
    try:
        while True:
            # A long poll: the answer comes at the run's end, or after POLL_SECONDS to move the bar.
            asked = time.monotonic()
            run = api.request("GET", f"/runs/{run_id}", params={"wait": POLL_SECONDS}).json()
            text, fraction = _progress_line(run)
            bar.show(text, fraction)
            if run["state"] not in ("queued", "running"):
                return run
            time.sleep(max(0.0, POLL_SECONDS - (time.monotonic() - asked)))  # an appliance without `wait`
    finally:
        bar.end()


def _download(api: Api, run: dict, output: Path) -> None:
    groups = [chr(ord("A") + i) for i in range(run["spec"]["groupCount"])]
    for group in groups:
        target = output if len(groups) == 1 else output.with_name(f"{output.stem}.{group}{output.suffix}")
        with api.reaching(), api.client.stream("GET", f"/runs/{run['id']}/output", params={"group": group}) as r:
            if r.status_code >= 400:
                r.read()
                raise api.fail(r)
            with open(target, "wb") as f:
                for chunk in r.iter_bytes():
                    f.write(chunk)
        print(f"wrote {target}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> None:
    path = Path(args.file)
    try:
        script = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    api = Api(args)
    try:
        job_id = _save_job(api, args.name or path.stem, script, path)
        overrides: dict = {}
        if args.workers not in (None, CONNECTED):
            overrides["workerCount"] = args.workers
        if args.private:
            overrides["privateMode"] = True
        # What the run will find, before it is queued (the scheduler's eligibility: private mode, GPU).
        found = api.request("POST", f"/jobs/{job_id}/capacity", json=overrides).json()
        if args.workers == CONNECTED and not found["eligiblePerGroup"]:
            found = _workers_joining(lambda: api.request("POST", f"/jobs/{job_id}/capacity", json=overrides).json())
        print(f"workers: {found['summary']}", file=sys.stderr)
        if found["eligible"] < found["asks"] and (count := _use_connected(found, args.workers)):
            overrides["workerCount"] = count
        run = api.request("POST", f"/jobs/{job_id}/runs", json=overrides).json()
        print(f"run {run['id']}: {api.server}/ui/runs/{run['id']}", file=sys.stderr)
        if run.get("warning"):
            print(f"warning: run {run['id']} {run['warning']}: it waits until enough are connected", file=sys.stderr)
        if not args.wait:
            print(run["id"])
            return
        try:
            run = _wait(api, run["id"])
        except KeyboardInterrupt:
            _interrupted(api, run["id"], args.detach)
        if run["state"] != "succeeded":
            raise CommandError(f"run {run['id']} {run['state']}: {run['reason'] or 'no reason given'}")
        print(f"run {run['id']} succeeded", file=sys.stderr)
        if args.output:
            _download(api, run, Path(args.output))
    finally:
        api.close()


def _workers_joining(capacity: Callable[[], dict]) -> dict:
    """--workers connected with none connected yet, as right after `peermr worker &`: what the run will
    find once some have joined and their number held for SETTLE_SECONDS (within JOIN_WAIT_SECONDS)."""
    print("waiting for workers to join...", file=sys.stderr)
    deadline = time.monotonic() + JOIN_WAIT_SECONDS
    found, since = capacity(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        now, count = capacity(), found["eligiblePerGroup"]
        if now["eligiblePerGroup"] != count:
            found, since = now, time.monotonic()
        elif count and time.monotonic() - since >= SETTLE_SECONDS:
            break
    return found


def _use_connected(found: dict, workers: int | str | None) -> int | None:
    """The workers per group to run on when fewer eligible workers are connected than the run asks:
    with --workers connected, those connected; at a terminal, those connected if the user says so;
    otherwise None (the run asks its own count and waits), with the flag that would use them."""
    per_group = found["eligiblePerGroup"]
    if workers == CONNECTED:
        if not per_group:
            raise CommandError(
                f"--workers connected: no eligible worker for each group of the run ({found['summary']}); "
                "start some (peermr worker, or the worker page in a few tabs)"
            )
        print(f"using the {per_group} connected worker(s) per group", file=sys.stderr)
        return per_group
    if not per_group or workers is not None:
        return None
    offer = f"use the {per_group} connected worker(s) per group instead"
    if sys.stdin.isatty() and sys.stderr.isatty():
        answer = input(f"{offer[0].upper()}{offer[1:]}? [Y/n] ").strip().lower()
        return per_group if answer in ("", "y", "yes") else None
    print(f"hint: --workers connected (or --workers {per_group}) would {offer}", file=sys.stderr)
    return None


def _worker_count(text: str) -> int | str:
    if text == CONNECTED:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or {CONNECTED!r}, not {text!r}") from None


def _interrupted(api: Api, run_id: int, detach: bool) -> None:
    """Ctrl-C while waiting: cancel the run (a run nobody waits for is what the user asked to stop),
    or with --detach leave it running; exit 130 either way."""
    if detach:
        print(f"left run {run_id} running: peermr job status {run_id}, peermr job cancel {run_id}", file=sys.stderr)
    else:
        run = api.request("POST", f"/runs/{run_id}/cancel").json()
        print(f"run {run_id} {run['state']} (Ctrl-C; --detach leaves a run running)", file=sys.stderr)
    raise SystemExit(130)


def _when(text: str | None) -> str:
    return text.replace("T", " ")[:19] if text else "-"


def cmd_list(args: argparse.Namespace) -> None:
    with Api(args) as api:
        runs = api.request("GET", "/runs").json()[: args.limit]
    print(f"{'RUN':>6}  {'STATE':<10} {'JOB':<24} {'QUEUED':<19}  REASON")
    for run in runs:
        print(
            f"{run['id']:>6}  {run['state']:<10} {run['job_name'][:24]:<24} {_when(run['queued_at']):<19}  "
            f"{run['reason']}".rstrip()
        )


def cmd_status(args: argparse.Namespace) -> None:
    with Api(args) as api:
        run = api.request("GET", f"/runs/{args.run}").json()
    text, _ = _progress_line(run)
    print(f"run {run['id']} ({run['job_name']}): {text}")
    if run["state"] in ENDED and run["reason"]:
        print(f"reason: {run['reason']}")


def cmd_cancel(args: argparse.Namespace) -> None:
    with Api(args) as api:
        run = api.request("POST", f"/runs/{args.run}/cancel").json()
    print(f"run {run['id']} {run['state']}")


def _log_line(line: dict) -> str:
    where = line["source"] + (f" {line['group']}{line['rank']}" if line.get("rank") is not None else "")
    return f"{_when(line['at'])} {line['level']:<5} {where}: {line['text']}"


def cmd_logs(args: argparse.Namespace) -> None:
    with Api(args) as api:
        after = 0
        while True:
            body = api.request("GET", f"/runs/{args.run}/logs", params={"after": after}).text
            for raw in body.splitlines():
                line = json.loads(raw)
                after = line["id"]
                print(_log_line(line), flush=True)
            if not args.follow or (body == "" and api.request("GET", f"/runs/{args.run}").json()["state"] in ENDED):
                return
            time.sleep(LOG_POLL_SECONDS)


def _server_args(parser) -> None:
    parser.add_argument("--server", help="the appliance's URL (env PEERMR_SERVER)")
    add_token_flags(parser)


def add_parser(sub) -> None:
    job = sub.add_parser("job", help="jobs on a running appliance").add_subparsers(
        dest="job_command", required=True, metavar="ACTION"
    )
    run = job.add_parser("run", help="save FILE.js as a job and run it")
    run.add_argument("file", metavar="FILE.js")
    _server_args(run)
    run.add_argument("--name", help="the job's name (default: the file's name without .js)")
    run.add_argument(
        "--workers",
        type=_worker_count,
        metavar="N|connected",
        help="workers per group (overrides the script's workerCount); 'connected': as many as are connected now",
    )
    run.add_argument("--private", action="store_true", help="run only on your own account's browsers")
    run.add_argument(
        "--wait", action="store_true", help="follow the run; exit 1 if it does not succeed; Ctrl-C cancels it"
    )
    run.add_argument("--detach", action="store_true", help="with --wait: Ctrl-C leaves the run running")
    run.add_argument("--output", metavar="FILE", help="with --wait: write the output as JSON lines")
    run.set_defaults(func=cmd_run)
    listing = job.add_parser("list", help="your recent runs, newest first")
    _server_args(listing)
    listing.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")
    listing.set_defaults(func=cmd_list)
    for name, func, what in (
        ("status", cmd_status, "a run's state, progress and reason"),
        ("cancel", cmd_cancel, "cancel a queued or running run"),
        ("logs", cmd_logs, "a run's log"),
    ):
        command = job.add_parser(name, help=what)
        command.add_argument("run", type=int, metavar="RUN")
        _server_args(command)
        if name == "logs":
            command.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
        command.set_defaults(func=func)
