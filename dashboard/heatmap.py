"""The coverage heatmap: policies × backends, coloured by the share of heavy math on the backend.

Rendered on the server as plain SVG (dashboard/templates/heatmap.svg), so it needs no script and no
front-end build; each square links to its cell's details. A square is drawn at the origin of a group
placed where it stands, so that the live page can swap one cell's square without knowing its place.
"""

from __future__ import annotations

from dataclasses import dataclass

from coverfarm import tracker
from coverfarm.cell_view import Kind
from dashboard.views import Grid, GridCell, share_colour

ROW_H = 18
COL_W = 84
HEAD_H = 24
LEGEND_H = 34
CHAR_W = 7  # a 12 px sans-serif character, near enough to size the label column
PAD = 6

PENDING_FILL = "#e6e8eb"
FAILED_FILL = "#f3b7b7"
MUTED_FILL = "#f4f5f6"


@dataclass(frozen=True)
class Square:
    """One cell's square, wherever it stands: the page swaps it alone when the cell changes."""

    cell_id: int
    fill: str
    text: str
    href: str
    title: str


@dataclass(frozen=True)
class Heatmap:
    width: int
    height: int
    label_w: int
    col_w: int
    row_h: int
    head_h: int
    columns: list[tuple[int, str]]  # (x centre, backend title)
    labels: list[tuple[int, str]]  # (y baseline, policy)
    squares: list[tuple[int, int, Square]]  # (x, y, square)
    legend_y: int
    legend: list[tuple[int, str]]  # (x, "0%" ... "100%") under the gradient
    stops: list[tuple[int, str]]  # gradient stops (offset %, colour)


def square(cell: GridCell) -> Square:
    if cell.heavy_share is not None:
        fill = share_colour(cell.heavy_share)
    elif cell.pending:
        fill = PENDING_FILL
    elif cell.heavy_kind is Kind.FAILED:
        fill = FAILED_FILL
    else:
        fill = MUTED_FILL
    return Square(
        cell_id=cell.id,
        fill=fill,
        text=tracker.PENDING if cell.pending and cell.heavy_share is None else cell.heavy_text,
        href=f"/cells/{cell.id}",
        title=cell.summary,
    )


def heatmap(grid: Grid) -> Heatmap:
    """The squares of the grid's rows (those a page shows)."""
    label_w = PAD + CHAR_W * max((len(policy) for policy in grid.policies), default=6)
    squares = [
        (label_w + col * COL_W, HEAD_H + row * ROW_H, square(cell))
        for row, (_policy, cells) in enumerate(grid.rows)
        for col, cell in enumerate(cells)
        if cell is not None
    ]
    body_h = HEAD_H + ROW_H * len(grid.rows)
    width = label_w + COL_W * max(len(grid.backends), 2) + 3 * PAD  # room for the legend's last label
    legend_w = COL_W * 2
    return Heatmap(
        width=width,
        height=body_h + LEGEND_H,
        label_w=label_w,
        col_w=COL_W,
        row_h=ROW_H,
        head_h=HEAD_H,
        columns=[
            (label_w + i * COL_W + COL_W // 2, tracker.backend_title(backend))
            for i, backend in enumerate(grid.backends)
        ],
        labels=[(HEAD_H + i * ROW_H + ROW_H - 5, policy) for i, policy in enumerate(grid.policies)],
        squares=squares,
        legend_y=body_h + 8,
        legend=[(label_w + round(legend_w * f), f"{round(100 * f)}%") for f in (0, 0.5, 1)],
        stops=[(round(100 * f), share_colour(f)) for f in (0, 0.25, 0.5, 0.75, 1)],
    )
