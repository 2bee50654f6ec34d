"""The progress plot: per backend, a small chart per policy of its coverage (ops on the backend) and its
heavy-math share on each stack, oldest release first.

Geometry only, from the typed progress (``orchestrator.reports.progress``); drawn as plain SVG by
dashboard/templates/progress_plot.svg on the server, so it needs no script and no front-end library. A
point exists only where the stack measured the share (``Kind.VALUE``): a bound, a failure or a cell
still pending leaves a gap in the line, never a guessed value.
"""

from __future__ import annotations

from dataclasses import dataclass

from coverfarm import tracker
from coverfarm.cell_view import CellView, Column, Kind
from orchestrator.reports.progress import Progress

COLUMNS = 5  # charts per row
LEFT = 30  # room for the y axis' labels
TOP = 20  # the chart's title
PLOT_H = 64
BOTTOM = 18  # the stacks' names under the x axis
STEP_W = 64  # between two stacks
MIN_PLOT_W = 96
GAP = 14  # between charts
SECTION_H = 22  # a backend's title
LEGEND_H = 22
LEGEND_W = 190  # per series: its sample line and name
GRID = (0.0, 0.5, 1.0)  # y gridlines


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    title: str  # its tooltip: the tracker's text of the column on that stack


@dataclass(frozen=True)
class Series:
    name: str
    colour: str
    dashed: bool
    points: list[Point]
    lines: list[str]  # SVG polyline points, one per run of consecutive stacks with a value


@dataclass(frozen=True)
class Chart:
    x: int
    y: int
    title: str
    series: list[Series]

    @property
    def measured(self) -> bool:
        return any(series.points for series in self.series)


@dataclass(frozen=True)
class Section:
    y: int
    title: str


@dataclass(frozen=True)
class Plot:
    width: int
    height: int
    chart_w: int
    plot_w: int
    plot_h: int
    left: int
    top: int
    ticks: list[tuple[float, str]]  # (x within a chart, stack) under every chart's x axis
    grid: list[tuple[float, str]]  # (y within a chart, "50%")
    sections: list[Section]
    charts: list[Chart]
    legend: list[Series]  # the series' names, colours and dashes (no points)
    legend_w: int = LEGEND_W


SERIES = (
    ("coverage", "ops on the backend", "#0b57b8", False),
    ("heavy", "heavy math on the backend", "#c2410c", True),
)


def _y(fraction: float) -> float:
    return round(TOP + PLOT_H * (1 - max(0.0, min(1.0, fraction))), 1)


def _series(name: str, colour: str, dashed: bool, values: list[tuple[float, float | None, str]]) -> Series:
    points: list[Point] = []
    lines: list[str] = []
    run: list[str] = []
    for x, fraction, title in values:
        if fraction is None:
            if len(run) > 1:
                lines.append(" ".join(run))
            run = []
            continue
        point = Point(x, _y(fraction), title)
        points.append(point)
        run.append(f"{point.x:g},{point.y:g}")
    if len(run) > 1:
        lines.append(" ".join(run))
    return Series(name, colour, dashed, points, lines)


def _fraction(column: Column | None) -> float | None:
    if column is None or column.kind is not Kind.VALUE or column.share is None:
        return None
    return column.share.fraction


def _chart_series(
    policy: str, stacks: list[str], xs: list[float], views: list[CellView | None]
) -> list[Series]:
    found = []
    for name, label, colour, dashed in SERIES:
        values = []
        for x, stack, view in zip(xs, stacks, views, strict=True):
            column = None if view is None else view.ops if name == "coverage" else view.heavy
            if column is None:
                text = "not in this sweep"
            else:
                text = tracker.ops_text(column) if name == "coverage" else tracker.heavy_text(column)
            values.append((x, _fraction(column), f"{policy}, {stack}: {label} {text}"))
        found.append(_series(name, colour, dashed, values))
    return found


def plot(progress: Progress) -> Plot:
    stacks = [stack.name for stack in progress.stacks]
    plot_w = max(MIN_PLOT_W, STEP_W * (len(stacks) - 1))
    chart_w = LEFT + plot_w + GAP + 8
    chart_h = TOP + PLOT_H + BOTTOM + GAP
    step = plot_w / (len(stacks) - 1) if len(stacks) > 1 else 0.0
    xs = [round(LEFT + (step * i if len(stacks) > 1 else plot_w / 2), 1) for i in range(len(stacks))]
    sections, charts = [], []
    y = LEGEND_H
    for part in progress.backends:
        sections.append(Section(y + 15, tracker.backend_title(part.backend)))
        y += SECTION_H
        for index, row in enumerate(part.rows):
            views = [cell.view if cell is not None else None for cell in row.cells]
            place = (index % COLUMNS * chart_w, y + index // COLUMNS * chart_h)
            charts.append(Chart(*place, row.policy, _chart_series(row.policy, stacks, xs, views)))
        y += chart_h * -(-len(part.rows) // COLUMNS)  # whole lines of charts
    columns = min(COLUMNS, max((len(part.rows) for part in progress.backends), default=1))
    return Plot(
        width=max(chart_w * columns, LEGEND_W * len(SERIES)),
        height=y,
        chart_w=chart_w,
        plot_w=plot_w,
        plot_h=PLOT_H,
        left=LEFT,
        top=TOP,
        ticks=list(zip(xs, stacks, strict=True)),
        grid=[(_y(fraction), f"{round(100 * fraction)}%") for fraction in GRID],
        sections=sections,
        charts=charts,
        legend=[Series(label, colour, dashed, [], []) for _, label, colour, dashed in SERIES],
    )
