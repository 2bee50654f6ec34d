"""The stack catalogue: one source of the default's pins, release stacks that are lock.txt with only their
declared differences, detection from installed versions, the current stack, and wheel stacks pinned by
sha256 (a wheel that differs is refused before anything is installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from coverfarm import stacks
from coverfarm.stacks import (
    DEFAULT_LOCK,
    DEFAULT_STACK,
    LEROBOT_LOCK,
    REPO,
    STACKS_DIR,
    WHEEL_SHA256,
    StackError,
    catalogue,
    derive_lock,
    detect_stack,
    lock_pins,
    resolve_current_stack,
)
from farmrun.stack_build import _requirements, file_sha256, resolve

ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(Path.home())}


def test_the_default_stack_is_lock_txt_itself_with_no_pin_of_its_own() -> None:
    default = catalogue()[DEFAULT_STACK]
    own = [line for line in default.lock.read_text().splitlines() if line and not line.startswith("#")]
    assert own == ["-r ../lock.txt"], "the default stack's pins must come from requirements/lock.txt only"
    assert default.pins == lock_pins(DEFAULT_LOCK) | lock_pins(LEROBOT_LOCK)
    assert default.differs == {}


@pytest.mark.parametrize("name", sorted(set(catalogue()) - {DEFAULT_STACK}))
def test_a_release_stack_is_lock_txt_with_only_its_declared_differences(name: str) -> None:
    stack = catalogue()[name]
    if stack.wheel is not None:
        pytest.skip(f"{name} is a wheel stack: its pins are its base's")
    assert stack.lock.read_text() == derive_lock(stack), f"run: python -m coverfarm.stacks derive {name}"
    default = catalogue()[DEFAULT_STACK].pins
    changed = {pin for pin, version in stack.pins.items() if default.get(pin) != version}
    assert changed == {stacks.canonical(pin) for pin in stack.differs}
    assert "executorch" in changed and all(stack.differs.values())


def test_a_differs_entry_must_name_the_default_it_changes(tmp_path: Path) -> None:
    lock = tmp_path / "et-9.txt"
    lock.write_text("# differs: torch==2.13.0 (default 2.0.0): wrong default\n")
    stack = stacks.Stack("et-9", lock, {}, differs={"torch": "wrong default"})
    with pytest.raises(StackError, match=r"says the default is 2\.0\.0, but lock\.txt pins 2\.14\.1"):
        derive_lock(stack)


def test_installed_versions_detect_as_their_stack() -> None:
    for stack in catalogue().values():
        if stack.wheel is None:
            found = detect_stack(dict(stack.identity()))
            assert found.name == stack.name, found.description
    here = stacks.installed_versions()
    assert detect_stack(here).name == DEFAULT_STACK  # the test environment is make install's


def test_unknown_versions_say_what_they_are_and_the_nearest_stack() -> None:
    versions = catalogue()[DEFAULT_STACK].identity() | {"executorch": "1.6.0.dev20261201"}
    found = detect_stack(versions)
    assert found.name is None
    assert found.description.startswith("unknown stack: executorch 1.6.0.dev20261201, torch 2.14.1")
    assert "nearest et-1.5.1 has executorch 1.5.1" in found.description
    assert detect_stack({"torch": "2.14.1"}).description == "unknown stack: no executorch installed"
    local = catalogue()[DEFAULT_STACK].identity() | {WHEEL_SHA256: "ab" * 32}
    assert detect_stack(local).name is None  # a local build of the same version is not the release


def test_the_current_stack_is_the_named_one_else_the_detected_one() -> None:
    assert resolve_current_stack({"COVERFARM_STACK": "et-1.4.1"}).name == "et-1.4.1"
    chosen = resolve_current_stack({"COVERFARM_STACK": "et-0.1"})
    assert chosen.name == DEFAULT_STACK
    assert chosen.reason.startswith("COVERFARM_STACK=et-0.1 is not a stack of the catalogue")
    assert "detected from installed versions" in chosen.reason
    assert resolve_current_stack({}).reason.startswith("detected from installed versions: et-1.5.1")


def test_the_wheel_of_a_locally_installed_executorch_is_read_from_pips_record(tmp_path: Path) -> None:
    info = tmp_path / "executorch-1.6.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: executorch\nVersion: 1.6.0\n")
    url = {"url": "file:///w/executorch-1.6.0-cp312-cp312-linux_x86_64.whl"}
    (info / "direct_url.json").write_text(
        json.dumps(url | {"archive_info": {"hashes": {"sha256": "cd" * 32}}})
    )
    assert stacks._wheel_sha256(metadata.PathDistribution(info)) == "cd" * 32
    (info / "direct_url.json").write_text(json.dumps({"url": "file:///src", "dir_info": {"editable": True}}))
    assert stacks._wheel_sha256(metadata.PathDistribution(info)) is None


@pytest.fixture
def catalogue_copy(tmp_path: Path) -> Path:
    """The repository's catalogue, copied where a test may add lock files to it."""
    shutil.copy(DEFAULT_LOCK, tmp_path / "lock.txt")
    shutil.copytree(STACKS_DIR, tmp_path / "stacks")
    yield tmp_path / "stacks"
    stacks.reread_catalogue()


