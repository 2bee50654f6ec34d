"""One process builds a trace at a time: a second job that needs the same trace waits for the first and
reads what it wrote, rather than tracing the same policy again on the same CPUs (``coverfarm up`` lowers
a policy's two backends at once). The holder here is a real second process that takes the lock the way
the engine does and writes the trace's manifest before it lets go."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from coverfarm.result import Options, StageStatus
from worker.engine import trace
from worker.trace.cache import building, trace_key

HOLDER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from worker.trace.cache import building
    cache, key, hold_s, write = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
    with building(cache, key, wait_s=0):
        print("held", flush=True)
        time.sleep(hold_s)
        if write:
            (cache / key).mkdir()
            (cache / key / "trace.json").write_text(json.dumps({"policy": "act", "by": "holder"}))
    """
)


def _hold(cache: Path, key: str, hold_s: float, write: bool) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cache), key, str(hold_s), "1" if write else "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_job_reads_the_trace_the_first_built_while_it_waited(tmp_path: Path) -> None:
    options = Options(weights="real", frames=1)
    key = trace_key("act", options.seed, options.checkpoint, options.frames, "real")
    holder = _hold(tmp_path, key, 1.0, write=True)
    said: list[str] = []
    start = time.monotonic()
    stage, trace_dir, manifest = trace("act", options, tmp_path, tmp_path, said.append, "real")
    waited = time.monotonic() - start
    assert holder.wait(timeout=30) == 0
    assert stage.status == StageStatus.OK and stage.seconds == 0.0
    assert trace_dir == tmp_path / key and manifest == {"policy": "act", "by": "holder"}
    assert said == [f"trace: built meanwhile by another job, real weights ({tmp_path / key})"]
    assert waited >= 0.5  # it did wait for the holder, which held the lock for 1 s
    assert json.loads((tmp_path / key / "trace.json").read_text())["by"] == "holder"


def test_a_lock_held_past_the_traces_bounds_is_not_waited_for_longer(tmp_path: Path) -> None:
    holder = _hold(tmp_path, "act-stuck", 30.0, write=False)
    try:
        start = time.monotonic()
        with building(tmp_path, "act-stuck", wait_s=0.5) as lock:
            assert lock == "stuck"
        assert 0.4 <= time.monotonic() - start < 5
    finally:
        holder.kill()
        holder.wait()
    with building(tmp_path, "act-stuck", wait_s=0.5) as lock:  # the holder's death let it go
        assert lock == "free"
