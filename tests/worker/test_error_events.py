"""A stage's error event: the type, the message with its notes and the chain of causes, the traceback."""

from __future__ import annotations

import torch

from worker.child.events import error_fields


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
