"""``coverfarm runner``: the device runner's standalone commands (probe this host, run one bundle).

Imports nothing heavy at import time: the runner side never imports torch (docs/design.md), and the
``coverfarm`` parser is built for every command.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coverfarm.errors import UserError, one_line
from coverfarm.result import error_line
from coverfarm_cli import offline, runner_farm
from gpu_runner.timing_options import add_timing_options, timing_rules

if TYPE_CHECKING:
    from coverfarm.device_result import DeviceResult


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "runner",
        help="device runner: probe this host, run a bundle",
        description="The device runner's standalone commands.",
    )
    commands = parser.add_subparsers(dest="runner_command", required=True, metavar="RUNNER_COMMAND")

    probe = commands.add_parser(
        "probe",
        help="board, Vulkan devices, ExecuTorch runtime and backends, thermal zones, device classes",
        description="Describe this host and the device classes it can serve.",
    )
    probe.add_argument("--json", action="store_true", help="print the probe document as JSON")
    _executor_runner_option(probe)
    probe.set_defaults(func=run_probe)

    run = commands.add_parser(
        "run-bundle",
        help="verify a bundle, check its test case and 16 frames, time its action chunk",
        description="Run one bundle with this host's ExecuTorch runtime and write the result document; "
        "or every bundle of a directory written by `coverfarm sweep bundles`, one result each.",
    )
    run.add_argument(
        "bundle",
        type=Path,
        metavar="DIR",
        help="the bundle directory (named by its sha256), or a bundle set (`coverfarm sweep bundles`)",
    )
    run.add_argument(
        "--out",
        type=Path,
        required=True,
        help="where to write the result document (JSON); for a bundle set, a directory",
    )
    run.add_argument("--sha256", help="the expected sha256 (default: the directory's name)")
    add_timing_options(run)
    run.add_argument(
        "--runtime",
        choices=("auto", "python", "native"),
        default="auto",
        help="python: the installed executorch.runtime; native: the executor_runner binary; auto "
        "(default): native when configured and it has the bundle's backend, else python",
    )
    run.add_argument(
        "--no-server-mode",
        dest="server_mode",
        action="store_false",
        help="one executor_runner process per call even where it has --server_mode (for comparison)",
    )
    _executor_runner_option(run)
    run.add_argument(
        "--profiling-executor-runner",
        metavar="PATH",
        help="after the timed runs, run the bundle once more with this executor_runner built with the "
        "event tracer (its ETDumps and where the time goes go into the result's profile); "
        "`wheel-etdump`: the executorch wheel's pybindings instead (a stand-in); "
        "default: $COVERFARM_PROFILING_EXECUTOR_RUNNER, else no profile",
    )
    run.add_argument(
        "--numerics",
        choices=("auto", "always", "never"),
        default="auto",
        help="run each program once more with its intermediate outputs captured, through the profiling "
        "runtime, and name the first op whose output departs from eager (the result's numerics): "
        "auto (default) after a wrong output; always also after a right one (force_fp16's error, say)",
    )
    runner_farm.add_signing_options(run)
    run.set_defaults(func=run_bundle)
    runner_farm.add_commands(commands)


def _executor_runner_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--executor-runner",
        type=Path,
        metavar="PATH",
        help="a native ExecuTorch executor_runner binary (default: $COVERFARM_EXECUTOR_RUNNER)",
    )


def _executor_runner(args: argparse.Namespace) -> Path | None:
    """The binary from --executor-runner or the environment, checked; None when neither gives one."""
    from gpu_runner.native.binary import ENV_VAR, check_binary, configured_path
    from gpu_runner.runtime import RuntimeFailure

    path = configured_path(args.executor_runner)
    if path is not None:
        try:
            check_binary(path)
        except RuntimeFailure as error:
            where = "--executor-runner" if args.executor_runner else ENV_VAR
            raise UserError(f"{where}: {error}") from None
    if getattr(args, "runtime", None) == "native" and path is None:
        raise UserError(f"--runtime native needs --executor-runner PATH or {ENV_VAR}")
    return path


def run_probe(args: argparse.Namespace) -> int:
    from gpu_runner.probe import describe, probe

    report = probe(executor_runner=_executor_runner(args))
    print(report.model_dump_json(indent=2) if args.json else describe(report))
    return 0


def run_bundle(args: argparse.Namespace) -> int:
    from coverfarm.settings import get_settings

    settings = get_settings()
    rules = timing_rules(args, settings)
    if not args.bundle.is_dir():
        raise UserError(f"bundle {args.bundle} is not a directory")
    if not args.out.parent.is_dir():
        raise UserError(f"cannot write {args.out}: {args.out.parent} is not a directory")

    binary = _executor_runner(args)
    runner_id = args.runner_id if args.runner_id is not None else runner_farm.enrolled_runner_id(args)

    from farmrun.hostlock import HostLock
    from gpu_runner.numerics import numerics_result
    from gpu_runner.profiling import ENV_VAR, configured, profile_result
    from gpu_runner.replicas import run_replicated

    declared = configured(args.profiling_executor_runner)
    if args.numerics == "always" and declared is None:
        raise UserError(
            f"--numerics always needs a profiling runtime: --profiling-executor-runner PATH (or "
            f"wheel-etdump) or {ENV_VAR}"
        )

    def measure(bundle: Path, sha256: str | None) -> DeviceResult:
        result = run_replicated(
            bundle,
            rules=rules,
            expected_sha256=sha256,
            runtime=args.runtime,
            executor_runner=binary,
            lock=HostLock(settings.timing_lock_path),
            lock_wait_s=settings.timing_lock_wait_s,
            runner_id=runner_id,
            timeout_s=settings.device_timeout_s,
            server_mode=args.server_mode,
        )
        # Once per bundle, after its timed runs and apart from them: never part of the latency.
        result = profile_result(result, bundle, declared, settings.device_timeout_s)
        return numerics_result(result, bundle, declared, settings.device_timeout_s, args.numerics)

    bundle_set = offline.read_set(args.bundle)
    if bundle_set is not None:
        if args.sha256:
            raise UserError("--sha256 names one bundle; a bundle set names its own")
        return run_bundle_set(args, bundle_set, measure)
    result = measure(args.bundle, args.sha256)
    args.out.write_text(runner_farm.result_json(result.model_dump(mode="json"), args))
    print(json.dumps(_summary(result.model_dump(mode="json")), indent=2))
    if result.status != "ok":
        print(f"coverfarm: error: bundle {args.bundle}: {not_ok(result)} (the result is in {args.out})",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def not_ok(result: DeviceResult) -> str:
    """What went wrong with a run, in one line: its status, the failure's kind and the cause's summary."""
    kind = f" ({result.failure.kind})" if result.failure else ""
    cause = error_line(result.failure.cause if result.failure else result.error) or "no cause given"
    return one_line(f"{result.status}{kind}: {cause}")


def _interval(latency: dict[str, Any]) -> list[float] | None:
    """The latency's interval, the range of its replica medians (coverfarm.latency_interval)."""
    medians = [r["median_ms"] for r in latency.get("replicas") or []]
    return [min(medians), max(medians)] if len(medians) > 1 else None


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    latency = doc.get("latency") or {}
    return {
        "status": doc["status"],
        "error": doc["error"],
        "bundle_sha256": doc["bundle_sha256"],
        "device_class": doc["device_class"],
        "runtime": doc.get("runtime"),
        "testcase_passed": all(c["passed"] for c in doc["testcase"]) if doc["testcase"] else None,
        "frames_passed": (doc.get("frames") or {}).get("passed"),
        "median_ms": latency.get("median_ms"),
        "p90_ms": latency.get("p90_ms"),
        "cv": latency.get("cv"),
        "stable": latency.get("stable"),
        "unstable_reasons": latency.get("unstable_reasons"),
        "replica_medians_ms": [r["median_ms"] for r in latency.get("replicas") or []],
        "interval_ms": _interval(latency),
        "load_ms": latency.get("load_ms"),
        "libtorch_mapped": doc["libtorch_mapped"],
        "numerics": _numerics_line(doc.get("numerics")),
    }


