"""The device runtime refusals coverfarm has one-op repros for, by the words of the runtime's refusal
that identify its check (the source file whose check refuses the op, or the missing operator it names):
the op and the repro's name in ``worker/repros/runtime.py``, which builds and lowers them. Torch-free, so
that the report can name them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coverfarm.device_words import MISSING_OPERATOR


@dataclass(frozen=True)
class RuntimeReproRef:
    check: str  # words of the refusal naming its check: IndexTensor.cpp, Missing operator: aten.x.default
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
        "does not reproduce yet: loaded and ran correctly on h200-vulkan (main cff6f4dd32, 2026-12-01 and "
        "2026-12-02; so did argmax(p / q), its input computed in the delegate)",
    ),
    RuntimeReproRef(
        f"{MISSING_OPERATOR}aten.logical_not.default",
        "aten.logical_not.default",
        "logical_not",
        "reproduces: refused at load with the same message on h200-vulkan (main cff6f4dd32, 2026-12-02)",
    ),
)


_MISSING_OP = re.compile(re.escape(MISSING_OPERATOR) + r"(\S+)")


def for_message(message: str) -> RuntimeReproRef | None:
    """The repro whose check ``message`` names, if any."""
    return next((ref for ref in REFS if ref.check in message), None)


def missing_operator(message: str) -> str | None:
    """The op a runtime says it has no kernel for (``Missing operator: aten.logical_not.default``)."""
    found = _MISSING_OP.search(message)
    return found.group(1) if found else None
