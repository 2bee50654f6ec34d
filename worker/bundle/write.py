"""Bundles: everything a device needs to run and check one policy on one backend, addressed by sha256.

Layout (docs/design.md, "Bundle"): ``programs/<name>.pte`` per program; ``manifest.json`` (programs with
their inputs and outputs by name, dtypes and shapes, runs per chunk, the chunk plan saying what feeds
what, test case, tolerance, backend, versions); ``testcase.npz`` (each program's inputs and eager outputs
on frame 0); ``frames.npz``/``references.npz`` (16 frames and their eager action chunks);
``constants.npz``; and ``inputs/<program>/<i>.bin``, the test case's inputs as raw little-endian bytes,
which is what ExecuTorch's ``executor_runner --inputs`` reads; ``programs/<name>.etrecord``, the
lowering's ETRecord, which the Inspector needs to read a profile of the program (named by the program's
``etrecord`` in the manifest; a lowering that wrote none leaves it null). A device runner needs numpy
only.

The bundle's address is the sha256 of its sorted (relative path, file sha256) list, computed by
``bundle_digest``; the runner recomputes it to verify what it fetched.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from coverfarm.digest import bundle_digest
from coverfarm.result import FP16_TOLERANCE, Bundle, ResultDocument

MANIFEST = "manifest.json"
BUNDLE_FORMAT = 1


def _spec(array: np.ndarray) -> dict[str, Any]:
    return {"dtype": str(array.dtype), "shape": list(array.shape)}


def write_bundle(
    doc: ResultDocument, trace: dict[str, Any], trace_dir: Path, lowered: Path, root: Path
) -> Bundle:
    """Assemble the bundle in a staging directory, then move it to ``root/<sha256>``."""
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bundle.", dir=root))
    (staging / "programs").mkdir()
    for name in ("testcase.npz", "frames.npz", "references.npz", "constants.npz"):
        shutil.copyfile(trace_dir / name, staging / name)
    testcase = np.load(staging / "testcase.npz")
    programs = []
    for program in trace["programs"]:
        name = program["name"]
        shutil.copyfile(lowered / f"{name}.pte", staging / "programs" / f"{name}.pte")
        etrecord = lowered / f"{name}.etrecord"
        if etrecord.is_file():
            shutil.copyfile(etrecord, staging / "programs" / etrecord.name)
        inputs = [testcase[f"{name}/in/{i}"] for i in range(len(program["input_names"]))]
        outputs = [testcase[f"{name}/out/{i}"] for i in range(len(program["output_names"]))]
        raw = staging / "inputs" / name
        raw.mkdir(parents=True)
        for i, array in enumerate(inputs):
            (raw / f"{i}.bin").write_bytes(
                np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
            )
        programs.append(
            {
                "name": name,
                "pte": f"programs/{name}.pte",
                "etrecord": f"programs/{name}.etrecord" if etrecord.is_file() else None,
                "runs_per_chunk": program["runs_per_chunk"],
                "inputs": [
                    {"name": n, **_spec(a)} for n, a in zip(program["input_names"], inputs, strict=True)
                ],
                "outputs": [
                    {"name": n, **_spec(a)} for n, a in zip(program["output_names"], outputs, strict=True)
                ],
                "raw_inputs": [f"inputs/{name}/{i}.bin" for i in range(len(inputs))],
            }
        )
    manifest = {
        "format": BUNDLE_FORMAT,
        "policy": doc.policy,
        "backend": doc.backend,
        "options": doc.options.model_dump(mode="json"),
        "programs": programs,
        "plan": trace["plan"],
        "frames": trace["frames"],
        "tolerance": trace["tolerance"],
        "seed": trace["seed"],
        "checkpoint": trace["checkpoint"],
        "substitutions": trace["substitutions"],
        "versions": doc.versions,
    }
    if doc.options.force_fp16:  # fp16 on the device, compared with eager fp32 by fp16's tolerance
        manifest.update(tolerance=FP16_TOLERANCE, precision="fp16")
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    sha = bundle_digest(staging)
    final = root / sha
    if final.exists():  # same content already stored
        shutil.rmtree(staging)
    else:
        staging.rename(final)
    return Bundle(sha256=sha, path=str(final))


def load_manifest(bundle: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((bundle / MANIFEST).read_text())
    return manifest
