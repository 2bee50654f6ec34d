"""Tokenizer stand-ins: ids of the right vocabulary and padded length for a task string.

A policy's graph depends on the token ids' shape (the padded length) and range (the vocabulary), not on
which words they spell, so a real tokenizer is not needed to trace it. Each word of the text maps to an
id in ``[first, last)`` by a hash (stable across processes); ``prefix`` ids (a BOS token) come first,
``suffix`` ids after the words, then ``pad`` up to ``max_length`` with a False mask (right padding).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StandInTokenizer:
    """The special ids and id range of one real tokenizer (named in ``checkpoint``)."""

    checkpoint: str
    vocab_size: int
    pad: int
    first: int  # lowest id a word may get (above the special tokens)
    last: int  # one past the highest id a word may get
    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        ids = (self.pad, *self.prefix, *self.suffix)
        if not 0 <= self.first < self.last <= self.vocab_size or any(
            not 0 <= i < self.vocab_size for i in ids
        ):
            raise ValueError(f"stand-in tokenizer for {self.checkpoint}: ids outside its vocabulary")

    def word_ids(self, text: str) -> list[int]:
        span = self.last - self.first
        return [
            self.first + int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % span
            for word in text.lower().split()
        ]

    def __call__(self, text: str, max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, mask)`` of shape ``(1, max_length)``: int64 ids and a bool mask of the real tokens."""
        ids = self.ids(text, max_length)
        return _padded([ids], max_length, self.pad)

    def ids(self, text: str, max_length: int) -> list[int]:
        room = max_length - len(self.prefix) - len(self.suffix)
        if room < 0:
            raise ValueError(f"max_length {max_length} cannot hold the special tokens of {self.checkpoint}")
        return [*self.prefix, *self.word_ids(text)[:room], *self.suffix]


def _padded(rows: Sequence[Sequence[int]], max_length: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = [list(row) + [pad] * (max_length - len(row)) for row in rows]
    mask = [[True] * len(row) + [False] * (max_length - len(row)) for row in rows]
    return torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.bool)
