"""Run repro scripts against the installed wheel and judge them: "repro ready" only when the script shows
the blocker group's own reason and the op stays on the CPU.

Scripts run in one bounded child process (``worker.repros.child``), each under its own time bound; one
that runs out is recorded as such and the rest run in a new child. Verdicts are cached by the sha256 of
the script's text and the versions of the packages it runs against, so a sweep does not run the same
repro twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from coverfarm import backends
from coverfarm.result import Repro
from coverfarm.versions import versions
from farmrun.hostlock import host_lock
from worker.child.bounded import run_bounded
from worker.lower.backends.reasons import LEFT_OUT, canonical_reason
from worker.repros.script import VERDICT_PREFIX

START_BOUND_S = 300.0  # importing torch and executorch in the child, before the first repro
OUTPUT_LIMIT = 20_000  # characters of a repro's output kept in the result document


@dataclass
class Outcome:
    """What running one repro showed, before it is judged against a group's reason."""

    output: str
    reason: str | None = None
    delegated: bool | None = None
    error: str | None = None
    cached: bool = False


def default_repro_cache() -> Path:
    return Path(os.environ.get("COVERFARM_REPRO_CACHE", Path.home() / ".cache" / "coverfarm" / "repros"))


def cache_key(text: str) -> str:
    pinned = {k: v for k, v in versions(*backends.names()).items() if k != "coverfarm"}
    blob = json.dumps({"text": text, "versions": pinned}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def parse_output(output: str) -> Outcome:
    """The verdict line a repro prints last; an error when there is none."""
    for line in reversed(output.splitlines()):
        if line.startswith(VERDICT_PREFIX):
            try:
                verdict = json.loads(line.removeprefix(VERDICT_PREFIX))
            except json.JSONDecodeError:
                break
            reason = verdict.get("reason")
            delegated = verdict.get("delegated")
            return Outcome(
                output=output,
                reason=reason if isinstance(reason, str) else None,
                delegated=delegated if isinstance(delegated, bool) else None,
            )
    return Outcome(output=output, error="the repro printed no verdict line")


def _load_cached(cache: Path, key: str) -> Outcome | None:
    path = cache / f"{key}.json"
    try:
        return Outcome(**{**json.loads(path.read_text()), "cached": True})
    except (OSError, json.JSONDecodeError, TypeError):  # missing, half-written or of another format
        return None


def _store(cache: Path, key: str, outcome: Outcome) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    staging = cache / f".{key}.{os.getpid()}.tmp"
    staging.write_text(json.dumps({**asdict(outcome), "cached": False}))
    staging.replace(cache / f"{key}.json")  # atomic: another worker may write the same verdict


def run_repros(texts: dict[str, str], work: Path, cache: Path, bound_s: float) -> dict[str, Outcome]:
    """Run each named script (cached verdicts are reused); every name gets an outcome."""
    outcomes: dict[str, Outcome] = {}
    keys = {name: cache_key(text) for name, text in texts.items()}
    pending = []
    for name in sorted(texts):
        cached = _load_cached(cache, keys[name])
        if cached is not None:
            outcomes[name] = cached
        else:
            pending.append(name)
    round_ = 0
    while pending:
        round_ += 1
        scripts = work / f"repros-{round_}"
        shutil.rmtree(scripts, ignore_errors=True)
        scripts.mkdir(parents=True)
        for name in pending:
            (scripts / f"{name}.py").write_text(texts[name])
        run = run_bounded(
            "worker.repros.child",
            ["--scripts", str(scripts)],
            events_path=scripts / "events.jsonl",
            bounds={"start": START_BOUND_S, **{f"repro-{name}": bound_s for name in pending}},
            first_phase="start",
            log_path=scripts / "child.log",
            host_lock=host_lock(),
        )
        for event in run.events:
            if event["event"] != "repro":
                continue
            name = event["name"]
            output = (scripts / f"{name}.out").read_text(errors="replace")
            outcome = parse_output(output)
            if event.get("error"):
                outcome.error = f"the repro raised {event['error']}"
            outcomes[name] = outcome
            _store(cache, keys[name], outcome)
        started = [e["phase"].removeprefix("repro-") for e in run.events if e["event"] == "phase"]
        unfinished = [name for name in pending if name not in outcomes]
        if not unfinished:
            break
        culprit = next((name for name in reversed(started) if name in unfinished), None)
        if culprit is None:  # the child never reached a repro: nothing more can run
            why = f"the repro process ended before running it:\n{run.log_tail}"
            for name in unfinished:
                outcomes[name] = Outcome(output="", error=why)
            break
        partial = scripts / f"{culprit}.out"
        output = partial.read_text(errors="replace") if partial.exists() else ""
        if run.timed_out_phase == f"repro-{culprit}":
            outcomes[culprit] = Outcome(output=output, error=f"the repro took over {bound_s:.0f} s")
        else:
            outcomes[culprit] = Outcome(
                output=output, error=f"the repro process died (status {run.returncode})"
            )
        pending = [name for name in unfinished if name != culprit]
    return outcomes


def judge(text: str, outcome: Outcome, expected_reason: str) -> Repro:
    """The stored repro: ready when the op stays on the CPU for exactly the group's reason.

    A node the check accepts but no partition took (``LEFT_OUT``) is ready when the repro's check
    accepts it too and the op still stays on the CPU.
    """
    seen = canonical_reason(outcome.reason) if outcome.reason is not None else None
    if outcome.error is None and outcome.delegated is False:
        reproduced = seen == expected_reason or (seen is None and expected_reason == LEFT_OUT)
    else:
        reproduced = False
    return Repro(
        text=text,
        output=outcome.output[-OUTPUT_LIMIT:],
        reproduced=reproduced,
        reason_seen=seen,
        delegated=outcome.delegated,
        error=outcome.error,
    )
