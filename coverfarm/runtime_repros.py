"""The device runtime refusals coverfarm has one-op repros for, by the runtime source file whose check
refuses the op (as a refusal's message names it): the op and the repro's name in
``worker/repros/runtime.py``, which builds and lowers them. Torch-free, so that the report can name them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RuntimeReproRef:
    runtime_source: str  # e.g. IndexTensor.cpp
    op: str
    name: str
    seen: str  # what the repro's bundle did on a device, where and when it was run


REFS = (
    RuntimeReproRef(
        "IndexTensor.cpp",
        "aten.index.Tensor",
        "index_tensor_none_first",
        "reproduces: refused at load with the same message on h200-vulkan (main cff6f4dd32, 2026-12-01)",
    ),
    RuntimeReproRef(
        "ArgReduce.cpp",
        "aten.argmax.default",
        "argmax_texture_input",
        "does not reproduce yet: loaded and ran correctly on h200-vulkan (main cff6f4dd32, 2026-12-01)",
    ),
)


def for_message(message: str) -> RuntimeReproRef | None:
    """The repro whose runtime source file ``message`` names, if any."""
    return next((ref for ref in REFS if ref.runtime_source in message), None)
