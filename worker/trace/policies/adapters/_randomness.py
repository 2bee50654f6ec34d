"""Sampling randomness as program inputs: record a policy's random draws, then replay them.

Exported programs must not contain RNG ops (``to_executorch`` cannot lower them), and a device run must be
reproducible. So the policy's own code runs under a ``TorchFunctionMode`` that intercepts its random draws:

* ``record``: the real draws happen on the global RNG, and each drawn tensor is kept, in call order;
* ``replay``: each draw returns the next given tensor instead (during ``torch.export`` these are the
  program's inputs, so the graph reads them where the policy called the RNG).

``torch.multinomial(p, 1)`` is data dependent; on CPU PyTorch draws it as ``argmax(p / q)`` with ``q`` an
Exp(1) draw the shape of ``p`` (the "exponential race"). Replay uses that static formulation with ``q`` as
the input; record draws ``q`` from the same RNG state as the real call and checks, call by call, that the
formulation picks exactly what ``torch.multinomial`` picked. That is the substitution's test on every
recorded frame.

A batch-1 pick squeezed to a 0-dim tensor and used as an index (tdmpc's
``elite_actions[:, pick.squeeze(), arange(B)]``) makes PyTorch read it with ``.item()``: a data-dependent
integer that ``to_edge`` cannot guard on. In replay, ``squeeze()`` of a pick keeps it 1-dim, so the same
indexing becomes a static gather of the same elements (the adjacent advanced indices broadcast to the
shape the integer index gives).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from worker.trace.fake_weights import is_fake

_DRAWS: frozenset[Callable[..., Any]] = frozenset(
    {torch.randn, torch.randn_like, torch.rand, torch.rand_like, torch.randint, torch.Tensor.normal_}
)


class SubstitutionMismatch(AssertionError):
    """A static formulation picked something else than the op it replaces."""


class Draws(TorchFunctionMode):
    """Records (``replay=None``) or replays the random draws made inside the ``with`` block."""

    def __init__(self, replay: Iterable[torch.Tensor] | None = None) -> None:
        super().__init__()
        self.recording = replay is None
        self._replay = iter(replay or ())
        self.recorded: list[torch.Tensor] = []
        self.kinds: list[str] = []
        self._picks: list[torch.Tensor] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.multinomial:
            return self._multinomial(*args, **kwargs)
        if func is torch.Tensor.squeeze and not self.recording and len(args) == 1 and not kwargs:
            if any(args[0] is pick for pick in self._picks):
                return args[0].reshape(-1)
            return func(*args)
        if func not in _DRAWS:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", str(func))
        if self.recording:
            out = func(*args, **kwargs)
            self.recorded.append(out.detach().clone())
            self.kinds.append(name)
            return out
        value = self._next(name)
        if func is torch.Tensor.normal_:
            return args[0].copy_(value)
        return value

    def _next(self, name: str) -> torch.Tensor:
        try:
            return next(self._replay)
        except StopIteration:
            raise RuntimeError(f"replay ran out of recorded draws at a {name} call") from None

    def _multinomial(
        self,
        probs: torch.Tensor,
        num_samples: int,
        replacement: bool = False,
        *,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        if num_samples != 1:
            raise NotImplementedError("only torch.multinomial(p, 1) has a static formulation here")
        if not self.recording:
            pick = _exponential_race(probs, self._next("multinomial"))
            self._picks.append(pick)
            return pick
        state = generator.get_state() if generator is not None else torch.get_rng_state()
        race = torch.empty_like(probs).exponential_(1, generator=generator)
        if generator is not None:
            generator.set_state(state)
        else:
            torch.set_rng_state(state)
        picked = torch.multinomial(probs, 1, replacement, generator=generator)
        # Fake weights (``weights: fake``) hold no values to compare: the check runs with real ones.
        if not is_fake(probs) and not torch.equal(picked, _exponential_race(probs, race)):
            raise SubstitutionMismatch("argmax(p / q) did not pick what torch.multinomial(p, 1) picked")
        self.recorded.append(race)
        self.kinds.append("multinomial")
        return picked


def _exponential_race(probs: torch.Tensor, race: torch.Tensor) -> torch.Tensor:
    return torch.argmax(probs / race, dim=-1, keepdim=True)


def record(fn: Callable[[], Any], seed: int) -> tuple[Any, list[torch.Tensor], list[str]]:
    """Run ``fn`` on a forked global RNG seeded with ``seed``: its result, the draws and their kinds."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.no_grad(), Draws() as draws:
            result = fn()
    return result, draws.recorded, draws.kinds


def replay(fn: Callable[[], Any], values: Sequence[torch.Tensor]) -> Any:
    """Run ``fn`` with its random draws taken from ``values`` in order (all of them must be used)."""
    with Draws(values) as draws:
        result = fn()
    leftover = sum(1 for _ in draws._replay)
    if leftover:
        raise RuntimeError(f"replay left {leftover} recorded draws unused")
    return result


def draw_seed(seed: int, index: int) -> int:
    """The global-RNG seed under which frame ``index``'s draws are recorded."""
    return (seed * 1_000_003 + index * 7_919 + 12_345) % (1 << 62)


class ReplayProgram(torch.nn.Module):
    """``chunk_fn(observation)`` as a program whose trailing inputs are the recorded draws, in order."""

    def __init__(
        self,
        owner: torch.nn.Module,
        observation_names: Sequence[str],
        chunk_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor],
        reset: Callable[[], None],
    ) -> None:
        super().__init__()
        self.owner = owner
        self.observation_names = tuple(observation_names)
        self.chunk_fn = chunk_fn
        self.reset = reset

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        n = len(self.observation_names)
        observation = dict(zip(self.observation_names, args[:n], strict=True))
        self.reset()  # plain Python state (e.g. a warm start), cleared before and after, never traced
        with torch.no_grad():
            result: torch.Tensor = replay(lambda: self.chunk_fn(observation), args[n:])
        self.reset()
        return result
