"""The timing options shared by ``runner run-bundle``, ``runner start`` and ``baseline``: the command
parses them, and the runner's agent writes them back (``as_arguments``) for each child it starts.

Each overrides one of the farm's timing rules (``COVERFARM_TIMING__<FIELD>``, ``coverfarm.settings``);
the thresholds that judge a measurement (CV, replica agreement) are settings only, so that a cell's
``stable`` means the same everywhere. ``--runner-id`` records who timed it (a speed-up divides two
measurements of one runner).
"""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from coverfarm.device_result import TimingRules
from coverfarm.errors import UserError
from coverfarm.settings import Settings

# option -> (TimingRules field, type, what it is)
OPTIONS = {
    "--warmup": ("warmup", int, "untimed chunks at most, fewer once they took --min-seconds"),
    "--min-chunks": ("min_chunks", int, "timed samples at least"),
    "--min-sample-ms": ("min_sample_ms", float, "shorter chunks are timed several to a sample"),
    "--min-seconds": ("min_s", float, "timed seconds at least"),
    "--max-seconds": ("max_s", float, "timed seconds at most, per replica, whatever the count"),
    "--replicas": ("replicas", int, "replicas, each in a fresh process"),
}


def add_timing_options(parser: argparse.ArgumentParser, runner_id: bool = True) -> None:
    defaults = TimingRules()
    for option, (field, kind, text) in OPTIONS.items():
        parser.add_argument(
            option, type=kind, dest=f"timing_{field}", help=f"{text} (COVERFARM_TIMING__{field.upper()}, "
            f"default {getattr(defaults, field)})",
        )  # fmt: skip
    parser.add_argument(
        "--inputs",
        choices=("cycle", "frame0"),
        dest="timing_inputs",
        help="cycle: timed chunks cycle over the frames (default, as the other side of a speed-up); "
        "frame0: frame 0 only",
    )
    if runner_id:
        parser.add_argument(
            "--runner-id", type=int, help="the runner to record as having timed it (default: this host's)"
        )


def timing_rules(args: argparse.Namespace, settings: Settings) -> TimingRules:
    """The settings' rules with the command line's overrides; a bad value is one line naming it."""
    overrides = {
        field: getattr(args, f"timing_{field}")
        for field, _kind, _text in OPTIONS.values()
        if getattr(args, f"timing_{field}", None) is not None
    }
    if getattr(args, "timing_inputs", None) is not None:
        overrides["inputs"] = args.timing_inputs
    try:
        return TimingRules.model_validate({**settings.timing.model_dump(), **overrides})
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        option = next((o for o, (f, _k, _t) in OPTIONS.items() if f == field), field or "timing")
        raise UserError(f"{option}: {first['msg']}") from None


def as_arguments(rules: TimingRules) -> list[str]:
    """``rules`` as the options above, for a child ``coverfarm`` process."""
    args = []
    for option, (field, _kind, _text) in OPTIONS.items():
        args += [option, f"{getattr(rules, field):g}" if isinstance(getattr(rules, field), float)
                 else str(getattr(rules, field))]  # fmt: skip
    return [*args, "--inputs", rules.inputs]
