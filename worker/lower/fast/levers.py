"""The levers of fast lowering, the upstream code each one replaces, and the check that it is still
the code the lever was written against.

Every lever (``worker/lower/fast/``, docs/lowering.md) reproduces or reorders what an upstream function
does, so it is right only for the upstream it was written against. Each records the sha256 of that
upstream source (``inspect.getsource`` of every function or class it replaces or relies on), with the
versions it was written and checked against. In a lower stage, a lever whose upstream source has
another digest (another executorch or torch, as in an older stack), or whose module does not import,
is left off: that part of lowering runs stock, and the result says so (``ResultDocument.levers``).
Stock is what fast lowering is checked against, so a lever left off changes the time, never the
numbers; a lever that ran against an upstream it was not checked on could change them.

To accept a new upstream: diff its source against the recorded one, check the lever against stock
on it (tests/worker/lower/fast, ``benchmarks/lowering_policies.py``), then add its digest.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

__all__ = ["ACTIVE", "LEVERS", "Lever", "lever_state", "lever_states", "partitioner_impl", "upstream_digest"]

ACTIVE = "active"


@dataclass(frozen=True)
class Lever:
    name: str
    module: str  # the module under worker.lower.fast that implements it
    wraps: tuple[str, ...]  # "module:qualified.name" of each upstream function or class it depends on
    written_against: Mapping[str, str]  # upstream_digest -> the versions it was checked on


ET_1_5_1 = "executorch 1.5.1, torch 2.14.1"
ET_1_4_1 = "executorch 1.4.1, torch 2.13.0"

LEVERS: tuple[Lever, ...] = (
    Lever(
        "exact_partitioner",
        "worker.lower.fast.exact_partitioner",
        (
            "torch.fx.passes.infra.partitioner:CapabilityBasedPartitioner",
            "executorch.backends.vulkan.partitioner.vulkan_partitioner:VulkanPartitioner.partition",
        ),
        {"e5210b312005291a40fc9023416dd688ead0351dbfa4e99ec7824d1bc6c76e47": ET_1_5_1},
    ),
    Lever(
        "pattern_cache",
        "worker.lower.fast.pattern_cache",
        (
            "executorch.backends.vulkan.patterns.pattern_registry:PatternEntry",
            "executorch.backends.vulkan.patterns.pattern_registry:register_pattern_graph",
        ),
        {"832ae14c5373d05fe54865fc6edc1ec0fba73c340d40fd1f2b4db74d452810a2": ET_1_5_1},
    ),
    Lever(
        "deferred_recompile",
        "worker.lower.fast.deferred_recompile",
        (
            "torch.fx.passes.tools_common:legalize_graph",
            "executorch.exir.lowered_backend_module:create_submodule_from_nodes",
            "executorch.exir.backend.backend_api:_create_partitions_in_graph_module",
        ),
        {
            "df1aae111f2d0b2614359ccb293cccbbc8352fbd5e7ff57c1478b22f2a4a153e": ET_1_5_1,
            # 1.4.1's create_submodule_from_nodes copies the output's meta["val"] by hand instead of
            # replace_all_uses_with(propagate_meta=True): metadata only, which the lever does not
            # touch; tests/worker/lower/fast/test_deferred_recompile.py passes on it.
            "2ccab923552e7db35c1c1905c0fcb0c967d7eb7184e4b6cf9442898cae2420c4": ET_1_4_1,
        },
    ),
    Lever(
        "deferred_constant_copies",
        "worker.lower.fast.deferred_constant_copies",
        (
            "executorch.exir.backend.backend_api:to_backend",
            "executorch.exir.backend.backend_api:_maybe_duplicate_constant_nodes",
            "executorch.exir.backend.backend_api:_partition_and_lower",
            "executorch.exir.backend.backend_api:_create_partitions",
            "executorch.exir.backend.canonical_partitioners.duplicate_constant_node_pass:duplicate_constant_node",
        ),
        {"433fa3144482d8539c5db48970890faedc63a1fc12d95fd1ef2455fa135912bb": ET_1_5_1},
    ),
    Lever(
        "shared_provenance",
        "worker.lower.fast.shared_provenance",
        ("torch.fx.traceback:NodeSource",),
        {"5e097a338cf8bfccec57bbf9897192bdd4e9edde1cf4196035d318d58433ee1a": ET_1_5_1},
    ),
    Lever(
        "lazy_recompile",
        "worker.lower.fast.lazy_recompile",
        (
            "torch.fx._lazy_graph_module:_LazyGraphModule",
            "torch.fx.graph_module:GraphModule.__new__",
            "torch.fx.graph_module:GraphModule.recompile",
        ),
        {"035043ea000a08e37657ce07dcfa0ef31471760590f7f3f353f9c811ce63a6b4": ET_1_5_1},
    ),
    Lever(
        "unlifted_delegates",
        "worker.lower.fast.unlifted_delegates",
        ("torch._higher_order_ops.executorch_call_delegate:call_delegate_cpu",),
        {"9da834a45d00f863ec0c6f8ce6a9082275ca9c4ef62fc2a21fbb0067d45b1c0c": ET_1_5_1},
    ),
)


def _resolve(reference: str) -> Any:
    module_name, _, qualified = reference.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualified.split("."):
        found = vars(found)[part] if isinstance(found, type) and part in vars(found) else getattr(found, part)
    return found.__func__ if isinstance(found, staticmethod | classmethod) else found


def _source(reference: str) -> str:
    found = _resolve(reference)
    registry = getattr(found, "registry", None)  # a functools.singledispatch function: every variant
    if isinstance(registry, Mapping):
        variants = sorted(registry.items(), key=lambda item: getattr(item[0], "__qualname__", str(item[0])))
        return "".join(inspect.getsource(function) for _type, function in variants)
    return inspect.getsource(found)


def _code_tokens(source: str) -> bytes:
    """The source's tokens without comments and layout: a reworded comment or a re-indented line is
    the same code (torch 2.13 and 2.14's ``CapabilityBasedPartitioner`` differ in one comment's typo)."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines = io.StringIO(inspect.cleandoc("\n" + source) if source[:1].isspace() else source).readline
    kept = [token.string for token in tokenize.generate_tokens(lines) if token.type not in skip]
    return "\0".join(kept).encode()


