"""The CLI against real processes: the farm (Postgres + Redis) and the embedded default (no servers)."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from farmkit import TOKEN, StartWorker, child_env, coverfarm_command, free_port

from coverfarm_cli import build_parser, main
from orchestrator.sweeps.schemas import SweepCreate, SweepOptions


def test_submit_wait_status_report(
    server: str,
    start_worker: StartWorker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    start_worker("w-cli")
    asked: list[str] = []
    request = httpx.request

    def recorded(method: str, url: str, *args: Any, **kwargs: Any) -> httpx.Response:
        asked.append(f"{method} {url.removeprefix(server)}")
        return request(method, url, *args, **kwargs)

    monkeypatch.setattr(httpx, "request", recorded)
    code = main(
        ["sweep", "submit", "--url", server, "--token", TOKEN, "--policies", "act,pi05,vqbet,diffusion",
         "--backends", "vulkan,xnnpack", "--timeout", "30", "--wait"]
    )  # fmt: skip
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert code == 0
    # Followed on its events through the light summary, never the whole sweep; and not once per event
    # (8 cells, each started and ended, vqbet's two slow ones re-run too).
    [_post, *reads, _report] = asked
    sweep_id = int(out.strip().rsplit("\n", 1)[1])
    assert reads and set(reads) == {f"GET /api/sweeps/{sweep_id}/summary"}, asked
    assert len(reads) <= 2 + 10, reads
    assert "| act | 90 / 100 (90%) | 80% | 3 | ✓ |" in out
    assert "- pi05: RuntimeError: stand-in engine: pi05 cannot be traced" in out
    report, last = out.strip().rsplit("\n", 1)
    assert int(last) == sweep_id  # the sweep id alone on the last line, after the report
    assert report.startswith(f"# Sweep {sweep_id}")

    assert main(["sweep", "status", str(sweep_id), "--url", server]) == 0
    status = capsys.readouterr().out
    assert f"sweep {sweep_id}: done" in status and "pi05" in status and "failed" in status
    assert main(["sweep", "report", str(sweep_id), "--url", server]) == 0
    assert capsys.readouterr().out.strip() == report.strip()
    assert main(["sweep", "report", str(sweep_id), "--url", server, "--backend", "vulkan"]) == 0
    assert "### Known issues" in capsys.readouterr().out
    # Each backend's tracker issue body; several in the order asked.
    asked_two = ["--backend", "xnnpack", "--backend", "vulkan"]
    assert main(["sweep", "report", str(sweep_id), "--url", server, *asked_two]) == 0
    headings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("## ")]
    assert [line.split(":")[0] for line in headings] == ["## XNNPACK", "## Vulkan"]
    assert main(["sweep", "report", str(sweep_id), "--url", server, "--backend", "metal"]) == 2
    assert f"backend: sweep {sweep_id} has no backend 'metal'" in capsys.readouterr().err
    assert main(["sweep", "diff", str(sweep_id), str(sweep_id), "--url", server]) == 0
    assert "No cell, number or blocker group changed." in capsys.readouterr().out
    assert main(["sweep", "diff", str(sweep_id), "999999", "--url", server]) == 2
    assert "404 sweep 999999 not found" in capsys.readouterr().err


def test_submit_takes_every_option_the_api_takes(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each field of the API's sweep (``SweepCreate`` and its options) has a flag of ``sweep submit``
    under its own name, and each flag reaches the stored sweep."""
    parsed = build_parser().parse_args(["sweep", "submit", "--policies", "act", "--backends", "vulkan"])
    flags = set(vars(parsed))
    assert set(SweepCreate.model_fields) - {"options"} | set(SweepOptions.model_fields) <= flags
    code = main(
        ["sweep", "submit", "--url", server, "--token", TOKEN, "--policies", "act", "--backends", "vulkan",
         "--no-constant-prop", "--lowering", "stock", "--weights", "fake", "--force-fp16", "--etrecord",
         "--workaround", "group_norm_4d", "--timeout", "25", "--fresh", "--reuse-unfinished",
         "--reuse-device", "--device-classes", "h200-vulkan"]
    )  # fmt: skip
    assert code == 0
    sweep_id = int(capsys.readouterr().out.strip())
    summary = httpx.get(f"{server}/api/sweeps/{sweep_id}/summary").json()
    assert summary["options"] == {
        "constant_prop": False,
        "lowering": "stock",
        "weights": "fake",
        "force_fp16": True,
        "etrecord": True,
        "workarounds": ["group_norm_4d"],
    }
    assert (summary["timeout_s"], summary["fresh"], summary["reuse_unfinished"]) == (25, True, True)
    assert summary["reuse_device"] is True
    assert summary["device_classes"] == ["h200-vulkan"]
    cell = httpx.get(f"{server}/api/sweeps/{sweep_id}/cells").json()["cells"][0]
    cell_options = httpx.get(f"{server}{cell['url']}").json()["options"]
    assert (cell_options["weights"], cell_options["etrecord"]) == ("fake", True)
    assert cell_options["workarounds"] == ["group_norm_4d"]
    httpx.post(f"{server}/api/sweeps/{sweep_id}/cancel", headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(SystemExit):  # argparse's own one-line error, exit 2
        main(
            [
                "sweep",
                "submit",
                "--url",
                server,
                "--policies",
                "act",
                "--backends",
                "vulkan",
                "--weights",
                "heavy",
            ]
        )
    assert "invalid choice: 'heavy'" in capsys.readouterr().err


def test_user_mistakes_are_one_line_errors(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    submit = ["sweep", "submit", "--url", server, "--token", TOKEN, "--backends", "vulkan"]
    assert main([*submit, "--policies", "nope"]) == 2
    assert "policies.0: unknown policy 'nope'" in capsys.readouterr().err
    assert main([*submit[:4], "--token", "wrong", "--backends", "vulkan", "--policies", "act"]) == 2
    assert "401 admin token required" in capsys.readouterr().err
    assert main(["sweep", "status", "999999", "--url", server]) == 2
    assert "404 sweep 999999 not found" in capsys.readouterr().err
    assert main(["sweep", "status", "1", "--url", f"http://127.0.0.1:{free_port()}"]) == 2
    assert "cannot reach the orchestrator" in capsys.readouterr().err


def test_up_runs_a_sweep_on_the_embedded_default(tmp_path: Path) -> None:
    """`coverfarm up` with nothing configured: SQLite and the filesystem broker in COVERFARM_HOME, a
    worker beside the server, a sweep through both, the report printed."""
    env = child_env({"COVERFARM_HOME": str(tmp_path / "home"), "COVERFARM_ENGINE": "standin_engine:analyze"})
    result = subprocess.run(
        coverfarm_command("up", "--policies", "act,vqbet", "--port", str(free_port()), "--once"),
        env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| act | 90 / 100 (90%) | 80% | 3 | ✓ |" in result.stdout
    assert "| vqbet | 90 / 100 (90%) | 80% | 3 | ✓ |" in result.stdout  # after its slow re-run
    home = tmp_path / "home"
    assert (home / "coverfarm.db").exists()
    assert (home / "admin-token").stat().st_mode & 0o777 == 0o600
    # Everything lives in home: nothing lands in the directory the commands ran from.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["home"]


def test_up_prints_coverfarm_lines_first(tmp_path: Path) -> None:
    """What `coverfarm up` prints until its CPU worker and its local runner's consumer are ready:
    coverfarm's own lines first, no Celery banner, and (run as root) no superuser SecurityWarning: both
    accept JSON only."""
    env = child_env({"COVERFARM_HOME": str(tmp_path / "home"), "COVERFARM_ENGINE": "standin_engine:analyze"})
    up = subprocess.Popen(
        coverfarm_command("up", "--policies", "act", "--backends", "vulkan", "--port", str(free_port())),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert up.stdout is not None
    printed: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in up.stdout or []:
            printed.put(line.rstrip("\n"))
        printed.put(None)

    threading.Thread(target=read, daemon=True).start()
    lines: list[str] = []

    def ready() -> set[str]:  # Celery's own log line: "cpu@host ready.", "runner-1@host ready."
        return {
            name
            for name in ("cpu@", "runner-")
            for line in lines
            if name in line and line.endswith(" ready.")
        }

    deadline = time.monotonic() + 300
    try:  # until both are ready, up ends, or the deadline
        while len(ready()) < 2:
            line = printed.get(timeout=max(deadline - time.monotonic(), 0.1))
            if line is None:
                break
            lines.append(line)
    except queue.Empty:
        pass
    finally:
        up.terminate()  # SIGTERM stops its worker and runner with it
        up.wait(timeout=60)
    text = "\n".join(lines)
    assert ready() == {"cpu@", "runner-"}, text[-3000:]
    assert lines[0].startswith("coverfarm: "), text[:3000]
    assert "SecurityWarning" not in text and "superuser privileges" not in text
    assert "-------------- " not in text and "[queues]" not in text  # Celery's banner
    assert "coverfarm: worker of stack" in text and "coverfarm: serving http://" in text
