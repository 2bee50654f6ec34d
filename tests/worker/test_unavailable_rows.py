"""Through the engine, each policy LeRobot 0.6.1 lacks, and each it has that cannot be built offline yet, is
a result with the cause, on every backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from coverfarm import catalog
from coverfarm.errors import UserError
from coverfarm.offline_causes import NO_OFFLINE_BUILD
from coverfarm.result import Options, StageStatus
from worker.engine import analyze


@pytest.mark.parametrize("policy", catalog.NOT_IN_LEROBOT)
@pytest.mark.parametrize("backend", catalog.BACKENDS)
def test_an_unavailable_policy_is_a_failed_trace_with_the_cause(
    policy: str, backend: str, tmp_path: Path
) -> None:
    said: list[str] = []
    doc = analyze(policy, backend, Options(), tmp_path, progress=said.append, trace_cache=tmp_path / "cache")
    assert doc.trace.status is StageStatus.FAILED
    assert doc.trace.error is not None
    assert (doc.trace.error.type, doc.trace.error.message) == (
        "PolicyNotAvailable",
        "policy not available in lerobot 0.6.1",
    )
    assert doc.partition.status is doc.export.status is StageStatus.NOT_RUN
    assert doc.ops.total is None and doc.blockers == []
    assert said == [f"{policy}: policy not available in lerobot 0.6.1"]
    assert not (tmp_path / "cache").exists()  # nothing was traced


@pytest.mark.parametrize("policy", sorted(NO_OFFLINE_BUILD))
def test_a_policy_without_an_offline_build_keeps_its_row_with_the_precise_cause(
    policy: str, tmp_path: Path
) -> None:
    doc = analyze(policy, "vulkan", Options(), tmp_path, trace_cache=tmp_path / "cache")
    assert doc.trace.status is StageStatus.FAILED and doc.trace.error is not None
    assert doc.trace.error.message == f"no offline build of {policy} yet: {NO_OFFLINE_BUILD[policy]}"
    assert doc.partition.status is doc.export.status is StageStatus.NOT_RUN
    assert not (tmp_path / "cache").exists()


def test_a_name_outside_the_tracker_is_still_bad_input(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown policy 'nope'"):
        analyze("nope", "vulkan", Options(), tmp_path)


def test_fake_weights_cannot_take_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot use a checkpoint"):
        analyze("act", "vulkan", Options(weights="fake", checkpoint=str(tmp_path)), tmp_path)
