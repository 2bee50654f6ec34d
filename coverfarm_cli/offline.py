"""Device hosts that cannot reach the farm, end to end.

1. ``coverfarm runner enrol-offline --name N --classes C --out FILE`` (admin, on a machine that reaches
   the farm): a key pair is made there, the farm keeps the public key, and ``FILE`` (0600) holds the
   private one. The file is carried to the host.
2. ``coverfarm sweep bundles ID --class C --out DIR``: every bundle a host of class ``C`` should run for
   the sweep, each unpacked and checked against its sha256, with ``DIR/bundles.json`` naming them.
3. On the host, ``coverfarm runner run-bundle DIR --out RESULTS --config FILE`` runs each bundle of the
   set and writes ``RESULTS/<sha256>.json``, signed with the file's key.
4. ``coverfarm results import RESULTS``: the farm verifies every result and stores them all, or none.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from coverfarm.errors import UserError

SET_FILE = "bundles.json"
SET_FORMAT = 1


class SetEntry(BaseModel):
    bundle_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    policy: str
    backend: str
    cells: list[int]


class BundleSet(BaseModel):
    """``bundles.json``: what ``sweep bundles`` wrote, read by ``run-bundle`` on the host."""

    format: int = SET_FORMAT
    url: str
    sweep_id: int
    device_class: str
    bundles: list[SetEntry]


def read_set(folder: Path) -> BundleSet | None:
    """The bundle set in ``folder``, None when ``folder`` holds none; UserError when unreadable."""
    path = folder / SET_FILE
    if not path.is_file():
        return None
    try:
        return BundleSet.model_validate_json(path.read_text())
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the document"
        got = f" (got {first['input']!r:.80})" if first["loc"] else ""
        raise UserError(
            f"{path} is not a bundle set written by `coverfarm sweep bundles`: {where}: {first['msg']}{got}"
        ) from None


def add_sweep_command(sweep: argparse._SubParsersAction, default_url: str) -> None:
    bundles = sweep.add_parser(
        "bundles", help="write every bundle a device class should run for a sweep, for a host offline"
    )
    bundles.add_argument("id", type=int)
    bundles.add_argument("--class", dest="device_class", required=True, help="device class, e.g. h200-vulkan")
    bundles.add_argument("--out", type=Path, required=True, help="directory to write the bundles into")
    bundles.add_argument("--url", default=default_url, help=f"the orchestrator ({default_url})")
    bundles.add_argument("--token", help="admin token (COVERFARM_ADMIN_TOKEN, else the one serve wrote)")
    bundles.set_defaults(func=run_sweep_bundles)


def add_runner_command(commands: argparse._SubParsersAction, default_url: str) -> None:
    enrol = commands.add_parser(
        "enrol-offline",
        help="(admin) enrol a host that cannot reach the farm; write its credential file to carry there",
    )
    enrol.add_argument("--name", required=True, help="the runner's name, e.g. the host's")
    enrol.add_argument("--classes", required=True, help="comma-separated device classes it may sign for")
    enrol.add_argument("--out", type=Path, required=True, help="the credential file to write (0600)")
    enrol.add_argument("--url", default=default_url, help=f"the orchestrator ({default_url})")
    enrol.add_argument("--token", help="admin token (COVERFARM_ADMIN_TOKEN, else the one serve wrote)")
    enrol.set_defaults(func=run_enrol_offline)


def run_enrol_offline(args: argparse.Namespace) -> int:
    from coverfarm_cli.farm_api import _request, _token
    from farmrun.signing import new_key_pair
    from gpu_runner.config import RunnerConfig, save

    classes = [name.strip() for name in args.classes.split(",") if name.strip()]
    if not classes:
        raise UserError("--classes names no device class")
    if args.out.exists():
        raise UserError(f"{args.out} exists: choose another --out, or remove it first")
    if not args.out.parent.is_dir():
        raise UserError(f"cannot write {args.out}: {args.out.parent} is not a directory")
    url = args.url.rstrip("/")
    private_key, public_key = new_key_pair()
    body = {"name": args.name, "device_classes": classes, "signing_key": public_key}
    enrolled = _request("POST", f"{url}/api/runners/offline", _token(args), json=body).json()
    config = RunnerConfig(
        url=url,
        runner_id=enrolled["runner_id"],
        credential="",
        name=enrolled["name"],
        device_classes=enrolled["device_classes"],
        baseline=False,
        signing_key=private_key,
        offline=True,
    )
    save(config, args.out, replace=False)
    print(
        f"runner {config.runner_id} ({config.name}) enrolled offline for {', '.join(config.device_classes)}; "
        f"credential file {args.out}: carry it to the host",
        file=sys.stderr,
    )
    print(config.runner_id)
    return 0


def run_sweep_bundles(args: argparse.Namespace) -> int:
    from coverfarm.bundle_archive import unpack
    from coverfarm.digest import bundle_digest
    from coverfarm_cli.farm_api import _request, _token

    url, token = args.url.rstrip("/"), _token(args)
    listed = _request(
        "GET", f"{url}/api/sweeps/{args.id}/device-bundles", token, params={"device_class": args.device_class}
    ).json()
    entries = [SetEntry.model_validate(entry) for entry in listed]
    if not entries:
        raise UserError(f"sweep {args.id} has no bundle for {args.device_class} (yet)")
    args.out.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        folder = args.out / entry.bundle_sha256
        if not (folder.is_dir() and bundle_digest(folder) == entry.bundle_sha256):
            _download(url, token, entry.bundle_sha256, folder, unpack)
            if bundle_digest(folder) != entry.bundle_sha256:
                raise UserError(f"bundle {entry.bundle_sha256} arrived with other content; try again")
        print(f"{entry.policy} {entry.backend} {entry.bundle_sha256} cells {entry.cells}", file=sys.stderr)
    bundle_set = BundleSet(url=url, sweep_id=args.id, device_class=args.device_class, bundles=entries)
    (args.out / SET_FILE).write_text(bundle_set.model_dump_json(indent=2) + "\n")
    print(f"{len(entries)} bundles for {args.device_class} in {args.out}")
    return 0


def _download(url: str, token: str, sha256: str, folder: Path, unpack: Any) -> None:
    import shutil

    import httpx

    shutil.rmtree(folder, ignore_errors=True)
    with tempfile.NamedTemporaryFile(suffix=".tar") as archive:
        try:
            with httpx.stream(
                "GET",
                f"{url}/api/artifacts/{sha256}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=300,
            ) as response:
                if response.is_error:
                    raise UserError(f"GET {url}/api/artifacts/{sha256}: {response.status_code}")
                for block in response.iter_bytes(1 << 20):
                    archive.write(block)
        except httpx.TransportError as error:
            raise UserError(f"cannot fetch bundle {sha256} from {url}: {error}") from None
        archive.flush()
        unpack(Path(archive.name), folder)


def read_results(folder: Path) -> list[dict[str, Any]]:
    """The result documents of a ``run-bundle`` output directory (every ``*.json`` but the set)."""
    documents = []
    for path in sorted(folder.glob("*.json")):
        if path.name == SET_FILE:
            continue
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise UserError(f"{path} is not a JSON result document: {error}") from None
        if not isinstance(document, dict):
            raise UserError(f"{path} is not a result document (a JSON object)")
        documents.append(document)
    if not documents:
        raise UserError(f"{folder} holds no result documents (*.json)")
    return documents
