"""The coverage heatmap: policies × backends, coloured by the share of heavy math on the backend; when
the grid compares stacks, a column per backend and stack, the stacks of a backend side by side.

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
STACK_H = 14  # the line under a backend's title that names the stack, when stacks are compared
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
    title_y: int  # the columns' titles' baseline
    stacks: list[tuple[int, str]]  # (x centre, stack) under each column's title, when stacks are compared
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
    head_h = HEAD_H + (STACK_H if grid.compare else 0)
    columns = [(backend, stack) for backend in grid.backends for stack in grid.shown]
    cells = {(cell.policy, cell.backend, cell.stack): cell for cell in grid.cells}
    squares = [
        (label_w + col * COL_W, head_h + row * ROW_H, square(cell))
        for row, policy in enumerate(grid.policies)
        for col, (backend, stack) in enumerate(columns)
        if (cell := cells.get((policy, backend, stack))) is not None
    ]
    body_h = head_h + ROW_H * len(grid.policies)
    width = label_w + COL_W * max(len(columns), 2) + 3 * PAD  # room for the legend's last label
    legend_w = COL_W * 2
    centres = [label_w + i * COL_W + COL_W // 2 for i in range(len(columns))]
    return Heatmap(
        width=width,
        height=body_h + LEGEND_H,
        label_w=label_w,
        col_w=COL_W,
        row_h=ROW_H,
        head_h=head_h,
        columns=[(x, tracker.backend_title(b)) for x, (b, _) in zip(centres, columns, strict=True)],
        title_y=head_h - 8 - (STACK_H if grid.compare else 0),
        stacks=[(x, s) for x, (_, s) in zip(centres, columns, strict=True)] if grid.compare else [],
        labels=[(head_h + i * ROW_H + ROW_H - 5, policy) for i, policy in enumerate(grid.policies)],
        squares=squares,
        legend_y=body_h + 8,
        legend=[(label_w + round(legend_w * f), f"{round(100 * f)}%") for f in (0, 0.5, 1)],
        stops=[(round(100 * f), share_colour(f)) for f in (0, 0.25, 0.5, 0.75, 1)],
    )
