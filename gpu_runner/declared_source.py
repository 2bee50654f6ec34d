"""The ExecuTorch source a host's owner says its native ``executor_runner`` was built from.

coverfarm never builds the binary, so it cannot know its source: the owner declares it in the runner's
environment, and every device result records it (``RuntimeIdentity``):

- ``COVERFARM_EXECUTOR_RUNNER_VERSION``: the source's ``version.txt``;
- ``COVERFARM_EXECUTOR_RUNNER_COMMIT``: its commit;
- ``COVERFARM_EXECUTOR_RUNNER_PATCHES``: upstream pull requests applied on top of that commit, a
  candidate fix not yet merged (``#22786``, ``pytorch/executorch#22786`` or the pull request's URL,
  separated by commas or spaces). A cell timed on such a runtime says so (``⚗ with #22786``), so the farm
  can show what a pending fix would change on the device.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from coverfarm.device_result import UPSTREAM

VERSION_ENV_VAR = "COVERFARM_EXECUTOR_RUNNER_VERSION"
COMMIT_ENV_VAR = "COVERFARM_EXECUTOR_RUNNER_COMMIT"
PATCHES_ENV_VAR = "COVERFARM_EXECUTOR_RUNNER_PATCHES"
_PULL = re.compile(
    r"^(?:https://github\.com/(?P<url_repo>[\w.-]+/[\w.-]+)/pull/(?P<url_number>\d+)/?"
    r"|(?P<repo>[\w.-]+/[\w.-]+)?#(?P<number>\d+))$"
)


def upstream_pulls(text: str) -> tuple[str, ...]:
    """``"#22786, https://github.com/pytorch/executorch/pull/22790"`` as ``("pytorch/executorch#22786",
    "pytorch/executorch#22790")``, in the order given, each once. Raises ValueError naming an entry that
    is not a pull request."""
    pulls: list[str] = []
    for entry in re.split(r"[,\s]+", text.strip()):
        if not entry:
            continue
        match = _PULL.match(entry)
        if match is None:
            raise ValueError(
                f"{PATCHES_ENV_VAR}: {entry!r} is not an upstream pull request "
                "(#N, owner/repo#N or https://github.com/owner/repo/pull/N)"
            )
        repo = match.group("url_repo") or match.group("repo") or UPSTREAM
        pull = f"{repo}#{match.group('url_number') or match.group('number')}"
        if pull not in pulls:
            pulls.append(pull)
    return tuple(pulls)


@dataclass(frozen=True)
class DeclaredSource:
    """The ExecuTorch source the host's owner says the binary was built from."""

    version: str | None = None
    commit: str | None = None
    patches: tuple[str, ...] = ()  # upstream pull requests applied on top of ``commit``

    @classmethod
    def from_environment(cls) -> DeclaredSource:
        """What the environment declares; ValueError for a patch that names no pull request."""
        version = os.environ.get(VERSION_ENV_VAR, "").strip() or None
        commit = os.environ.get(COMMIT_ENV_VAR, "").strip() or None
        return cls(
            version=version, commit=commit, patches=upstream_pulls(os.environ.get(PATCHES_ENV_VAR, ""))
        )
