"""OpenVINO's lowering: ``OpenvinoPartitioner([])`` (no compile spec: the CPU device, the plugin's
defaults). It partitions through a ``CapabilityBasedPartitioner`` over ``OpenvinoOperatorsSupport``,
whose refusal is what it prints: "Op not supported: torch.ops.<op>" (``capability_reasons`` reads it).

The partitioner's package imports its NNCF quantizer and the ``openvino`` package at import; where either
is missing, making the partitioner raises that ImportError, which the cell records as its partition
stage's error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coverfarm.backends.openvino import BACKEND as CONTRACT
from worker.lower.backends import Backend, ReproTemplate

if TYPE_CHECKING:
    from executorch.exir.backend.partitioner import Partitioner

PARTITIONER_MODULE = "executorch.backends.openvino.partitioner"


def make_partitioner() -> Partitioner:
    from executorch.backends.openvino.partitioner import OpenvinoPartitioner

    return OpenvinoPartitioner([])


_ASK = '''

def lower_and_ask(ep):
    """OpenvinoOperatorsSupport prints "Op not supported: torch.ops.<op>" each time it refuses a node:
    collect what it prints for OP while lowering (and print the rest as it was)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        edge = to_edge_transform_and_lower(ep, partitioner=[PARTITIONER])
    lines = printed.getvalue().splitlines()
    said = ["Op", "not", "supported:", f"torch.ops.{OP_NAME}"]  # print("Op not supported: ", op)
    seen = [line.strip() for line in lines if line.split() == said]
    print("".join(line + "\\n" for line in lines if line.split() != said), end="")
    return edge, (seen[-1] if seen else None)
'''

BACKEND = Backend(
    name="openvino",
    make_partitioner=make_partitioner,
    capability_module=PARTITIONER_MODULE,
    partitioner_modules=(PARTITIONER_MODULE,),
    repro=ReproTemplate(
        "import contextlib\nimport io\n\n"
        "from executorch.backends.openvino.partitioner import OpenvinoPartitioner",
        CONTRACT.partitioner,
        _ASK,
    ),
)
