"""The part of a bundle's ``manifest.json`` the runner reads (written by
``worker.bundle.write.write_bundle``).

A bundle's sha256 covers its own files only, so every path its manifest names (a program's ``pte``, its
``raw_inputs``) must be one of them: relative, without ``..``, resolving inside the bundle (no symlink
out of it) to a file the digest hashed. Anything else is refused with that cause, before a program loads:
a manifest naming ``../outside/evil.pte`` would otherwise run a program no hash vouches for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from coverfarm.digest import bundle_files

MANIFEST = "manifest.json"


class BundleError(Exception):
    """The bundle is not what its address says, or is not a bundle at all: nothing of it is run."""


def _inside(path: str) -> str:
    """``path`` when it is a relative path that stays where it starts; ValueError otherwise."""
    pure = PurePosixPath(path)
    if not path or "\0" in path or "\\" in path:
        raise ValueError(f"{path!r} is not a path inside the bundle")
    if pure.is_absolute():
        raise ValueError(f"{path!r} is absolute: a bundle names its files relative to itself")
    if ".." in pure.parts:
        raise ValueError(f"{path!r} climbs out of the bundle (..)")
    return pure.as_posix()


# A file of the bundle, named relative to it.
BundlePath = Annotated[str, AfterValidator(_inside)]


class TensorSpec(BaseModel):
    name: str
    dtype: str
    shape: list[int]


class ProgramSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    pte: BundlePath
    raw_inputs: list[BundlePath] = Field(default_factory=list)  # the test case's inputs as raw .bin
    runs_per_chunk: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    etrecord: BundlePath | None = None  # the lowering's ETRecord, which reads a profile of the program


class PlanCall(BaseModel):
    program: str
    inputs: list[str]
    outputs: list[str]


class Plan(BaseModel):
    frame_inputs: list[str]
    calls: list[PlanCall]
    outputs: list[str]
    constants: list[str] = Field(default_factory=list)


class ToleranceSpec(BaseModel):
    rtol: float
    atol: float


class Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    policy: str | None = None
    backend: str | None = None
    programs: list[ProgramSpec]
    plan: Plan
    tolerance: ToleranceSpec
    frames: int
    versions: dict[str, str] = Field(default_factory=dict)  # of the exporting stack (manifest.json)

    def paths(self) -> Iterator[tuple[str, str]]:
        """(field, path) of every file the manifest names."""
        for i, program in enumerate(self.programs):
            yield f"programs[{i}].pte", program.pte
            for j, raw in enumerate(program.raw_inputs):
                yield f"programs[{i}].raw_inputs[{j}]", raw
            if program.etrecord is not None:
                yield f"programs[{i}].etrecord", program.etrecord


def check_confined(bundle: Path, manifest: Manifest) -> None:
    """BundleError unless every path the manifest names resolves inside ``bundle`` to a file its sha256
    covers (``coverfarm.digest.bundle_files``), and no file of it is a link out of it."""
    root = bundle.resolve()
    covered = set(bundle_files(bundle))
    for field, path in manifest.paths():
        target = (bundle / path).resolve()
        if not target.is_relative_to(root):
            raise BundleError(f"{MANIFEST}'s {field} {path!r} leads outside the bundle (to {target})")
        if path not in covered:
            raise BundleError(f"{MANIFEST}'s {field} {path!r} is not a file of the bundle its sha256 covers")
    for name in sorted(covered):  # the npz files, the manifest itself: a link out would be read too
        if not (bundle / name).resolve().is_relative_to(root):
            raise BundleError(f"the bundle's {name} is a link to {(bundle / name).resolve()}, outside it")


def load_manifest(bundle: Path) -> Manifest:
    try:
        manifest = Manifest.model_validate(json.loads((bundle / MANIFEST).read_text()))
    except (OSError, ValueError) as error:
        first = error.errors()[0] if isinstance(error, ValidationError) else None
        detail = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else str(error)
        raise BundleError(f"{bundle / MANIFEST} is not a readable bundle manifest ({detail})") from None
    known = {p.name for p in manifest.programs}
    unknown = sorted({c.program for c in manifest.plan.calls} - known)
    if unknown:
        raise BundleError(f"the plan calls programs the manifest lacks: {', '.join(unknown)}")
    check_confined(bundle, manifest)
    return manifest


def read_npz(bundle: Path, name: str) -> dict[str, np.ndarray]:
    """The arrays of one of the bundle's ``.npz`` files (no pickles), or a ``BundleError`` saying why not."""
    try:
        with np.load(bundle / name, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError) as error:
        raise BundleError(f"{name} of the bundle is unreadable: {error}") from None


def take_array(arrays: Mapping[str, np.ndarray], key: str, name: str) -> np.ndarray:
    """``arrays[key]`` of the bundle's file ``name``, or a ``BundleError`` naming what it lacks."""
    if key not in arrays:
        raise BundleError(f"{name} of the bundle lacks {key}")
    return arrays[key]
