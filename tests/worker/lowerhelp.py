"""Lower a tiny module in-process through the lower stage and return what it logged, by event kind."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from worker.child.events import EventLog, read_events
from worker.lower.backends import get_backend
from worker.lower.stage import lower_program


def lower_events(
    module: torch.nn.Module, inputs: tuple[Any, ...], backend: str = "vulkan", lowering: str = "fast"
) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        torch.export.save(torch.export.export(module.eval(), inputs), root / "m.pt2")
        log = EventLog(root / "events.jsonl")
        lower_program(log, "forward", root / "m.pt2", get_backend(backend), True, lowering, root)
        log.close()
        return {event["event"]: event for event in read_events(root / "events.jsonl")}


def blockers(events: dict[str, dict[str, Any]]) -> dict[str, str]:
    """op -> reason of every CPU-left op after partitioning."""
    return {row["op"]: row["reason"] for row in events["partitioned"]["blockers"]}
