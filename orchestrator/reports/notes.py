"""The tracker report's Notes (random or real weights, options, substitutions) and Built on (the package
versions recorded with the results, the device runtimes, runs off their stack's release) of one body."""

from __future__ import annotations

from collections import defaultdict

from coverfarm import tracker
from coverfarm.cell_view import OffRelease
from coverfarm.result import ResultDocument
from orchestrator.models import Sweep


def _notes(sweep: Sweep, docs: list[ResultDocument]) -> list[str]:
    random = sorted(d.policy for d in docs if d.trace_info is not None and d.trace_info.weights == "random")
    real = sorted(d.policy for d in docs if d.trace_info is not None and d.trace_info.weights == "checkpoint")
    seeds = sorted({d.trace_info.seed for d in docs if d.trace_info is not None and d.policy in random})
    lines = ["Notes:", ""]
    if random:
        seed_text = ", ".join(str(s) for s in seeds)
        lines.append(
            f"  • {', '.join(random)} {'uses' if len(random) == 1 else 'use'} random weights, made from "
            "LeRobot's default config with seed "
            f"{seed_text} in the config's dtypes; device outputs are compared against eager PyTorch with "
            "the same weights. A checkpoint in another dtype (bf16) can change what the backend takes."
        )
    if real:
        verb = "uses its" if len(real) == 1 else "use their"
        lines.append(f"  • {', '.join(real)} {verb} real weights (a local checkpoint).")
    lines.append(
        "  • Constant propagation (ExecuTorch's constant_prop_pass) "
        f"{'on' if sweep.constant_prop else 'off'}; "
        f"{sweep.lowering} partitioning; each stage bounded at {sweep.timeout_s:g} s."
    )
    for doc in docs:
        if doc.trace_info is not None and doc.trace_info.substitutions:
            lines.append(f"  • {doc.policy}: {'; '.join(doc.trace_info.substitutions)}.")
    return lines


def _versions_line(docs: list[ResultDocument], package: str) -> str:
    found: dict[str, list[str]] = defaultdict(list)
    for doc in docs:
        found[doc.versions.get(package, "not recorded")].append(doc.policy)
    if len(found) <= 1:
        return next(iter(found), "not recorded")
    return "; ".join(
        f"{version} ({', '.join(sorted(policies))})" for version, policies in sorted(found.items())
    )


def _built_on(
    docs: list[ResultDocument], runtimes: list[str], off_release: list[tuple[str, str, OffRelease]]
) -> list[str]:
    lines = ["### Built on", ""]
    if not docs:
        return [*lines, "  • No result has been stored yet."]
    lines += [
        f"  • ExecuTorch: {_versions_line(docs, 'executorch')} "
        "(its backends' Python code is what was measured).",
        f"  • torch {_versions_line(docs, 'torch')}, transformers {_versions_line(docs, 'transformers')}.",
        f"  • LeRobot: {_versions_line(docs, 'lerobot')}.",
    ]
    if runtimes:
        lines += [f"  • Device {line}." for line in runtimes]
    else:
        lines.append("  • No device runs: the numbers above come from the partitioner and export only.")
    if off_release:
        runs = "; ".join(
            f"{policy} on {device_class}: {tracker.off_release_hint(flag)}"
            for policy, device_class, flag in off_release
        )
        lines.append(f"  • {tracker.OFF_RELEASE} Device runs not on the stack's release: {runs}.")
    return lines
