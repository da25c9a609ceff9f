"""Small line plots of the fleet samples, drawn by the server as SVG (templates/web/_plot.html)."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.web.formatting import human_bytes

WIDTH, HEIGHT = 300, 80


@dataclass(frozen=True)
class Line:
    label: str
    css: str  # plot-a / plot-b: the series' colour
    points: str  # SVG polyline points in the WIDTH x HEIGHT box
    last: str  # the latest value, as the legend shows it


@dataclass(frozen=True)
class Plot:
    id: str
    title: str
    lines: list[Line]
    top: str  # the value at the top of the box
    span: str  # "last 3 h"

    @property
    def summary(self) -> str:
        """What a screen reader hears instead of the picture."""
        latest = ", ".join(f"{line.label} {line.last}" for line in self.lines)
        return f"{self.title} over the {self.span}: now {latest}; at most {self.top}"


def _span(samples: list[dict]) -> str:
    if len(samples) < 2:
        return "last minutes"
    seconds = (samples[-1]["at"] - samples[0]["at"]).total_seconds()
    return f"last {seconds / 3600:.1f} h" if seconds >= 5400 else f"last {max(1, round(seconds / 60))} min"


def _points(times: list[float], values: list[float], top: float) -> str:
    start, end = times[0], times[-1]
    width = end - start or 1.0
    return " ".join(
        f"{WIDTH * (t - start) / width:.1f},{HEIGHT - 2 - (HEIGHT - 4) * v / top:.1f}"
        for t, v in zip(times, values, strict=True)
    )


def _plot(plot_id: str, title: str, samples: list[dict], series: list[tuple[str, list[float]]], show) -> Plot | None:
    if not samples:
        return None
    times = [s["at"].timestamp() for s in samples]
    if len(times) == 1:  # one sample: a flat line across the box
        times = [times[0] - 1, times[0]]
        series = [(label, values * 2) for label, values in series]
    top = max((v for _, values in series for v in values), default=0) or 1
    lines = [
        Line(label, f"plot-{'ab'[i]}", _points(times, values, top), show(values[-1]))
        for i, (label, values) in enumerate(series)
    ]
    return Plot(plot_id, title, lines, show(top), _span(samples))


def _relayed(samples: list[dict]) -> list[float]:
    """Bytes TURN relayed between each sample and the one before (its rows are cumulative)."""
    out, previous = [], None
    for s in samples:
        total = s["relayed_total"]
        out.append(max(0, total - previous) if previous is not None else 0)
        previous = total
    return out


def fleet_plots(samples: list[dict]) -> list[Plot]:
    """Fleet size, tasks per second, and bytes moved peer to peer against bytes relayed."""
    plots = [
        _plot(
            "plot-fleet",
            "Workers connected",
            samples,
            [("connected", [s["workers"] for s in samples]), ("busy", [s["busy"] for s in samples])],
            lambda v: f"{v:.0f}",
        ),
        _plot(
            "plot-tasks",
            "Tasks per second",
            samples,
            [("tasks/s", [s["tasks_done"] / max(s["seconds"], 1) for s in samples])],
            lambda v: f"{v:.1f}" if v < 10 else f"{v:.0f}",
        ),
        # A rate, like the tasks: the legend's "now" is then what moves now, not one sample's bytes
        # (which read "0 B" beside the day's total on the card).
        _plot(
            "plot-bytes",
            "Bytes between browsers per second",
            samples,
            [
                ("peer to peer", [s["peer_bytes"] / max(s["seconds"], 1) for s in samples]),
                ("relayed", [r / max(s["seconds"], 1) for r, s in zip(_relayed(samples), samples, strict=True)]),
            ],
            lambda v: f"{human_bytes(int(v))}/s",
        ),
    ]
    return [p for p in plots if p is not None]


def account_plots(samples: list[dict], rows: list[dict]) -> list[Plot]:
    """One account's browsers connected and busy, and the tasks they did per minute, on the fleet samples'
    times: an account has a row at a sample's moment (sampler.py) unless none of its browsers was
    connected and none did a task, which the plot draws as 0."""
    mine = {r["at"]: r for r in rows}
    none = {"workers": 0, "busy": 0, "tasks_done": 0}
    lined = [mine.get(s["at"], none) for s in samples]
    plots = [
        _plot(
            "plot-own",
            "Your browsers",
            samples,
            [("connected", [r["workers"] for r in lined]), ("busy", [r["busy"] for r in lined])],
            lambda v: f"{v:.0f}",
        ),
        _plot(
            "plot-own-tasks",
            "Tasks your browsers did per minute",
            samples,
            [("tasks/min", [60 * r["tasks_done"] / max(s["seconds"], 1) for r, s in zip(lined, samples, strict=True)])],
            lambda v: f"{v:.1f}" if v < 10 else f"{v:.0f}",
        ),
    ]
    return [p for p in plots if p is not None]


def totals(samples: list[dict]) -> dict[str, int]:
    """What the samples add up to: tasks done, bytes peer to peer, bytes relayed."""
    return {
        "tasks": sum(s["tasks_done"] for s in samples),
        "peer_bytes": sum(s["peer_bytes"] for s in samples),
        "relayed_bytes": int(sum(_relayed(samples))),
    }
