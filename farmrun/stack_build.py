"""Build a stack's virtualenv from the repository's own pinned files: what ``make stack STACK=NAME`` runs.

``python -m farmrun.stack_build NAME [--wheel PATH] [--root .stacks]`` installs, into ``ROOT/NAME``,
the stack's lock file (``requirements/stacks/NAME.txt``), then lerobot without its dependencies, then
coverfarm itself, the way ``make install`` builds the default ``.venv``; checks the dependencies as
``make install`` does; and checks that the new environment detects as NAME (``coverfarm.stacks``).

A wheel stack is a local executorch wheel on top of a release stack, pinned by the wheel's sha256:
``--wheel`` names it the first time (the stack's lock file is written with the wheel's path and
sha256), and every build checks the wheel against that sha256 first. A wheel whose sha256 differs is
refused with one line and a non-zero exit, before anything is installed.

Runs on the standard library alone, under the Python 3.12 the stack is built with (``PYTHON312`` in
the Makefile): no virtualenv need exist yet. Prints each step's seconds, the install's total and the
environment's size, and keeps a stamp so that an unchanged stack is not installed again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from coverfarm import stacks
from coverfarm.stacks import DEFAULT_STACK, LEROBOT_LOCK, REPO, STACKS_DIR, Stack, StackError, Wheel

__all__ = ["build", "file_sha256", "wheel_stack_text"]

PIP = "24.3.1"  # the pip make install uses


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def wheel_stack_text(name: str, base: str, wheel: Wheel) -> str:
    return (
        f"# Stack {name}: a local executorch wheel on stack {base}, pinned by its sha256; every other pin\n"
        f"# is {base}'s. `make stack STACK={name}` refuses the wheel if its sha256 differs.\n"
        f"# base: {base}\n"
        f"# wheel: {wheel.path} sha256={wheel.sha256}\n"
    )


def _checked_wheel(stack: Stack) -> Wheel:
    """The stack's wheel, after checking that the file there is the one its sha256 pins."""
    assert stack.wheel is not None
    path = Path(stack.wheel.path)
    if not path.is_file():
        raise StackError(f"stack {stack.name}: its wheel {path} is not there")
    found = file_sha256(path)
    if found != stack.wheel.sha256:
        raise StackError(
            f"stack {stack.name} pins executorch wheel sha256 {stack.wheel.sha256}, "
            f"but {path} has sha256 {found}: refused"
        )
    return stack.wheel


def resolve(name: str, wheel: Path | None, base: str, directory: Path = STACKS_DIR) -> Stack:
    """The stack to build; ``wheel`` names a new wheel stack (its lock file is written) or must be the
    very wheel an existing one pins."""
    stacks.check_name(name)
    known = stacks.catalogue(directory)
    if wheel is not None:
        wheel = wheel.resolve()
        if not wheel.is_file():
            raise StackError(f"wheel {wheel} is not a file")
        named = Wheel(str(wheel), file_sha256(wheel))
        named.version  # noqa: B018  # refuses a file that is not an executorch wheel
        if name in known:
            stack = known[name]
            if stack.wheel is None:
                raise StackError(f"stack {name} is a release stack; a wheel stack needs a name of its own")
            if stack.wheel.sha256 != named.sha256:
                raise StackError(
                    f"stack {name} pins executorch wheel sha256 {stack.wheel.sha256}, "
                    f"but {wheel} has sha256 {named.sha256}: refused"
                )
        else:
            if base not in known or known[base].wheel is not None:
                raise StackError(f"base stack {base!r} is not a release stack of the catalogue")
            (directory / f"{name}.txt").write_text(wheel_stack_text(name, base, named))
            stacks.reread_catalogue()
            known = stacks.catalogue(directory)
            print(f"stack {name}: wrote {directory / f'{name}.txt'} (wheel sha256 {named.sha256})")
    if name not in known:
        raise StackError(f"unknown stack {name!r}; the catalogue has {', '.join(sorted(known))}")
    stack = known[name]
    if stack.wheel is not None:
        _checked_wheel(stack)
    return stack


def _requirements(stack: Stack) -> str:
    """Every pin pip installs with dependencies: the stack's, less lerobot (installed without them)
    and, for a wheel stack, less executorch (its wheel is installed after)."""
    skip = set(stacks.lock_pins(LEROBOT_LOCK)) | ({"executorch"} if stack.wheel is not None else set())
    return "".join(f"{name}=={version}\n" for name, version in stack.pins.items() if name not in skip)


