"""Which op goes wrong, paired by debug handle: the comparison where the Inspector's own pairing fails.

``Inspector.calculate_numeric_gap`` pairs every output the runtime logged with eager's. On some real
captures it raises instead (a Vulkan run of diffusion's denoise step: ``IndexError`` in
``_map_sequence_aot_output``, a delegate call that logged fewer tensors than the span's eager output
holds), and nothing is compared. This pairing needs only what every capture has:

- each op the runtime ran on its CPU kernels logs its own output (``native_call_<op>.out``) under the
  debug handle of its node; eager's output of the node with that handle and op (the ETRecord's edge
  program, run node by node on the same inputs) is its reference;
- a delegate call logs its arguments, inputs and outputs mixed, under the handles of all its nodes, so
  its own outputs are not paired; a wrong one shows at the first CPU op that reads it. When that op
  departs while what it reads from the CPU side does not, the departure is the delegate call's: it is
  named by the delegate's node that op reads (``NumericsOp.seen_at``: where it was seen), with the call's
  nodes as its span, which the one-op repro is built from.

The grain is coarser than the Inspector's (nothing is judged inside a delegate call or at its own
outputs), and the summary says which pairing was used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from coverfarm.numerics import CPU, NumericsOp
from worker.profile.numerics_judge import judge, pair_outputs

DELEGATE_CALL = "DELEGATE_CALL"
KERNEL_PREFIX = "native_call_"
PAIRING = (
    "by debug handle: each op the runtime ran on its CPU kernels against eager's node of that handle and "
    "op; a delegate call's departure seen at the first CPU op that reads it"
)


def kernel_op(event_name: str) -> str | None:
    """The op's base name of a CPU-kernel event (``native_call_gt.Scalar_out`` → ``gt``); None for
    anything else (a delegate call, the ``OPERATOR_CALL`` that repeats a kernel's event)."""
    if not event_name.startswith(KERNEL_PREFIX):
        return None
    name = event_name.removeprefix(KERNEL_PREFIX)
    return name.split(".")[0].removesuffix("_out")


def node_op(node: Any) -> str:
    """A node's op base name: ``aten.log1p.default`` → ``log1p``."""
    target = getattr(node.target, "__name__", str(node.target))
    return target.split(".")[1] if target.startswith("aten.") else target.split(".")[0]


def eager_outputs(program: Any, inputs: list[Any]) -> dict[str, Any]:
    """Every call's output of ``program`` (an ExportedProgram) run on ``inputs``, by node name."""
    import torch

    outputs: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            value = super().run_node(node)
            if node.op == "call_function":
                outputs[node.name] = value
            return value

    with torch.no_grad():
        Recorder(program.module()).run(*inputs)
    return outputs


def _logged(inspector: Any) -> Iterator[tuple[str, list[int], list[Any]]]:
    """(event name, debug handles, logged tensors) of every event that logged outputs, in run order."""
    for block in inspector.event_blocks:
        for event in block.events:
            if not event.debug_data:
                continue
            handles = event.debug_handles
            handles = [handles] if isinstance(handles, int) else list(handles or [])
            yield event.name, handles, list(event.debug_data)


def pair_by_handle(
    inspector: Any, program: Any, inputs: list[Any], name: str, backend: str, atol: float, rtol: float
) -> list[tuple[NumericsOp, list[str]]]:
    """Every CPU-kernel op's output judged against eager's, in the order the runtime ran them, with the
    first delegate call seen to depart put before the op it was seen at; each with its span's node
    names (in the edge program ``program``)."""
    from worker.lower.metrics.graph import op_name

    nodes = [node for node in program.graph.nodes if node.op == "call_function"]
    by_handle: dict[int, list[Any]] = {}
    for node in nodes:
        handle = node.meta.get("debug_handle")
        if isinstance(handle, int):
            by_handle.setdefault(handle, []).append(node)
    events = list(_logged(inspector))
    # First the node each CPU-kernel event ran (by handle and op, each node once), so that a delegate
    # call's span, read from its handles, leaves out the ops of those handles that ran on the CPU.
    ran: list[Any | None] = []
    used: set[str] = set()
    for event, handles, _ in events:
        op = kernel_op(event)
        candidates = [n for h in handles for n in by_handle.get(h, []) if node_op(n) == op] if op else []
        node = next((n for n in candidates if n.name not in used), candidates[-1] if candidates else None)
        ran.append(node)
        used.update([node.name] if node is not None else [])
    eager = eager_outputs(program, inputs)
    delegated: dict[str, list[str]] = {}  # node name -> its delegate call's nodes
    found: list[tuple[NumericsOp, list[str]]] = []
    for (event, handles, logged), node in zip(events, ran, strict=True):
        if event == DELEGATE_CALL:
            members = {n.name for h in handles for n in by_handle.get(h, [])} - used - set(delegated)
            call = [n.name for n in nodes if n.name in members]  # graph order
            delegated.update({member: call for member in call})
            continue
        pairs = pair_outputs(eager[node.name], logged) if node is not None else []
        if node is None or not pairs:
            continue
        error, bound, departs = judge(pairs, atol, rtol)
        row = NumericsOp(
            program=name, op=op_name(node), node=node.name, where=CPU, max_abs_error=error, bound=bound,
            departs=departs,
        )  # fmt: skip
        source = next((arg for arg in node.all_input_nodes if arg.name in delegated), None)
        if departs and source is not None and not any(op.departs for op, _ in found):
            span = delegated[source.name]
            found.append((
                NumericsOp(
                    program=name, op=op_name(source), node=source.name, span=len(span),
                    first_node=span[0] if len(span) > 1 else None, where=backend, max_abs_error=error,
                    bound=bound, departs=True, seen_at=node.name,
                ),
                span,
            ))  # fmt: skip
        found.append((row, [node.name]))
    return found
