"""Arm VGF's lowering: ``VgfPartitioner(VgfCompileSpec("TOSA-1.0+FP"))`` (TOSA 1.0, floating point).

``VgfPartitioner`` is a ``TOSAPartitioner``: it builds its support check with ``tosa_support_factory``
around a ``WhyNoPartitionReporter`` and partitions through the ``CapabilityBasedPartitioner`` of
``executorch.backends.arm.tosa.partitioner`` (the fast lowering's exact partitioner is swapped in there).
Its reasons are what that reporter is told first about a node (``reasons``), the words its own table of
rejected nodes prints, with the name of an input it names written as the input's position
(``positional``). After partitioning it drops partitions of no-op ops only ("Partition contained only
ops which are removed in the TOSA lowering, …"); those nodes are left out with that reason
(``worker.lower.observe`` reads it through ``partition_reasons``).

Each partition's TOSA is compiled into a VGF blob by the ML SDK's ``model-converter``, which the wheel's
backend finds on ``PATH`` or through ``MODEL_CONVERTER_PATH``. A worker started as ``.venv/bin/coverfarm``
has no ``.venv/bin`` on its ``PATH``, so importing this module points ``MODEL_CONVERTER_PATH`` at the
converter the ``ai-ml-sdk-model-converter`` package installed (when none is set or on ``PATH``); its
children, the repro child included, inherit it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from coverfarm.backends.vgf import BACKEND as CONTRACT
from worker.lower.backends import Backend, ReproTemplate

if TYPE_CHECKING:
    import torch
    from executorch.exir.backend.partitioner import Partitioner
    from torch.export import ExportedProgram

    from worker.lower.backends.reasons import Reasons

PARTITIONER_MODULE = "executorch.backends.arm.vgf.partitioner"
# The module whose CapabilityBasedPartitioner VgfPartitioner (a TOSAPartitioner) builds.
CAPABILITY_MODULE = "executorch.backends.arm.tosa.partitioner"
COMPILE_SPEC = "TOSA-1.0+FP"
CONVERTER_ENV_VAR = "MODEL_CONVERTER_PATH"


def installed_converter() -> Path | None:
    """The ``model-converter`` binary of the installed ``ai-ml-sdk-model-converter`` package, if any."""
    spec = importlib.util.find_spec("model_converter")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "binaries" / "bin" / "model-converter"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def point_at_converter() -> None:
    """Set ``MODEL_CONVERTER_PATH`` to the installed converter unless one is set or on ``PATH``."""
    on_path = shutil.which("model-converter") or shutil.which("model_converter")
    if os.environ.get(CONVERTER_ENV_VAR) or on_path:
        return
    binary = installed_converter()
    if binary is not None:
        os.environ[CONVERTER_ENV_VAR] = str(binary)


point_at_converter()


def positional(node: torch.fx.Node, reason: str) -> str:
    """``reason`` with the names of ``node``'s inputs replaced by their positions: the TOSA checks name
    the input they refuse ("Non-constant int64 input aten_view_copy_default_93"), a name that differs
    from node to node and graph to graph, which would make a blocker group of each node and a repro
    (whose nodes have other names) show another reason. The repro template applies the same."""
    for index, source in enumerate(node.all_input_nodes):
        reason = re.sub(rf"(?<![\w.]){re.escape(source.name)}(?![\w.])", f"<input {index}>", reason)
    return reason


def make_partitioner() -> Partitioner:
    from executorch.backends.arm.vgf import VgfCompileSpec, VgfPartitioner

    return VgfPartitioner(VgfCompileSpec(COMPILE_SPEC))


def reasons(partitioner: Partitioner, ep: ExportedProgram) -> Reasons:
    """The partitioner's own verdict per call_function node: the support check it builds in
    ``partition`` (``_create_operator_support``, in the ``TosaLoweringContext`` it sets, with the custom
    ops it registers), asked node by node; a refused node's reason is the first thing the check told its
    reporter about it (what the partitioner's table of rejected nodes prints)."""
    from executorch.backends.arm.tosa.partitioner import _is_custom_partition_op
    from executorch.backends.arm.tosa.specification import TosaLoweringContext
    from executorch.exir.backend.utils import WhyNoPartitionReporter
    from torch._export.utils import _get_shape_env_from_gm

    tosa = partitioner
    reporter = WhyNoPartitionReporter()
    graph_module = ep.graph_module
    submodules = dict(graph_module.named_modules())
    found: Reasons = {}
    with TosaLoweringContext(tosa.tosa_spec, _get_shape_env_from_gm(graph_module)):
        support = tosa._create_operator_support(ep, reporter)
        custom = tosa._custom_partition_ops
        for node in graph_module.graph.nodes:
            if node.op != "call_function":
                continue
            try:
                accepted = support.is_node_supported(submodules, node) or _is_custom_partition_op(
                    custom, node.target
                )
            except Exception as error:
                error.add_note(f"raised by the TOSA support check on {node.format_node()}")
                raise
            said = reporter._rejected_nodes.get(node, "refused by the support check")
            found[node] = None if accepted else positional(node, said)
    return found


@contextlib.contextmanager
def partition_reports() -> Iterator[dict[torch.fx.Node, str]]:
    """Within the block, every ``WhyNoPartitionReporter.report_reject`` (the first per node, as the
    reporter keeps it): what the partitioner says of the nodes it drops after partitioning."""
    from executorch.exir.backend.utils import WhyNoPartitionReporter

    said: dict[torch.fx.Node, str] = {}
    original = WhyNoPartitionReporter.report_reject

    def report_reject(self: WhyNoPartitionReporter, node: torch.fx.Node, reason: str) -> None:
        said.setdefault(node, positional(node, reason))
        original(self, node, reason)

    WhyNoPartitionReporter.report_reject = report_reject
    try:
        yield said
    finally:
        WhyNoPartitionReporter.report_reject = original


_ASK = '''

def lower_and_ask(ep):
    """The partitioner tells a WhyNoPartitionReporter why it rejects a node (its table of rejected nodes
    prints it, first report per node): collect what it is told about nodes of OP while lowering."""
    said = {}
    original = WhyNoPartitionReporter.report_reject

    def report_reject(self, node, reason):
        if str(getattr(node.target, "__name__", node.target)) == OP_NAME:
            # An input the reason names by its node name is written as its position, as the tracker does.
            shown = reason
            for index, source in enumerate(node.all_input_nodes):
                pattern = rf"(?<![\\w.]){re.escape(source.name)}(?![\\w.])"
                shown = re.sub(pattern, f"<input {index}>", shown)
            said.setdefault(node, shown)
        original(self, node, reason)

    WhyNoPartitionReporter.report_reject = report_reject
    try:
        edge = to_edge_transform_and_lower(ep, partitioner=[PARTITIONER])
    finally:
        WhyNoPartitionReporter.report_reject = original
    return edge, (list(said.values())[-1] if said else None)
'''

BACKEND = Backend(
    name="vgf",
    make_partitioner=make_partitioner,
    capability_module=CAPABILITY_MODULE,
    reasons=reasons,
    partition_reports=partition_reports,
    partitioner_modules=(PARTITIONER_MODULE,),
    repro=ReproTemplate(
        "from executorch.backends.arm.vgf import VgfCompileSpec, VgfPartitioner\n"
        "from executorch.exir.backend.utils import WhyNoPartitionReporter",
        CONTRACT.partitioner,
        _ASK,
    ),
)
