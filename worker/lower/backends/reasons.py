"""How a backend's per-node answers are gathered: the reasons its own support check gives.

Nothing here decides support itself. A partitioner that builds a torch.fx ``CapabilityBasedPartitioner``
(Vulkan's, OpenVINO's) is asked through the ``OperatorSupportBase`` object it builds
(``capability_reasons``): its reason is what the check reports while it refuses the node, through its
``log_skip`` hook (``VulkanSupportedOperators``) or on stdout (``OpenvinoOperatorsSupport`` prints
"Op not supported: torch.ops.<op>"). XNNPACK's come from its partitioner configs and their
``WhyNoPartition`` reports (``xnnpack_reasons``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Iterator

import torch
from executorch.exir.backend.partitioner import Partitioner
from torch.export import ExportedProgram
from torch.fx.passes.operator_support import OperatorSupportBase

# node -> None when the support check accepts it, else the check's reason for refusing it
Reasons = dict[torch.fx.Node, str | None]

NO_IMPLEMENTATION = "no operator implementation"


_SET_LITERAL = re.compile(r"\{([^{}]*)\}")


# The reason of a node the support check accepts but no partition takes (worker.lower.observe records
# it; worker.repros.verify judges a repro of it).
LEFT_OUT = "accepted by the support check, but in no partition"


def canonical_reason(reason: str) -> str:
    """The reason with the items of any ``{...}`` set it prints in sorted order.

    VulkanSupportedOperators formats Python sets of dtypes into its reasons
    (``input[1] dtype torch.int64 not in {torch.float16, torch.float32}``); a set's order changes from
    process to process, so the same refusal would read differently in two runs and split one blocker
    group in two. Only the order of the listed items changes.
    """
    return _SET_LITERAL.sub(lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", reason)


def capability_reasons(support: OperatorSupportBase, graph_module: torch.fx.GraphModule) -> Reasons:
    """Ask a CapabilityBasedPartitioner's support check about every call_function node, with reasons.

    The check is called unchanged; only its ``log_skip`` hook (where VulkanSupportedOperators reports
    the reason it refuses a node) and what it prints (OpenvinoOperatorsSupport's "Op not supported: …")
    are observed for the duration of the call; the last thing it said is the reason.
    """
    submodules = dict(graph_module.named_modules())
    said: list[str] = []
    reasons: Reasons = {}
    hooked = hasattr(support, "log_skip")
    if hooked:
        support.log_skip = lambda node, reason: said.append(reason)  # type: ignore[attr-defined]
    try:
        for node in graph_module.graph.nodes:
            if node.op != "call_function":
                continue
            said.clear()
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed):
                    accepted = support.is_node_supported(submodules, node)
            except Exception as error:
                # The backend's own check crashed: that is the finding; say on which node.
                error.add_note(
                    f"raised by {type(support).__name__}.is_node_supported on {node.format_node()}"
                )
                raise
            said.extend(line.strip() for line in printed.getvalue().splitlines() if line.strip())
            reasons[node] = (
                None if accepted else canonical_reason(said[-1] if said else "refused by the support check")
            )
    finally:
        if hooked:
            del support.log_skip  # type: ignore[attr-defined]
    return reasons


@contextlib.contextmanager
def _why_no_partition(loggers: list[str]) -> Iterator[list[tuple[torch.fx.Node, str]]]:
    """Collect ExecuTorch's WhyNoPartition reports (logged at DEBUG) from the given loggers."""
    reports: list[tuple[torch.fx.Node, str]] = []

    class Collector(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            why = record.msg
            node, reason = getattr(why, "node", None), getattr(why, "reason", None)
            if isinstance(node, torch.fx.Node) and isinstance(reason, str):
                reports.append((node, reason))

    handler = Collector(level=logging.DEBUG)
    saved = []
    for name in loggers:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    try:
        yield reports
    finally:
        for logger, level, propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


def xnnpack_reasons(partitioner: Partitioner, ep: ExportedProgram) -> Reasons:
    """XNNPACK's answer per node: a node is accepted when the partitioner's own config matching
    (``get_matched_nodes_from_configs``) puts it in a group; otherwise the config's WhyNoPartition
    reason, or "no operator implementation" when XNNPACK has no config for the op."""
    from executorch.exir.backend.canonical_partitioners.config_partitioner import format_target_name

    configs = partitioner.target_partitioner_configs
    config_loggers = sorted(
        {type(config).__module__ for config in configs.values()}
        | {"executorch.backends.xnnpack.partition.config.xnnpack_config"}
    )
    with _why_no_partition(config_loggers) as reports:
        matched = {node for group in partitioner.get_matched_nodes_from_configs(ep) for node in group}
    said: dict[torch.fx.Node, str] = {}
    for node, reason in reports:
        said.setdefault(node, reason)
    reasons: Reasons = {}
    for node in ep.graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        if node in matched:
            reasons[node] = None
        elif format_target_name(getattr(node.target, "__name__", str(node.target))) not in configs:
            reasons[node] = NO_IMPLEMENTATION
        else:
            reasons[node] = said.get(node, "constraints not met")
    return reasons