def _stamp(stack: Stack) -> str:
    parts = [_requirements(stack), LEROBOT_LOCK.read_text(), (REPO / "pyproject.toml").read_text()]
    parts.append(stack.wheel.sha256 if stack.wheel else "")
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _run(step: str, command: list[str], timings: dict[str, float]) -> None:
    print(f"stack: {step}: {' '.join(command)}", flush=True)
    env = os.environ | {"PIP_CONSTRAINT": ""}  # the lock file is the only source of versions
    env.pop("COVERFARM_STACK", None)
    start = time.monotonic()
    subprocess.run(command, check=True, cwd=REPO, env=env)
    timings[step] = time.monotonic() - start


def _size(path: Path) -> str:
    result = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True, check=True)
    return result.stdout.split()[0]


def build(stack: Stack, root: Path, python: str) -> Path:
    """Install ``stack`` into ``root/<name>``; returns the environment's directory."""
    venv = (root / stack.name).resolve()
    stamp, marker = _stamp(stack), venv / ".installed"
    if marker.is_file() and marker.read_text().strip() == stamp:
        print(f"stack {stack.name}: up to date at {venv} ({_size(venv)})")
        return venv
    marker.unlink(missing_ok=True)
    bin_python = str(venv / "bin" / "python")
    timings: dict[str, float] = {}
    start = time.monotonic()
    if not Path(bin_python).exists():
        _run("venv", [python, "-m", "venv", str(venv)], timings)
    _run("pip", [bin_python, "-m", "pip", "install", "--quiet", "--upgrade", f"pip=={PIP}"], timings)
    requirements = venv / "requirements.txt"
    requirements.write_text(_requirements(stack))
    _run("lock", [bin_python, "-m", "pip", "install", "--quiet", "-r", str(requirements)], timings)
    if stack.wheel is not None:
        wheel = _checked_wheel(stack)
        # The sha256 in the link makes pip check it again and record it (direct_url.json), which is
        # how the installed environment is detected as this stack.
        link = f"executorch @ {Path(wheel.path).as_uri()}#sha256={wheel.sha256}"
        _run("wheel", [bin_python, "-m", "pip", "install", "--quiet", "--no-deps", link], timings)
    pip_no_deps = [bin_python, "-m", "pip", "install", "--quiet", "--no-deps"]
    _run("lerobot", [*pip_no_deps, "-r", str(LEROBOT_LOCK)], timings)
    _run("coverfarm", [*pip_no_deps, "--no-build-isolation", "-e", str(REPO)], timings)
    _run("check-deps", ["bash", str(REPO / "scripts" / "check-deps.sh"), bin_python], timings)
    seconds = time.monotonic() - start
    env = {k: v for k, v in os.environ.items() if k not in ("COVERFARM_STACK", "PYTHONPATH")}
    found = subprocess.run(
        [bin_python, "-m", "coverfarm.stacks", "current"], capture_output=True, text=True, cwd=REPO, env=env
    ).stdout.strip()
    if not found.startswith(f"{stack.name}:"):
        raise StackError(f"stack {stack.name}: the built environment is not detected as it: {found}")
    marker.write_text(stamp + "\n")
    steps = ", ".join(f"{step} {value:.0f} s" for step, value in timings.items())
    print(f"stack {stack.name}: installed in {seconds:.0f} s ({steps}); {_size(venv)} at {venv}")
    return venv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m farmrun.stack_build", description=__doc__)
    parser.add_argument("name", help="the stack (requirements/stacks/NAME.txt)")
    parser.add_argument("--wheel", type=Path, help="a local executorch wheel: a wheel stack")
    parser.add_argument("--base", default=DEFAULT_STACK, help="a new wheel stack's base release stack")
    parser.add_argument("--root", type=Path, default=REPO / ".stacks", help="where virtualenvs go")
    parser.add_argument("--python", default=sys.executable, help="the Python 3.12 to build with")
    parser.add_argument("--catalogue", type=Path, default=STACKS_DIR, help="the stacks' lock files")
    args = parser.parse_args(argv)
    try:
        stack = resolve(args.name, args.wheel, args.base, args.catalogue)
        build(stack, args.root, args.python)
    except StackError as error:
        print(error, file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as error:
        print(
            f"stack {args.name}: {' '.join(map(str, error.cmd))} exited with {error.returncode}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
