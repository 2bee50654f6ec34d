"""A cell's device runs and eager baselines in full, for its page (``/cells/{id}``): per device class of
its sweep, each side's figure and interval (``coverfarm.latency_interval``), its replicas with their
jitter and the host load each recorded, the speed-up or why there is none (``coverfarm.baseline``),
failures in the runtime's own words, and the bundle's files as links to the artifact store
(``GET /api/artifacts/{sha256}``, ``GET /api/artifacts/{sha256}/{file}``) rather than a worker's paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coverfarm import device_classes, tracker, workarounds
from coverfarm.baseline import BaselineResult, Speedup, speedup
from coverfarm.cell_build import DeviceInput
from coverfarm.cell_view import Column
from coverfarm.device_result import Board, DeviceFailure, DeviceResult, LatencyStats, Replica, RuntimeIdentity
from coverfarm.latency_interval import LatencyInterval, interval_of, milliseconds_range
from coverfarm.result import ResultDocument
from coverfarm.workarounds import Workaround

ARTIFACTS = "/api/artifacts"


@dataclass(frozen=True)
class ReplicaRow:
    number: int
    median_ms: float
    p90_ms: float
    min_ms: float
    cv: float
    samples: int
    chunks_per_sample: int
    seconds: float
    stopped: str
    host_load: str  # what else ran on the host over its timed window
    isolation: str  # the host's timing lock
    threads: int | None


@dataclass(frozen=True)
class Side:
    """One measurement (the device run, or the eager baseline) as its page shows it."""

    title: str
    status: str
    figure: LatencyInterval | None
    latency: LatencyStats | None
    replicas: list[ReplicaRow]
    facts: list[tuple[str, str]]  # label, value: runtime, threads, runner, host, rules
    error: str | None = None
    failure: DeviceFailure | None = None


@dataclass(frozen=True)
class DeviceDetails:
    device_class: str
    text: str  # the cell's device text, as the grid shows it
    tone: str
    hint: str
    run: Side | None
    baseline: Side | None
    speedup: Speedup | None
    speedup_text: str  # "2.4× (2.2–2.5), known within ±10%", or why there is none
    waiting: str | None = None  # what is still to come (the run's job, the baseline's)
    # a candidate-fix runtime's run beside the run the class shows (orchestrator/reports/candidates.py)
    candidate: bool = False
    # recorded workarounds whose finding the run shows (coverfarm.workarounds.avoiding), described
    workarounds: list[Workaround] = field(default_factory=list)


@dataclass(frozen=True)
class Link:
    label: str
    href: str
    note: str | None = None


@dataclass(frozen=True)
class Artifacts:
    bundle: Link | None
    programs: list[Link] = field(default_factory=list)
    traced: list[str] = field(default_factory=list)  # traced programs: kept by the worker only


def load_text(part: Replica) -> str:
    load = part.host_load
    if load is None:
        return "not recorded"
    others = f"{load.other_cores:.2f}" if load.other_cores is not None else "?"
    average = ""
    if load.loadavg_1m_start is not None and load.loadavg_1m_end is not None:
        average = f", load average {load.loadavg_1m_start:.2f}→{load.loadavg_1m_end:.2f}"
    return f"other processes {others} of {load.cores} cores over {load.window_s:.1f} s{average}"


def isolation_text(part: Replica) -> str:
    isolation = part.isolation
    if isolation is None:
        return "no lock"
    if isolation.acquired:
        return "held"
    return f"not held (waited {isolation.waited_s:g} s, timed beside a CPU stage)"


def replica_rows(latency: LatencyStats | None) -> list[ReplicaRow]:
    if latency is None:
        return []
    return [
        ReplicaRow(
            number,
            part.median_ms,
            part.p90_ms,
            part.min_ms,
            part.cv,
            part.iterations,
            part.chunks_per_sample,
            part.seconds,
            part.stopped,
            load_text(part),
            isolation_text(part),
            part.threads,
        )
        for number, part in enumerate(latency.replicas, 1)
    ]


def interval_words(judged: LatencyInterval | None) -> str:
    """ "30.95–31.32 ms (2 replicas, 50% coverage), known within ±10%", or why there is none."""
    if judged is None:
        return "no latency"
    if judged.low_ms is None or judged.high_ms is None:
        return judged.reason or "no interval"
    coverage = f", {judged.coverage:.0%} coverage" if judged.coverage is not None else ""
    span = f"{milliseconds_range(judged.low_ms, judged.high_ms)} ({judged.replicas} replicas{coverage})"
    return f"{span}, known within ±{judged.width:.0%}" if judged.narrow else f"{span}: {judged.reason}"


def _runtime(identity: RuntimeIdentity | None, runtime: str | None) -> str:
    if identity is None:
        return runtime or "not recorded"
    words = [identity.kind, identity.version or "version unknown"]
    if identity.commit:
        words.append(identity.commit)
    text = " ".join(words)
    return f"{text} ({identity.note})" if identity.note else text


def _cpu(board: Board | None) -> list[tuple[str, str]]:
    """The host's CPU, with its vector extensions, where the result recorded it."""
    if board is None or not (cpu := board.cpu_text()):
        return []
    return [("cpu", f"{cpu}, {board.cores} cores")]