def upstream_digest(lever: Lever) -> str:
    """sha256 over the code (``_code_tokens``) of everything the lever wraps, in order (``wraps``)."""
    digest = hashlib.sha256()
    for reference in lever.wraps:
        digest.update(reference.encode() + b"\0" + _code_tokens(_source(reference)) + b"\0")
    return digest.hexdigest()


def _versions() -> str:
    from importlib import metadata

    return ", ".join(f"{name} {metadata.version(name)}" for name in ("executorch", "torch"))


def lever_state(lever: Lever) -> str:
    """``"active"``, or why the lever is left off and its part of lowering runs stock."""
    try:
        importlib.import_module(lever.module)
        digest = upstream_digest(lever)
    except (ImportError, AttributeError, KeyError, OSError, TypeError) as error:
        return f"stock: upstream code it wraps is not there ({type(error).__name__}: {error})"
    if digest in lever.written_against:
        return ACTIVE
    checked = "; ".join(sorted(set(lever.written_against.values()))) or "no version"
    return (
        f"stock: upstream source digest {digest[:12]} on {_versions()} is not one it was written "
        f"against ({checked})"
    )


@cache
def lever_states() -> dict[str, str]:
    """Each lever's state in this environment (the upstream code does not change within a process)."""
    return {lever.name: lever_state(lever) for lever in LEVERS}


def partitioner_impl(lowering: str) -> str:
    """The capability partitioner a ``lowering`` option runs: fast's exact one only while its lever
    is active."""
    if lowering == "fast" and lever_states()["exact_partitioner"] != ACTIVE:
        return "stock"
    return lowering
