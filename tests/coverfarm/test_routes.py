"""The routing scheme of lower jobs, stack × memory class (``coverfarm.routes``), and the concurrency a
worker's memory allows (``coverfarm.worker_memory.concurrency_for``)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from coverfarm.catalog import LIGHT_POLICIES
from coverfarm.routes import (
    MEMORY_CLASSES_GB,
    NoMemoryClass,
    check_stack_name,
    classes_held,
    lower_queue,
    memory_class,
    waiting_reason,
    worker_queues,
)
from coverfarm.stack_detect import STACK_ENV, detect_stack
from coverfarm.stacks import DEFAULT_STACK
from coverfarm.worker_memory import (
    JOB_MEMORY_FLOOR_GB,
    LIGHT_JOB_MEMORY_GB,
    concurrency_for,
    light_concurrency,
)
from coverfarm_cli import main
from coverfarm_cli.farm import stage_threads, up_worker_options
from farmrun.cpu_share import usable_cpus


def test_the_default_stack_keeps_the_queue_names_from_before_stacks() -> None:
    assert lower_queue() == lower_queue(DEFAULT_STACK) == "lower"
    assert lower_queue(DEFAULT_STACK, long=True) == "lower.long"
    assert worker_queues(DEFAULT_STACK, JOB_MEMORY_FLOOR_GB)[:2] == ["lower", "lower.long"]


def test_a_queue_names_its_stack_its_rerun_and_its_memory_class() -> None:
    assert lower_queue("et-1.4.1") == "lower@et-1.4.1"
    assert lower_queue("et-1.4.1", long=True) == "lower.long@et-1.4.1"
    assert lower_queue(DEFAULT_STACK, memory_gb=64) == "lower.mem64"
    assert lower_queue("et-1.4.1", long=True, memory_gb=128) == "lower.long.mem128@et-1.4.1"
    names = {
        lower_queue(stack, long=long, memory_gb=size)
        for stack in (DEFAULT_STACK, "et-1.4.1", "pr-123")
        for long in (False, True)
        for size in (None, *MEMORY_CLASSES_GB)
    }
    assert len(names) == 3 * 2 * (1 + len(MEMORY_CLASSES_GB))  # no two routes share a queue


def test_a_job_goes_to_the_smallest_memory_class_that_holds_it() -> None:
    assert memory_class(None) is None
    smallest = MEMORY_CLASSES_GB[0]
    assert memory_class(0.5) == memory_class(smallest) == smallest
    for below, size in itertools.pairwise(MEMORY_CLASSES_GB):
        assert memory_class(below + 0.5) == size
        assert memory_class(size) == size
    with pytest.raises(NoMemoryClass, match="more than the largest memory class"):
        memory_class(MEMORY_CLASSES_GB[-1] + 1)
    with pytest.raises(ValueError, match="not a memory class"):
        lower_queue(memory_gb=smallest + 1)


@pytest.mark.parametrize("memory_gb", [8.0, 24.0, 62.7, 64.0, 200.0, 1000.0])
def test_a_worker_takes_exactly_the_jobs_it_can_hold(memory_gb: float) -> None:
    taken = set(worker_queues("et-1.4.1", memory_gb))
    assert classes_held(memory_gb) == [size for size in MEMORY_CLASSES_GB if size <= memory_gb]
    for need in [None, 1, 20, 32, 33, 62, 64, 100, 256, 400, 512]:
        size = memory_class(need)
        for long in (False, True):
            queue = lower_queue("et-1.4.1", long=long, memory_gb=size)
            assert (queue in taken) == (need is None or (size is not None and size <= memory_gb))
            if queue in taken and need is not None:
                assert need <= memory_gb  # never a job it cannot hold
            assert lower_queue(DEFAULT_STACK, long=long, memory_gb=size) not in taken  # nor another stack's


@pytest.mark.parametrize(
    "name", ["", "Et-1.5.1", "et 1.5.1", "a/b", "a@b", "a:b", "a_b", "-et", ".et", "x" * 65, "é"]
)
def test_a_stack_name_that_cannot_be_part_of_a_queue_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="is not well formed"):
        check_stack_name(name)
    with pytest.raises(ValueError):
        lower_queue(name)


def test_well_formed_stack_names() -> None:
    for name in ("et-1.5.1", "et-1.4.1", "pr-12345", "wheel-3f2a9c", "torch2.13+cpu", "x" * 64):
        assert check_stack_name(name) == name


def test_why_a_job_waits() -> None:
    assert waiting_reason("et-1.4.1", None, {DEFAULT_STACK}) == "waiting for a worker of stack et-1.4.1"
    assert waiting_reason("et-1.4.1", 40, set()) == "waiting for a worker of stack et-1.4.1"
    assert waiting_reason("et-1.4.1", 40, {"et-1.4.1"}) == "waiting for a ≥ 64 GB worker of stack et-1.4.1"


def test_the_stack_is_named_by_the_environment_else_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STACK_ENV, raising=False)
    assert detect_stack() == DEFAULT_STACK
    monkeypatch.setenv(STACK_ENV, "et-1.4.1")
    assert detect_stack() == "et-1.4.1"
    monkeypatch.setenv(STACK_ENV, "bad/name")
    with pytest.raises(ValueError, match="is not well formed"):
        detect_stack()


def test_concurrency_is_bounded_by_memory() -> None:
    floor = JOB_MEMORY_FLOOR_GB
    assert concurrency_for(1.5 * floor, 2) == 1  # two lowerings would each get less than the floor
    assert concurrency_for(0.5 * floor, 4) == 1  # never none
    assert concurrency_for(4 * floor, 2) == 2  # as asked where each keeps the floor
    assert concurrency_for(4 * floor, 8) == 4
    for memory, asked in itertools.product([0.5 * floor, floor, 3.5 * floor, 100 * floor], [1, 2, 3, 16]):
        jobs = concurrency_for(memory, asked)
        assert 1 <= jobs <= asked
        assert jobs == 1 or memory / jobs >= floor


def test_up_lowers_one_light_policy_per_cpu_where_memory_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lowering of a light policy keeps a few GB: `up`'s default sweep on a 2-core, 24 GiB machine
    lowers two at once; a vision-language policy in the sweep keeps it to one."""
    light = sorted(LIGHT_POLICIES)
    assert light_concurrency(light, 2, 23.5) == 2
    assert light_concurrency(light, 16, 23.5) == int(23.5 // LIGHT_JOB_MEMORY_GB)  # memory bounds it
    assert light_concurrency(light, 1, 64.0) == 1
    assert light_concurrency([*light, "pi0"], 16, 512.0) == 1
    monkeypatch.delenv("COVERFARM_WORKER_CONCURRENCY", raising=False)
    monkeypatch.setenv("COVERFARM_WORKER_MEMORY_GB", "23.5")
    cpus = len(os.sched_getaffinity(0))
    expected = [] if cpus < 2 else ["--concurrency", str(min(cpus, 3)), "--min-job-gb", "6"]
    assert up_worker_options(light) == expected
    assert up_worker_options(["act", "pi0"]) == []
    monkeypatch.setenv("COVERFARM_WORKER_CONCURRENCY", "1")  # the user's setting stands
    assert up_worker_options(light) == []


def test_jobs_at_once_split_the_cpus_among_their_stage_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cpus = usable_cpus()
    assert stage_threads(1) is None  # one job at a time: PyTorch's own default
    assert stage_threads(2) == max(1, cpus // 2)
    assert stage_threads(4 * cpus) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's setting stands
    assert stage_threads(2) is None


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--stack", "Bad/Stack"], {}, "stack name 'Bad/Stack' is not well formed"),
        ([], {STACK_ENV: "a b"}, "stack name 'a b' is not well formed"),
        ([], {"COVERFARM_WORKER_MEMORY_GB": "lots"}, "COVERFARM_WORKER_MEMORY_GB must be a number of GB"),
        (["--concurrency", "0"], {}, "--concurrency must be at least 1"),
        (["--min-job-gb", "0"], {}, "--min-job-gb must be a positive number of GB, got 0"),
    ],
    ids=["stack", "stack-env", "memory", "concurrency", "min-job-gb"],
)
def test_a_worker_with_bad_settings_says_so_in_one_line(
    args: list[str],
    env: dict[str, str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home"
    for name in (STACK_ENV, "COVERFARM_WORKER_MEMORY_GB"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"COVERFARM_HOME": str(home), **env}.items():
        monkeypatch.setenv(name, value)
    assert main(["worker", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("coverfarm: error: ") and expected in lines[0]
    assert not home.exists()  # refused before anything was set up
