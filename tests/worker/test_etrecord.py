"""The ``etrecord`` option: the lower stage writes each program's ETRecord beside its ``.pte``, and the
bundle carries it, named by its manifest and covered by its address; without the option, neither."""

from __future__ import annotations

from pathlib import Path

import torch

from worker.child.events import EventLog, read_events
from worker.lower.backends import get_backend
from worker.lower.stage import lower_program


class CpuLeft(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.proj(x), dim=1)


def lowered(tmp: Path, etrecord: bool) -> dict[str, object]:
    torch.export.save(torch.export.export(CpuLeft().eval(), (torch.randn(1, 4),)), tmp / "m.pt2")
    log = EventLog(tmp / "events.jsonl")
    lower_program(log, "forward", tmp / "m.pt2", get_backend("xnnpack"), True, "fast", tmp, etrecord=etrecord)
    log.close()
    return next(e for e in read_events(tmp / "events.jsonl") if e["event"] == "exported")


def test_the_lower_stage_writes_an_etrecord_the_inspector_reads_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    assert lowered(tmp_path / "off", etrecord=False)["etrecord"] is None
    assert not (tmp_path / "off" / "forward.etrecord").exists()
    exported = lowered(tmp_path / "on", etrecord=True)
    record = tmp_path / "on" / "forward.etrecord"
    assert exported["etrecord"] == str(record) and record.stat().st_size > 0
    from executorch.devtools import parse_etrecord

    parsed = parse_etrecord(str(record))
    assert parsed.edge_dialect_program is not None and parsed._debug_handle_map
