"""A STAND-IN engine for the grid's browser tests only: the farm's stand-in (tests/farm/standin_engine.py),
held at a gate the test opens, so that a cell stays ⏳ exactly as long as the test needs it to.

The gate of a cell is the file ``$GATE_DIR/<policy>-<backend>`` (``$GATE_DIR/all`` opens every gate).
A gate left closed opens by itself after ``GATE_MAX_S`` so that a failed test never wedges a worker.
The document gains what the stand-in leaves out and the details view shows: ops left on the CPU with
the partitioner's reasons, and the program list.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import standin_engine

from coverfarm.result import Blocker, Options, ProgramResult, ResultDocument

GATE_MAX_S = 120.0
BLOCKERS = [
    Blocker(op="aten.convolution.default", reason="op args not supported", count=2, macs=150),
    Blocker(op="aten.elu.default", reason="no operator implementation", count=8, macs=0),
]


def gate(policy: str, backend: str) -> Path:
    return Path(os.environ["GATE_DIR"]) / f"{policy}-{backend}"


def analyze(
    policy: str,
    backend: str,
    options: Options,
    out_dir: Path,
    progress: Callable[[str], None] | None = None,
) -> ResultDocument:
    deadline = time.monotonic() + GATE_MAX_S
    everything = Path(os.environ["GATE_DIR"]) / "all"
    while not (gate(policy, backend).exists() or everything.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    doc = standin_engine.analyze(policy, backend, options, out_dir, progress)
    doc.blockers = list(BLOCKERS)
    doc.program_list = [
        ProgramResult(
            name="predict_action_chunk",
            runs_per_chunk=1,
            ops=100,
            ops_on_backend=90,
            macs=1000,
            macs_on_backend=800,
            partitions=3,
            pt2=str(out_dir / "predict_action_chunk.pt2"),
            pte=str(out_dir / "predict_action_chunk.pte"),
        )
    ]
    return doc