def _rules(latency: LatencyStats | None, judged: LatencyInterval | None) -> list[tuple[str, str]]:
    if latency is None or judged is None:
        return []
    facts = [("rules", f"measured under rules {judged.measured_under}, judged under {judged.judged_under}")]
    if judged.note:
        facts.append(("judged", judged.note))
    if latency.rules is not None:
        rules = latency.rules
        facts.append(
            ("timing", f"{rules.replicas} replicas asked, {rules.warmup} warm-up chunks, at least "
             f"{rules.min_chunks} samples and {rules.min_s:g} s, at most {rules.max_s:g} s; inputs "
             f"{rules.inputs}")
        )  # fmt: skip
    facts.append(("load", f"{latency.load_ms:.1f} ms (apart from the steady state)"))
    return facts


def run_side(run: DeviceInput) -> Side | None:
    result = run.run
    if result is None:
        return None
    latency = result.latency if result.status == "ok" else None
    judged = interval_of(latency) if latency is not None else None
    facts = [
        ("runtime", _runtime(result.runtime_identity, result.runtime)),
        ("runner", f"{result.runner_id if result.runner_id is not None else run.run_runner_id} on "
                   f"{result.host_id or 'an unknown host'}"),
    ]  # fmt: skip
    facts += _cpu(result.probe.board if result.probe is not None else None)
    if result.load is not None and result.load.first_ms is not None:
        warm = f", warm {result.load.warm_ms:.0f} ms" if result.load.warm_ms is not None else ""
        facts.append(("program load", f"first {result.load.first_ms:.0f} ms{warm}"))
    facts += _rules(latency, judged)
    return Side(
        "Device run", result.status, judged, result.latency, replica_rows(result.latency), facts,
        result.error, result.failure,
    )  # fmt: skip


def baseline_side(device: DeviceInput) -> Side | None:
    result: BaselineResult | None = device.baseline
    if result is None:
        return None
    latency = result.latency
    judged = interval_of(latency) if latency is not None else None
    threads = f"{result.threads} torch threads" if result.threads is not None else "threads not recorded"
    cores = f" ({result.free_cores} of {result.cores} cores free)" if result.cores is not None else ""
    runner = result.runner_id if result.runner_id is not None else device.baseline_runner_id
    facts = [
        ("eager", f"PyTorch {result.torch_version or '?'} on {threads}{cores}"),
        ("runner", f"{runner} on {result.host_id or 'an unknown host'}"),
    ]
    facts += _cpu(result.host)
    facts += _rules(latency, judged)
    return Side("Eager baseline", result.status, judged, latency, replica_rows(latency), facts, result.error)


def speedup_words(verdict: Speedup | None, waits: bool) -> str:
    if verdict is None or not verdict.allowed or verdict.value is None:
        if waits:
            return f"baseline {tracker.PENDING}: its job is still to run"
        reasons = verdict.reasons if verdict is not None else ["no device latency"]
        return "none: " + "; ".join(reasons)
    shown = f"{tracker.ratio(verdict.value)}×"
    if verdict.low is None or verdict.high is None:
        return f"{tracker.ABOUT}{shown}, no interval: " + "; ".join(verdict.reasons)
    span = f"{shown} ({tracker.ratio(verdict.low)}–{tracker.ratio(verdict.high)})"
    width = f"±{verdict.width:.0%}" if verdict.width is not None else "its bound"
    if verdict.narrow:
        return f"{span}, known within {width} (eager figure over device figure)"
    return f"{tracker.ABOUT}{span} wide: " + "; ".join(verdict.reasons)


def finding_words(result: DeviceResult | None) -> list[str]:
    """What a device run recorded that names its finding: the failure's cause and the runtime's own
    words, and the ops of the span where its output first departs from eager (a numerics run)."""
    if result is None:
        return []
    words = []
    if result.failure is not None:
        words += [result.failure.cause, result.failure.message or ""]
    summary = result.numerics.summary if result.numerics is not None else None
    if summary is not None and summary.first is not None:
        first = summary.first
        words += [first.op, *(str(example.get("op", "")) for example in first.examples)]
    return words


def device_details(
    inputs: list[DeviceInput], columns: dict[str, Column], tones: dict[str, str]
) -> list[DeviceDetails]:
    """Per device class of the cell's sweep: everything its run and baseline recorded."""
    found = []
    for device in inputs:
        column = columns[device.device_class]
        verdict = None
        if device.run is not None:
            verdict = speedup(device.baseline, device.run, device.baseline_runner_id, device.run_runner_id)
        waiting = None
        if device.run is None and device.job is not None:
            waiting = f"the run's job is {device.job.status}" + (
                f": {device.job.cause}" if device.job.cause else ""
            )
        found.append(
            DeviceDetails(
                device.device_class,
                tracker.device_text(column),
                tones[device.device_class],
                tracker.device_hint(device.device_class, column),
                run_side(device),
                baseline_side(device),
                verdict,
                speedup_words(verdict, device.baseline is None and device.baseline_waits),
                waiting,
                workarounds=workarounds.avoiding(
                    device_classes.backend_of(device.device_class),
                    finding_words(device.run),
                    column.workarounds,
                ),
            )
        )
    return found


def artifacts(doc: ResultDocument | None) -> Artifacts | None:
    """The bundle and its programs as links to the artifact store; traced programs by name."""
    if doc is None:
        return None
    bundle = None
    programs = []
    if doc.bundle is not None:
        sha = doc.bundle.sha256
        bundle = Link(f"bundle {sha[:16]}…", f"{ARTIFACTS}/{sha}", "tar")
        programs = [
            Link(f"{p.name}.pte", f"{ARTIFACTS}/{sha}/programs/{p.name}.pte", "lowered program")
            for p in doc.program_list
            if p.pte
        ]
    traced = [f"{p.name}.pt2" for p in doc.program_list if p.pt2]
    return Artifacts(bundle, programs, traced)
