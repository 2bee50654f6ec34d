"""Give each blocker group of a cell its verified repro: written from the group's representative node,
run against the installed wheel (or taken from the repro cache), judged against the group's reason."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from coverfarm.result import ResultDocument
from worker.repros.script import repro_text, supported_backends
from worker.repros.verify import judge, run_repros

MAX_REPROS = 24  # the heaviest groups of a cell; the rest say why they have none
REPRO_BOUND_S = 180.0


def attach_repros(
    doc: ResultDocument,
    work: Path,
    cache: Path,
    progress: Callable[[str], None] | None = None,
    bound_s: float = REPRO_BOUND_S,
) -> None:
    """Fill ``repro`` (or ``repro_note``) on every blocker of ``doc``, in place."""
    if not doc.blockers:
        return
    if doc.backend not in supported_backends():
        for blocker in doc.blockers:
            blocker.repro_note = f"no repro template for backend {doc.backend}"
        return
    texts: dict[str, str] = {}
    for index, blocker in enumerate(doc.blockers):
        if blocker.example is None:
            blocker.repro_note = "no representative node was recorded (partitioning did not finish)"
        elif index >= MAX_REPROS:
            blocker.repro_note = f"only the {MAX_REPROS} heaviest groups of a cell get a repro"
        else:
            try:
                texts[f"g{index:03d}"] = repro_text(blocker.example, doc.backend, blocker.reason)
            except ValueError as why:
                blocker.repro_note = str(why)
    if not texts:
        return
    if progress is not None:
        progress(f"repros: {len(texts)} blocker groups")
    start = time.monotonic()
    outcomes = run_repros(texts, work, cache, bound_s)
    for name, text in texts.items():
        blocker = doc.blockers[int(name[1:])]
        blocker.repro = judge(text, outcomes[name], blocker.reason)
    doc.timings["repros_s"] = round(time.monotonic() - start, 3)
    if progress is not None:
        ready = sum(1 for b in doc.blockers if b.repro_ready)
        progress(f"repros: {ready} of {len(texts)} reproduce their reason")
