"""Why coverfarm cannot yet build some LeRobot 0.6.1 policies offline: one precise cause per policy.

Each line is what LeRobot's own constructor does with its default config and the hub unreachable (found
by building each policy offline, under a memory cap, with ``HF_HUB_OFFLINE=1``), and what an offline
adapter would have to ship. The engine gives a policy listed here its row with this cause ("❌"), never an
error and never a missing row; an adapter in ``worker/trace/policies/adapters`` replaces the entry
(``tests/worker/test_catalog.py`` checks that every LeRobot policy has exactly one of the two).
"""

from __future__ import annotations

NO_OFFLINE_BUILD: dict[str, str] = {
    "molmoact2": (
        "snapshot_download('allenai/MolmoAct2') of config.json, the processor and tokenizer files and "
        "model.safetensors, then a strict weight-key check: no random-weight path (modeling_molmoact2.py:86, "
        ":575); the release's architecture is in neither LeRobot nor transformers (MolmoAct2Config's "
        "defaults are a 13.96 B model with no image, state or action token ids, not the ~5.4 B Molmo2-ER "
        "release), so it cannot be shipped as data without the checkpoint's config.json"
    ),
}


def no_offline_build(policy: str) -> str | None:
    """Why ``policy`` cannot be built offline yet, or None when it has no known cause."""
    cause = NO_OFFLINE_BUILD.get(policy)
    return None if cause is None else f"no offline build of {policy} yet: {cause}"
