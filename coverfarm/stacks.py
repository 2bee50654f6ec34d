"""Stacks: a named, pinned set of the packages a lowering depends on (executorch, torch and what else
differs), so that one sweep can measure several ExecuTorch releases side by side.

Every cell, CPU worker and lower job belongs to one stack. ``DEFAULT_STACK`` is the stack of this
checkout's own lock file (``requirements/lock.txt``); rows stored before stacks existed read as it.

The catalogue is ``requirements/stacks/<name>.txt``, one lock file per stack (docs/stacks.md):

* a release stack is a full pinned lock. The default's is ``-r ../lock.txt``, the one source of its
  pins; every other release stack is lock.txt with the lines its header's ``# differs:`` entries name
  changed (``derive_lock`` writes it; a test keeps it so), so that a change between stacks reads as the
  release's and not as a drifted pin;
* a wheel stack (a pull request's build) names a base stack and a local executorch wheel pinned by its
  sha256 (``# base: NAME`` and ``# wheel: PATH sha256=HEX``), and has no pins of its own.

lerobot is installed without its dependencies (it declares torch<2.12) from ``requirements/lerobot.txt``
in every stack, so its pin is every stack's. This module imports only the standard library: the
orchestrator, a worker choosing its queues and ``make stack`` (before any virtualenv exists) read it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path

__all__ = [
    "DEFAULT_STACK",
    "IDENTIFYING",
    "WHEEL_SHA256",
    "Detection",
    "Stack",
    "StackChoice",
    "StackError",
    "Wheel",
    "catalogue",
    "current_stack",
    "derive_lock",
    "detect_stack",
    "installed_versions",
    "lock_pins",
    "reread_catalogue",
    "resolve_current_stack",
]

DEFAULT_STACK = "et-1.5.1"
REPO = Path(__file__).resolve().parent.parent
STACKS_DIR = REPO / "requirements" / "stacks"
DEFAULT_LOCK = REPO / "requirements" / "lock.txt"
LEROBOT_LOCK = REPO / "requirements" / "lerobot.txt"
# The packages whose versions tell one stack from another in a result's or a worker's versions.
IDENTIFYING = ("executorch", "torch", "torchvision", "lerobot", "transformers")
# In a versions mapping: the sha256 of the local wheel executorch was installed from (pip's
# direct_url.json records it); absent for an executorch from the package registry.
WHEEL_SHA256 = "executorch-wheel-sha256"

_NAME = re.compile(r"^[a-z0-9][a-z0-9.+-]{0,63}$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")
_DIFFERS = re.compile(r"^# differs: ([A-Za-z0-9._-]+)==(\S+) \(default (\S+)\): (.+)$")
_WHEEL = re.compile(r"^# wheel: (\S+) sha256=([0-9a-f]{64})$")
_BASE = re.compile(r"^# base: (\S+)$")

log = logging.getLogger(__name__)


class StackError(ValueError):
    """A stack name or lock file that cannot be used, with one line saying why."""


def canonical(name: str) -> str:
    """A distribution name as the package index compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Wheel:
    """A local executorch wheel, named by its path and pinned by its content."""

    path: str
    sha256: str

    @property
    def version(self) -> str:
        """The version in the wheel's file name (``executorch-<version>-<tags>.whl``)."""
        parts = Path(self.path).name.split("-")
        if len(parts) < 5 or canonical(parts[0]) != "executorch" or not self.path.endswith(".whl"):
            raise StackError(f"{self.path} is not an executorch wheel (executorch-VERSION-TAGS.whl)")
        return parts[1]


@dataclass(frozen=True)
class Stack:
    """One stack of the catalogue: its pins (canonical name -> version), what differs from the
    default and why, and for a wheel stack its base and wheel."""

    name: str
    lock: Path
    pins: dict[str, str]
    differs: dict[str, str] = field(default_factory=dict)  # package -> why it differs from the default
    base: str | None = None
    wheel: Wheel | None = None

    def identity(self) -> dict[str, str]:
        """The versions that name this stack: ``IDENTIFYING`` and every package it changes."""
        names = [*IDENTIFYING, *(canonical(name) for name in self.differs)]
        return {name: self.pins[name] for name in dict.fromkeys(names) if name in self.pins}

    def describe(self) -> str:
        what = ", ".join(f"{name} {version}" for name, version in self.identity().items())
        return f"{self.name} ({what}{', wheel sha256 ' + self.wheel.sha256[:12] if self.wheel else ''})"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise StackError(
            f"stack name {name!r}: use lower-case letters, digits, '.', '+' and '-' (at most 64)"
        )
    return name


