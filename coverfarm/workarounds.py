"""Lowering workarounds: named graph rewrites a cell may be lowered with, each of which changes what is
measured. No torch: every role imports this.

A workaround exists because a backend computes an op wrong or refuses it, and a rewrite of the graph
before partitioning avoids that while computing the same function in eager. A cell lowered with one
records it in ``options.workarounds``, its reuse key and bundle carry it, and every page names it beside
the cell's outcome: the cell is then not the stock partitioner's measure of the release, but what the
release would give once the finding it works around is fixed (docs/design.md, "Workarounds"). The
rewrites themselves are ``worker/lower/workarounds.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Workaround:
    name: str
    backends: tuple[str, ...]  # the backends whose cells it may be asked for
    does: str  # what the rewrite does to the graph, as the pages say it
    because: str  # the finding it works around
    # How the finding shows in what a device run of the stock lowering recorded: words of the runtime's
    # refusal, or an op of the span where the output first departs from eager (a numerics run).
    shows_as: tuple[str, ...] = ()


GROUP_NORM_4D = Workaround(
    name="group_norm_4d",
    backends=("vulkan",),
    does="each 3-D (N, C, L) native_group_norm computed on its input viewed as (N, C, L, 1), and its output "
    "viewed back",
    because="Vulkan's native_group_norm writes zeros for a 3-D input (ExecuTorch main cff6f4dd32, measured "
    "on an H100); a 4-D input is right",
    shows_as=("native_group_norm",),
)

LAYER_NORM_AFFINE = Workaround(
    name="layer_norm_affine",
    backends=("vulkan",),
    does="each native_layer_norm without a weight or bias given ones and zeros as constants",
    because="Vulkan's partitioner takes a LayerNorm without affine parameters and its runtime refuses the "
    "program at load (NativeLayerNorm.cpp:95: native_layer_norm requires weight to be non-None; ExecuTorch "
    "main cff6f4dd32)",
    shows_as=("native_layer_norm requires weight to be non-None",),
)

LOGICAL_NOT_AS_BITWISE_NOT = Workaround(
    name="logical_not_as_bitwise_not",
    backends=("vulkan",),
    does="each logical_not of a bool tensor computed as bitwise_not, the same function on bools",
    because="Vulkan's partitioner takes aten.logical_not and its runtime has no kernel for it (refused at "
    "load: Missing operator: aten.logical_not.default); pytorch/executorch#22786 maps it onto bitwise_not in "
    "the runtime",
    shows_as=("Missing operator: aten.logical_not.default",),
)

WORKAROUNDS: dict[str, Workaround] = {
    w.name: w for w in (GROUP_NORM_4D, LAYER_NORM_AFFINE, LOGICAL_NOT_AS_BITWISE_NOT)
}


def unknown(names: Iterable[str]) -> str | None:
    """Why ``names`` are not all workarounds (the first that is none, and the known ones), or None."""
    for name in names:
        if name not in WORKAROUNDS:
            return f"unknown workaround {name!r}; known: {', '.join(sorted(WORKAROUNDS))}"
    return None


def problem(names: Iterable[str], backend: str) -> str | None:
    """Why ``names`` cannot be asked of a ``backend`` cell (an unknown name, one for other backends, a name
    twice), or None."""
    asked = list(names)
    said = unknown(asked)
    if said is not None:
        return said
    seen: set[str] = set()
    for name in asked:
        takers = WORKAROUNDS[name].backends
        if backend not in takers:
            return f"workaround {name} is for {', '.join(takers)} cells; backend {backend} has none"
        if name in seen:
            return f"workaround {name} is named twice"
        seen.add(name)
    return None


def for_backend(names: Iterable[str], backend: str) -> tuple[str, ...]:
    """Of a sweep's ``names``, those a ``backend`` cell takes, in name order."""
    return tuple(sorted(n for n in set(names) if n in WORKAROUNDS and backend in WORKAROUNDS[n].backends))


def avoiding(backend: str, words: Iterable[str], taken: Iterable[str] = ()) -> list[Workaround]:
    """The workarounds for ``backend``, other than those ``taken`` already, whose finding shows in
    ``words`` (a device run's failure, its first departing op's span), in name order."""
    text = "\n".join(words)
    skip = set(taken)
    return [
        found
        for name, found in sorted(WORKAROUNDS.items())
        if name not in skip and backend in found.backends and any(mark in text for mark in found.shows_as)
    ]


def described(names: Iterable[str]) -> list[str]:
    """``name: what it does (because …)`` for each, a stored unknown name as itself."""
    lines = []
    for name in names:
        found = WORKAROUNDS.get(name)
        lines.append(f"{name}: {found.does} (because {found.because})" if found else name)
    return lines
