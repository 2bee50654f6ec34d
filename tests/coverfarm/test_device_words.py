"""The device words: a runtime's refusal or crash in the words the runner, the grid and the report share."""

from __future__ import annotations

from coverfarm.device_result import DeviceFailure
from coverfarm.device_words import MORE, REFUSED_AT_LOAD, compact, runtime_failure, short_message

RAISED = (
    "Exception raised from add_node at /src/executorch/backends/vulkan/runtime/graph/ops/impl/"
    "IndexTensor.cpp:76: (index.size() == 1) is false! only one index tensor; terminate called after "
    "throwing an instance of 'vkcompute::vkapi::Error'"
)


def test_short_message_keeps_the_check_and_its_words_without_the_path() -> None:
    # The first of its "; "-joined failures, not the terminate line after it.
    assert short_message(RAISED) == "IndexTensor.cpp:76: (index.size() == 1) is false! only one index tensor"
    first = "terminate called recursively; Exception raised from f at a/b/Shader.cpp:12: no shader"
    assert short_message(first) == "Shader.cpp:12: no shader"
    missing = "vkapi: Missing operator: aten.logical_not.default"
    assert short_message(missing) == "Missing operator: aten.logical_not.default"


def test_a_refusal_reads_the_same_in_the_grid_and_in_the_shared_words() -> None:
    failure = DeviceFailure(kind="refused_at_load", cause="x", program="forward", message=RAISED)
    said = runtime_failure("refused_at_load", RAISED, "forward")
    assert said is not None and said.startswith(f"{REFUSED_AT_LOAD}: forward: IndexTensor.cpp:76: ")
    assert failure.short_cause == said
    assert runtime_failure("crashed", "boom") == "crashed while running: boom"
    # A kind the runtime's message does not explain keeps the failure's own cause.
    assert runtime_failure("wrong_output", RAISED) is None
    wrong = DeviceFailure(kind="wrong_output", cause="max abs error 3.1", message=RAISED)
    assert wrong.short_cause == "max abs error 3.1"


def test_a_grid_cell_keeps_a_failure_up_to_the_check_that_failed() -> None:
    said = runtime_failure("refused_at_load", RAISED, "forward")
    assert said is not None
    assert compact(said) == f"refused at load: forward: IndexTensor.cpp:76 {MORE}"
    # A cause that names no check's place stays whole: a bundle's refusal names its sha256 first.
    refused = "bundle " + "ab" * 32 + " is refused: its content hashes to " + "cd" * 32
    assert compact(refused) == refused
    assert compact("max abs error 3.1") == "max abs error 3.1"
    assert compact("refused at load: forward: Shader.cpp:12") == "refused at load: forward: Shader.cpp:12"


def test_a_wrong_output_names_its_program_and_error_in_the_grid() -> None:
    cause = "test case outside tolerance (atol 0.001, rtol 0.001): denoise_step (max abs error 0.0311)"
    wrong = DeviceFailure(kind="wrong_output", cause=cause, program="denoise_step", max_abs_error=0.031136)
    assert wrong.short_cause == "output wrong: denoise_step, max abs error 0.0311"
    assert compact(wrong.short_cause) == wrong.short_cause  # no check's place: whole in the grid