def lock_pins(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, str]:
    """The ``name==version`` pins of a lock file (canonical names), following its ``-r`` references."""
    if path in seen:
        raise StackError(f"{path}: -r references loop back to it")
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            pins |= lock_pins((path.parent / line[3:].strip()).resolve(), (*seen, path))
            continue
        match = _PIN.match(line)
        if match is None:
            raise StackError(f"{path}:{number}: not a NAME==VERSION pin: {raw!r}")
        pins[canonical(match[1])] = match[2]
    return pins


def _header(path: Path, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    return [m for line in path.read_text().splitlines() if (m := pattern.match(line.strip()))]


def _read(path: Path, bases: Mapping[str, Stack]) -> Stack:
    name = check_name(path.stem)
    wheels, base = _header(path, _WHEEL), _header(path, _BASE)
    lerobot = lock_pins(LEROBOT_LOCK)
    if wheels or base:
        if len(wheels) != 1 or len(base) != 1:
            raise StackError(f"{path}: a wheel stack names one '# base:' stack and one '# wheel:' wheel")
        if lock_pins(path):
            raise StackError(f"{path}: a wheel stack has no pins of its own (they are its base's)")
        if base[0][1] not in bases:
            raise StackError(f"{path}: base stack {base[0][1]!r} is not a release stack of the catalogue")
        wheel = Wheel(wheels[0][1], wheels[0][2])
        pins = bases[base[0][1]].pins | {"executorch": wheel.version}
        why = {"executorch": f"a local wheel, sha256 {wheel.sha256}"}
        return Stack(name, path, pins, differs=why, base=base[0][1], wheel=wheel)
    differs = {m[1]: m[4] for m in _header(path, _DIFFERS)}
    return Stack(name, path, lock_pins(path) | lerobot, differs=differs)


@cache
def _catalogue(directory: Path) -> dict[str, Stack]:
    if not directory.is_dir():
        raise StackError(f"no stack catalogue at {directory}")
    files = sorted(directory.glob("*.txt"))
    release = [path for path in files if not _header(path, _BASE)]
    stacks = {path.stem: _read(path, {}) for path in release}
    for path in files:
        if path.stem not in stacks:
            stacks[path.stem] = _read(path, stacks)
    if DEFAULT_STACK not in stacks:
        raise StackError(f"the catalogue {directory} has no default stack {DEFAULT_STACK}")
    return stacks


def catalogue(directory: Path = STACKS_DIR) -> dict[str, Stack]:
    """Every stack of the catalogue by name (read once per process and directory)."""
    return _catalogue(directory.resolve())


def reread_catalogue() -> None:
    """Forget the catalogue read so far (after a lock file was written)."""
    _catalogue.cache_clear()


def derive_lock(stack: Stack, default_lock: Path = DEFAULT_LOCK) -> str:
    """The lock file a release stack should be: its header, then lock.txt's lines with each pin its
    ``# differs:`` entries name changed, in lock.txt's order. Refuses an entry lock.txt has no pin of
    or one whose recorded default is not lock.txt's."""
    changed = {canonical(m[1]): (m[1], m[2], m[3]) for m in _header(stack.lock, _DIFFERS)}
    header = [line for line in stack.lock.read_text().splitlines() if line.startswith("#")]
    default = lock_pins(default_lock)
    for name, (shown, _version, was) in changed.items():
        if default.get(name) != was:
            raise StackError(
                f"{stack.lock}: differs entry {shown} says the default is {was}, "
                f"but {default_lock.name} pins {default.get(name, 'nothing')}"
            )
    body = []
    for line in default_lock.read_text().splitlines():
        match = _PIN.match(line.strip())
        if match is not None and canonical(match[1]) in changed:
            shown, version, _was = changed[canonical(match[1])]
            line = f"{match[1]}=={version}"
        if not line.startswith("#"):
            body.append(line)
    return "\n".join([*header, *body]) + "\n"


@dataclass(frozen=True)
class Detection:
    """Which stack a set of installed versions is: ``name`` None when none of the catalogue."""

    name: str | None
    description: str


def detect_stack(versions: Mapping[str, str], stacks: Mapping[str, Stack] | None = None) -> Detection:
    """The stack whose identifying versions (``Stack.identity``) the given versions all have.

    ``versions`` maps distribution names (as ``coverfarm.versions`` records them) to versions; packages
    it does not name are not compared, but executorch and torch must be there. A wheel stack matches
    only an executorch installed from its wheel (``WHEEL_SHA256``); a release stack only one that was
    not installed from a local wheel."""
    stacks = catalogue() if stacks is None else stacks
    have = {canonical(name): version for name, version in versions.items()}
    missing = [name for name in ("executorch", "torch") if have.get(name) in (None, "not installed")]
    if missing:
        return Detection(None, f"unknown stack: no {' and no '.join(missing)} installed")
    nearest: list[tuple[int, str, list[str]]] = []
    for stack in stacks.values():
        wrong = [
            f"{name} {version}"
            for name, version in stack.identity().items()
            if name in have and have[name] != version
        ]
        sha = have.get(WHEEL_SHA256)
        if stack.wheel is not None and sha != stack.wheel.sha256:
            wrong.append(f"executorch from wheel sha256 {stack.wheel.sha256[:12]}")
        if stack.wheel is None and sha is not None:
            wrong.append("executorch from the package registry")
        if not wrong:
            return Detection(stack.name, stack.describe())
        nearest.append((len(wrong), stack.name, wrong))
    found = ", ".join(f"{name} {have[name]}" for name in IDENTIFYING if name in have)
    if WHEEL_SHA256 in have:
        found += f", executorch from a local wheel sha256 {have[WHEEL_SHA256][:12]}"
    _count, name, wrong = min(nearest)
    return Detection(None, f"unknown stack: {found} (nearest {name} has {', '.join(wrong)})")


def _wheel_sha256(distribution: metadata.Distribution) -> str | None:
    """The sha256 pip recorded for a distribution installed from a local wheel (PEP 610)."""
    try:
        record = json.loads(distribution.read_text("direct_url.json") or "null")
    except ValueError:
        return None
    if not isinstance(record, dict) or not str(record.get("url", "")).endswith(".whl"):
        return None
    hashes = record.get("archive_info", {}).get("hashes", {})
    sha = hashes.get("sha256")
    if sha is None and str(record.get("archive_info", {}).get("hash", "")).startswith("sha256="):
        sha = record["archive_info"]["hash"].removeprefix("sha256=")
    return str(sha) if sha else None


def installed_versions(stacks: Mapping[str, Stack] | None = None) -> dict[str, str]:
    """This environment's versions of every package that tells the catalogue's stacks apart, and the
    wheel sha256 of a locally built executorch."""
    stacks = catalogue() if stacks is None else stacks
    names = dict.fromkeys([*IDENTIFYING, *(n for stack in stacks.values() for n in stack.identity())])
    found: dict[str, str] = {}
    for name in names:
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[name] = distribution.version
        if name == "executorch" and (sha := _wheel_sha256(distribution)) is not None:
            found[WHEEL_SHA256] = sha
    return found


@dataclass(frozen=True)
class StackChoice:
    """The stack this environment is taken to be, and why."""

    name: str
    reason: str


def resolve_current_stack(environ: Mapping[str, str] | None = None) -> StackChoice:
    """``COVERFARM_STACK`` when it names a stack of the catalogue; else the stack this environment's
    installed versions are; else ``DEFAULT_STACK``, with the reason in each case."""
    environ = os.environ if environ is None else environ
    try:
        stacks = catalogue()
    except StackError as error:
        return StackChoice(DEFAULT_STACK, f"{error}: taken as the default stack")
    named = environ.get("COVERFARM_STACK", "").strip()
    unknown = ""
    if named:
        if named in stacks:
            return StackChoice(named, "named by COVERFARM_STACK")
        unknown = f"COVERFARM_STACK={named} is not a stack of the catalogue ({', '.join(stacks)}); "
    detected = detect_stack(installed_versions(stacks), stacks)
    if detected.name is not None:
        return StackChoice(
            detected.name, f"{unknown}detected from installed versions: {detected.description}"
        )
    return StackChoice(DEFAULT_STACK, f"{unknown}{detected.description}: taken as the default stack")


def current_stack() -> str:
    """The name of this environment's stack (``resolve_current_stack``); a fallback is logged."""
    choice = resolve_current_stack()
    if "taken as the default" in choice.reason or "is not a stack" in choice.reason:
        log.warning("stack %s: %s", choice.name, choice.reason)
    return choice.name


def main(argv: list[str] | None = None) -> int:
    """``python -m coverfarm.stacks [list | current | derive NAME [--check]]``."""
    args = sys.argv[1:] if argv is None else argv
    try:
        if args in ([], ["list"]):
            for stack in catalogue().values():
                print(stack.describe())
        elif args == ["current"]:
            choice = resolve_current_stack()
            print(f"{choice.name}: {choice.reason}")
        elif len(args) in (2, 3) and args[0] == "derive" and args[2:] in ([], ["--check"]):
            found = catalogue().get(args[1])
            if found is None or found.wheel is not None or found.name == DEFAULT_STACK:
                raise StackError(f"{args[1]} is not a release stack derived from the default lock")
            stack = found
            text = derive_lock(stack)
            if args[2:] == ["--check"]:
                if stack.lock.read_text() != text:
                    raise StackError(f"{stack.lock} is not lock.txt with its differs entries applied")
            else:
                stack.lock.write_text(text)
        else:
            raise StackError("usage: python -m coverfarm.stacks [list | current | derive NAME [--check]]")
    except StackError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