def _numerics_line(numerics: dict[str, Any] | None) -> str | None:
    """The numerics run in one line: the first op that departs from eager, or why there is none."""
    if not numerics:
        return None
    summary = numerics.get("summary")
    if summary is None:
        return numerics.get("error") or numerics.get("summary_note") or "not compared"
    first = summary.get("first")
    if first is None:
        return f"no op departs from eager beyond atol {summary['atol']:g}, rtol {summary['rtol']:g}"
    return (
        f"first departs: {first['op']} ({first['node']}) of {first['program']} on {first['where']}, "
        f"max abs error {first['max_abs_error']:.3g}"
    )


def run_bundle_set(
    args: argparse.Namespace, bundle_set: offline.BundleSet, measure: Callable[[Path, str], DeviceResult]
) -> int:
    """Run every bundle of a set with ``measure`` (the bundle's directory and sha256 to its result),
    writing one signed result per bundle into ``--out`` (a directory)."""
    from gpu_runner.config import load_if_present

    config = None if args.unsigned else load_if_present(runner_farm.config_path(args))
    if config is not None and bundle_set.device_class not in config.device_classes:
        raise UserError(
            f"the bundles are for {bundle_set.device_class}, which runner {config.runner_id} "
            f"({runner_farm.config_path(args)}) is not enrolled for ({', '.join(config.device_classes)})"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for entry in bundle_set.bundles:
        result = measure(args.bundle / entry.bundle_sha256, entry.bundle_sha256)
        document = result.model_dump(mode="json")
        (args.out / f"{entry.bundle_sha256}.json").write_text(runner_farm.result_json(document, args))
        if result.status == "ok":
            latency = f"{result.latency.median_ms:.2f} ms" if result.latency else "-"
            print(f"{entry.policy} {result.device_class} ok {latency}", file=sys.stderr)
        else:
            print(f"{entry.policy} {result.device_class} {not_ok(result)}", file=sys.stderr)
            failed.append(f"{entry.bundle_sha256[:12]} ({entry.policy}) {not_ok(result)}")
    print(f"{len(bundle_set.bundles)} results in {args.out}")
    if failed:
        # Every result is written (a failed run is a result to import too), but the set did not run.
        print(f"coverfarm: error: {len(failed)} of {len(bundle_set.bundles)} bundles did not run ok: "
              f"{'; '.join(failed)}", file=sys.stderr)  # fmt: skip
        return 1
    return 0
