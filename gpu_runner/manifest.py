"""The part of a bundle's ``manifest.json`` the runner reads (written by
``worker.bundle.write.write_bundle``)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MANIFEST = "manifest.json"


class BundleError(Exception):
    """The bundle is not what its address says, or is not a bundle at all: nothing of it is run."""


class TensorSpec(BaseModel):
    name: str
    dtype: str
    shape: list[int]


class ProgramSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    pte: str
    runs_per_chunk: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    raw_inputs: list[str] = Field(default_factory=list)  # the test case's inputs as .bin files
    etrecord: str | None = None  # the lowering's ETRecord, which reads a profile of the program


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
    return manifest
