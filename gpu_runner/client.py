"""The runner's side of the orchestrator's HTTP API: every call authenticated with the runner credential.

Boards never get database credentials; this is all they say to the farm. No torch, no ExecuTorch.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import httpx

from coverfarm.bundle_archive import unpack
from gpu_runner.config import RunnerConfig

TIMEOUT = httpx.Timeout(30.0, read=300.0)


class Refused(Exception):
    """The orchestrator said no (``status`` is its HTTP status, ``detail`` its reason)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail"))
    except (ValueError, AttributeError):
        return response.text.strip()


class FarmClient:
    def __init__(self, config: RunnerConfig, http: httpx.Client | None = None) -> None:
        """``http``: the client to send through (an in-process app's, in tests); by default one to
        ``config.url``. Either way every call carries the runner credential."""
        self.config = config
        self._http = http or httpx.Client(base_url=config.url.rstrip("/"), timeout=TIMEOUT)
        self._http.headers["Authorization"] = f"Bearer {config.credential}"

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.is_error:
            raise Refused(response.status_code, _detail(response))
        return response.json() if response.content else None

    def heartbeat(self) -> dict[str, Any]:
        status: dict[str, Any] = self._call("POST", "/api/runners/me/heartbeat")
        return status

    def health_checks(self) -> list[dict[str, str]]:
        checks: list[dict[str, str]] = self._call("GET", "/api/runners/me/health-check")
        return checks

    def report_health(self, device_class: str, sha256: str, result: dict[str, Any]) -> dict[str, Any]:
        body = {"device_class": device_class, "sha256": sha256, "result": result}
        status: dict[str, Any] = self._call("POST", "/api/runners/me/health-check", json=body)
        return status

    def claim(self, job_id: int) -> dict[str, Any]:
        claim: dict[str, Any] = self._call("POST", f"/api/device-jobs/{job_id}/claim")
        return claim

    def job_heartbeat(self, job_id: int, attempt: int) -> bool:
        return bool(
            self._call("POST", f"/api/device-jobs/{job_id}/heartbeat", json={"attempt": attempt})["alive"]
        )

    def report(self, job_id: int, attempt: int, result: dict[str, Any]) -> None:
        self._call("POST", f"/api/device-jobs/{job_id}/result", json={"attempt": attempt, "result": result})

    def report_baseline(self, job_id: int, attempt: int, baseline: dict[str, Any]) -> None:
        body = {"attempt": attempt, "baseline": baseline}
        self._call("POST", f"/api/device-jobs/{job_id}/baseline", json=body)

    def infra_error(self, job_id: int, attempt: int, error: str) -> None:
        self._call(
            "POST", f"/api/device-jobs/{job_id}/infra-error", json={"attempt": attempt, "error": error}
        )

    def fetch(self, sha256: str, into: Path) -> Path:
        """Download bundle ``sha256`` into ``into/<sha256>`` (replacing it); the caller verifies its hash."""
        into.mkdir(parents=True, exist_ok=True)
        target = into / sha256
        with tempfile.TemporaryDirectory(prefix=".fetch.", dir=into) as work:
            archive = Path(work) / "bundle.tar"
            with self._http.stream("GET", f"/api/artifacts/{sha256}") as response:
                if response.is_error:
                    response.read()
                    raise Refused(response.status_code, _detail(response))
                with archive.open("wb") as out:
                    for block in response.iter_bytes():
                        out.write(block)
            staged = Path(work) / sha256
            unpack(archive, staged)
            if target.exists():
                shutil.rmtree(target)
            staged.rename(target)
        return target
