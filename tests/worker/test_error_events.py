"""A stage's error event: the type, the message with its notes and the chain of causes, the traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from farmkit import ROOT

from coverfarm.result import ErrorInfo
from worker.child.events import error_fields, subprocess_output


def test_the_message_carries_the_exception_it_was_raised_while_handling() -> None:
    try:
        try:
            raise ValueError("setStorage: out of bounds for storage of size 0")
        except ValueError:
            raise RuntimeError("Please check the warnings above") from None
    except RuntimeError as suppressed:
        assert error_fields(suppressed)["message"] == "Please check the warnings above"
    try:
        try:
            raise ValueError("setStorage: out of bounds for storage of size 0")
        except ValueError:
            raise RuntimeError("Please check the warnings above")  # noqa: B904 (as torch.export.load does)
    except RuntimeError as error:
        fields = error_fields(error)
    assert fields["type"] == "RuntimeError"
    assert fields["message"].splitlines() == [
        "Please check the warnings above",
        "caused by ValueError: setStorage: out of bounds for storage of size 0",
    ]
    assert "ValueError" in fields["traceback"] and "RuntimeError" in fields["traceback"]


def test_notes_and_explicit_causes_are_kept_and_the_type_is_qualified() -> None:
    try:
        try:
            raise KeyError("aten.any.dim")
        except KeyError as missing:
            error = torch.fx.proxy.TraceError("no kernel")
            error.add_note("program denoise_step")
            raise error from missing
    except torch.fx.proxy.TraceError as raised:
        fields = error_fields(raised)
    assert fields["type"] == "torch.fx.proxy.TraceError"
    assert fields["message"].splitlines() == [
        "no kernel",
        "program denoise_step",
        "caused by KeyError: 'aten.any.dim'",
    ]


def test_a_cycle_in_the_chain_ends() -> None:
    first, second = ValueError("a"), ValueError("b")
    first.__context__, second.__context__ = second, first
    assert error_fields(first)["message"].splitlines() == ["a", "caused by ValueError: b"]


def test_a_failed_subprocess_gives_its_own_words() -> None:
    captured = subprocess.CalledProcessError(1, ["flatc"], stderr=b"error:\n  schema.json:1: 7: bad value\n")
    assert error_fields(captured)["message"].splitlines() == [
        "Command '['flatc']' returned non-zero exit status 1.",
        "its output: error: / schema.json:1: 7: bad value",
    ]
    assert subprocess_output(ValueError("not a subprocess")) is None


def test_an_uncaptured_subprocess_is_read_back_from_the_stage_log(tmp_path: Path) -> None:
    """ExecuTorch runs flatc with check=True and nothing captured: its words go to the stage child's
    stderr, the stage log, and the error event takes them from there."""
    child = f"""
import json, subprocess, sys
from worker.child.events import error_fields
print("W" * 20000, file=sys.stderr)  # a log longer than the tail read back: its first line is cut
print("INFO:root:    aten.eq.Scalar", file=sys.stderr, flush=True)
try:
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('error:\\\\n  schema.json:1: 1924: '"
                    "'error: cannot parse value starting with: -\\\\n'); sys.exit(1)"], check=True)
except subprocess.CalledProcessError as error:
    print(json.dumps(error_fields(error)), file=open({str(tmp_path / "fields.json")!r}, "w"))
"""
    log = tmp_path / "lower.log"
    with log.open("wb") as out:
        subprocess.run([sys.executable, "-c", child], stdout=out, stderr=subprocess.STDOUT, check=True,
                       cwd=ROOT)  # fmt: skip
    message = json.loads((tmp_path / "fields.json").read_text())["message"]
    assert message.splitlines()[-1] == (
        "its output: error: / schema.json:1: 1924: error: cannot parse value starting with: -"
    )


def test_a_failed_subprocess_is_named_by_its_program_and_own_words_in_one_line() -> None:
    """The row's cause of 1.4.1's export of multi_task_dit: flatc's own words, not its command line of
    temporary paths."""
    failed = subprocess.CalledProcessError(
        1, ["/venv/executorch/data/bin/flatc", "--binary", "-o", "/tmp/x", "/tmp/x/schema.json"],
        stderr=b"error:\n  /tmp/x/schema.json:1: 12750: error: cannot parse value starting with: -\n",
    )  # fmt: skip
    fields = error_fields(failed)
    error = ErrorInfo(
        stage="export", type=fields["type"], message=fields["message"] + "\nprogram observation"
    )
    assert error.one_line() == (
        "subprocess.CalledProcessError: flatc exited 1: "
        "error: / /tmp/x/schema.json:1: 12750: error: cannot parse value starting with: -"
    )
    # Any other error keeps the line that says what went wrong.
    assert ErrorInfo(stage="export", type="RuntimeError", message="no kernel\nits: x").one_line() == (
        "RuntimeError: no kernel"
    )
