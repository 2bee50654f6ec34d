"""How one logged output is judged against eager's: the pairs to compare and the bundle's tolerance.

Shared by the Inspector's pairing (``worker/profile/numerics.py``) and the pairing by debug handle
(``worker/profile/numerics_handles.py``): ``np.allclose(runtime, eager, rtol, atol)`` per pair, its
error the max abs difference (docs/metrics.md, "Numerics figures").
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [v for item in value for v in _tensors(item)]
    return []


def _array(tensor: Any) -> np.ndarray:
    return np.asarray(tensor.detach().to("cpu").double().numpy())


def _error(actual: np.ndarray, expected: np.ndarray) -> float:
    if actual.size == 0:
        return 0.0
    diff = np.abs(actual - expected)
    return float(np.max(np.where(np.isnan(diff), np.inf, diff)))


def pair_outputs(eager: Any, runtime: list[Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(runtime, eager) arrays to compare: each eager tensor with the runtime tensor of its shape that is
    closest to it. Eager gives a span one output, its last node's; a delegate call with several outputs
    comes as several rows of one span (``calculate_numeric_gap`` pairs each with that same eager output),
    and only one of them is that node's: the closest. Another output's error shows at the ops reading it."""
    theirs = [_array(t) for value in runtime for t in _tensors(value)]
    pairs = []
    for expected in (_array(t) for t in _tensors(eager)):
        same = [actual for actual in theirs if actual.shape == expected.shape]
        if same:
            pairs.append((min(same, key=lambda actual: _error(actual, expected)), expected))
    return pairs


def judge(pairs: list[tuple[np.ndarray, np.ndarray]], atol: float, rtol: float) -> tuple[float, float, bool]:
    """(max abs error, bound, departs) of the pairs, judged as a device run's outputs are."""
    error, reference, departs = 0.0, 0.0, False
    for actual, expected in pairs:
        if actual.size == 0:
            continue
        error = max(error, _error(actual, expected))
        reference = max(reference, float(np.max(np.abs(np.nan_to_num(expected)))))
        departs = departs or not bool(np.allclose(actual, expected, rtol=rtol, atol=atol))
    return error, atol + rtol * reference, departs
