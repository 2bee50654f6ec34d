"""The device table of an offline host's results: each bundle's outcome, its latency with the interval of
its replica medians, its speed-up over the same host's eager baseline with that interval, its cold and
warm load and the runtime that ran it, one row per (policy, backend, exporting ExecuTorch).

    python benchmarks/device_table.py RESULTS_DIR [RESULTS_DIR ...]

Reads what ``coverfarm runner run-bundle SET --out RESULTS_DIR`` and ``coverfarm baseline --out
RESULTS_DIR/baseline-P.json`` wrote on the host (signed or not), judges each pair with the farm's own rule
(``coverfarm.baseline.speedup``) and prints a Markdown table. No torch, no farm: the same documents that
``coverfarm results import`` stores, read as they are.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from coverfarm.baseline import BaselineResult, Speedup, speedup
from coverfarm.device_result import DeviceResult
from coverfarm.device_words import short_message
from coverfarm.latency_interval import LatencyInterval

SIGNATURE_KEY = "signature"


def read_documents(folders: list[Path]) -> tuple[list[DeviceResult], dict[str, BaselineResult]]:
    """Every device result and eager baseline (by policy) under ``folders``; an unreadable file is named
    on stderr and skipped."""
    results: list[DeviceResult] = []
    baselines: dict[str, BaselineResult] = {}
    for path in sorted(p for folder in folders for p in folder.rglob("*.json")):
        try:
            document: dict[str, Any] = json.loads(path.read_text())
            document.pop(SIGNATURE_KEY, None)
            if "bundle_sha256" in document:
                results.append(DeviceResult.model_validate(document))
            elif "policy" in document and "frames" in document:
                baseline = BaselineResult.model_validate(document)
                baselines[baseline.policy] = baseline
        except (OSError, ValueError, ValidationError) as error:
            print(f"{path}: skipped: {str(error).splitlines()[0]}", file=sys.stderr)
    return results, baselines


def _interval(judged: LatencyInterval | None) -> str:
    if judged is None:
        return "-"
    if judged.low_ms is None or judged.high_ms is None:
        return f"{judged.figure_ms:.4g} (no interval)"
    return f"{judged.figure_ms:.4g} [{judged.low_ms:.4g}–{judged.high_ms:.4g}]"


def _speedup(verdict: Speedup) -> str:
    if not verdict.allowed or verdict.value is None:
        return "; ".join(verdict.reasons) or "-"
    span = f" [{verdict.low:.2f}–{verdict.high:.2f}]" if verdict.low is not None else ""
    return f"{verdict.value:.2f}×{span}{'' if verdict.narrow else ' wide'}"


def _outcome(result: DeviceResult) -> str:
    if result.status == "ok":
        return "✓"
    if result.failure is not None:
        return f"❌ {result.failure.kind}: {short_message(result.failure.cause)}"
    return f"❌ {result.status}: {(result.error or '').splitlines()[0] if result.error else ''}"


def _load(result: DeviceResult) -> str:
    load = result.load
    if load is None or load.first_ms is None:
        return "-"
    warm = f"{load.warm_ms:.0f}" if load.warm_ms is not None else "-"
    return f"{load.first_ms:.0f} / {warm}"


def _runtime(result: DeviceResult) -> str:
    identity = result.runtime_identity
    if identity is None:
        return result.runtime or "-"
    source = identity.commit[:10] if identity.commit else "wheel"
    patches = f" + {', '.join(identity.patches)}" if identity.patches else ""
    same = "" if identity.matches_export in (True, None) else " ⚠"
    return f"{identity.kind} {identity.version or '?'} ({source}{patches}){same}"


def _export(result: DeviceResult) -> str | None:
    return result.runtime_identity.export_version if result.runtime_identity else None


def _order(result: DeviceResult) -> tuple[str, str, str]:
    return result.policy or "", result.backend or "", _export(result) or ""


def table(results: list[DeviceResult], baselines: dict[str, BaselineResult]) -> list[str]:
    lines = [
        "| policy | backend | export | class | outcome | median ms [interval] | eager ms [interval] "
        "| speed-up [interval] | load cold / warm ms | runtime |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in sorted(results, key=_order):
        verdict = speedup(baselines.get(result.policy or ""), result)
        export = _export(result)
        lines.append(
            f"| {result.policy} | {result.backend} | {export or '?'} | {result.device_class} "
            f"| {_outcome(result)} | {_interval(verdict.device)} | {_interval(verdict.eager)} "
            f"| {_speedup(verdict)} | {_load(result)} | {_runtime(result)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        print(f"device_table: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    results, baselines = read_documents(args.folders)
    if not results:
        print(f"device_table: no device result under {', '.join(map(str, args.folders))}", file=sys.stderr)
        return 1
    print("\n".join(table(results, baselines)))
    for policy, baseline in sorted(baselines.items()):
        cpus = baseline.cpus
        threads = f"{cpus.threads} threads" if cpus is not None else f"{baseline.threads} threads"
        print(f"\neager {policy}: torch {baseline.torch_version}, {threads}, status {baseline.status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