def wheel(path: Path, payload: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("executorch/__init__.py", payload)
    return path


def test_a_wheel_stack_is_pinned_by_its_sha256_and_detected_by_it(
    tmp_path: Path, catalogue_copy: Path
) -> None:
    built = wheel(tmp_path / "executorch-1.6.0.dev1-cp312-cp312-linux_x86_64.whl", "pr 1")
    stack = resolve("pr-1", built, DEFAULT_STACK, catalogue_copy)
    assert stack.wheel is not None and stack.wheel.sha256 == file_sha256(built)
    assert stack.base == DEFAULT_STACK and stack.pins["executorch"] == "1.6.0.dev1"
    assert stack.pins["torch"] == catalogue()[DEFAULT_STACK].pins["torch"]
    known = stacks.catalogue(catalogue_copy)
    installed = stack.identity() | {WHEEL_SHA256: stack.wheel.sha256}
    assert detect_stack(installed, known).name == "pr-1"
    assert resolve("pr-1", None, DEFAULT_STACK, catalogue_copy).wheel == stack.wheel  # the same file: ok
    # pip resolves the base's pins; executorch comes from the wheel, lerobot and nncf without their
    # dependencies.
    pins = _requirements(stack).splitlines()
    assert f"torch=={stack.pins['torch']}" in pins
    assert not [pin for pin in pins if pin.startswith(("executorch==", "lerobot==", "nncf=="))]
    assert len(pins) == len(stack.pins) - 1 - len(lock_pins(LEROBOT_LOCK))


def test_a_wheel_whose_sha256_differs_is_refused_before_anything_is_installed(
    tmp_path: Path, catalogue_copy: Path
) -> None:
    built = wheel(tmp_path / "executorch-1.6.0.dev1-cp312-cp312-linux_x86_64.whl", "pr 1")
    resolve("pr-1", built, DEFAULT_STACK, catalogue_copy)
    (tmp_path / "other").mkdir()
    other = wheel(tmp_path / "other" / built.name, "pr 2")
    root = tmp_path / "envs"
    command = [sys.executable, "-m", "farmrun.stack_build", "pr-1", "--wheel", str(other)]
    command += ["--catalogue", str(catalogue_copy), "--root", str(root)]
    refused = subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=REPO)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"stack pr-1 pins executorch wheel sha256 {file_sha256(built)}, "
        f"but {other} has sha256 {file_sha256(other)}: refused"
    ]
    assert not root.exists()
    # The wheel the stack names, changed on disk, is refused the same way.
    wheel(built, "changed")
    command = [sys.executable, "-m", "farmrun.stack_build", "pr-1", "--catalogue", str(catalogue_copy)]
    changed = subprocess.run(
        [*command, "--root", str(root)], capture_output=True, text=True, env=ENV, cwd=REPO
    )
    assert changed.returncode == 1 and changed.stderr.strip().endswith(": refused")
    assert not root.exists()


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        ([], "make stack needs STACK=NAME (python3 -m coverfarm.stacks list names them)"),
        (["STACK=et-0.1"], "unknown stack 'et-0.1'; the catalogue has et-"),
        (["STACK=Bad/Name"], "stack name 'Bad/Name': use lower-case letters, digits, '.', '+' and '-'"),
        (
            ["STACK=et-1.5.1", "WHEEL=/nonexistent/executorch.whl"],
            "wheel /nonexistent/executorch.whl is not a file",
        ),
    ],
)
def test_make_stack_refuses_bad_input_with_one_line(arguments: list[str], line: str) -> None:
    run = subprocess.run(
        ["make", "--no-print-directory", "-s", "stack", *arguments],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=ENV | {"STACKS_ROOT": "/nonexistent/stacks"},
    )
    assert run.returncode != 0
    assert run.stderr.splitlines()[0].startswith(line), run.stderr
    assert not Path("/nonexistent/stacks").exists()
