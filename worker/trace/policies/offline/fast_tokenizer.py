"""pi0_fast's two tokenizers: a stand-in for the FAST action tokenizer, and PaliGemma's as pi0_fast uses it.

``PI0FastPolicy.__init__`` loads both from the hub: ``AutoProcessor.from_pretrained(
"lerobot/fast-action-tokenizer", trust_remote_code=True)`` (the FAST processor: a DCT of the action
chunk along time, scaled and rounded, the coefficients written as one character each, then BPE) and
``AutoTokenizer.from_pretrained("google/paligemma-3b-pt-224", add_eos_token=True, add_bos_token=False)``.
Only ``detokenize_actions`` (after decoding, on the host) and the decoding loop's start and stop tokens
read them; no program does.

``StandInFastProcessor`` has what LeRobot calls on the FAST processor: ``__call__`` (encode, in
``ActionTokenizerProcessorStep``) and ``bpe_tokenizer.decode``, ``min_token`` and ``scale``
(``decode_actions_with_fast``), plus the processor's own ``decode``. The DCT, scale, rounding, offset
and clipping are the processor's; the values are those of the published FAST+ processor
(``physical-intelligence/fast``'s ``processor_config.json``: scale 10, vocabulary 2048, ``min_token``
-354), which the LeRobot copy is taken to share. Its BPE vocabulary and merges (``tokenizer.json``,
trained on a million action chunks) cannot be reproduced offline, so ``bpe_tokenizer`` is a stand-in of
the same vocabulary size without merges: one id per coefficient character (id = character code), whose
``decode`` is the exact inverse of its encoding. Real FAST token sequences are shorter (merged pairs);
the decoded coefficients, and so the actions, are the same function of the ids' characters.

``StandInPaliGemmaTokenizer`` is PaliGemma's vocabulary (257,152 ids: <pad> 0, <eos> 1, <bos> 2, <unk>
3, "\\n" 108, <locNNNN> from 256,000, <segNNN> from 257,024) as a bijection between ids and pieces, with
the calls ``PI0FastPytorch`` and ``detokenize_actions`` make (``bos_token_id``, ``vocab_size``,
``convert_tokens_to_ids``, ``convert_ids_to_tokens``, ``encode``). The pieces ``"Action: "`` is encoded to
(``Action``, ``:``, ``▁``: Gemma's SentencePiece adds no dummy prefix) and the end-of-action marker ``|``
get stand-in ids among the ordinary words (not the checkpoint's); other ids are named ``<NNNNNN>``.
Prompts are tokenized by ``paligemma.TOKENIZER`` as for pi0 and pi05.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

from worker.trace.policies.offline.hub import known
from worker.trace.policies.offline.paligemma import NEWLINE, PALIGEMMA_3B, PALIGEMMA_VOCAB, TOKENIZER

FAST_ACTION_TOKENIZER = "lerobot/fast-action-tokenizer"

# physical-intelligence/fast, processor_config.json (FAST+, the universal action tokenizer).
FAST_PROCESSOR: dict[str, Any] = {"scale": 10, "vocab_size": 2048, "min_token": -354}

PALIGEMMA_LOC = 256000  # <loc0000> … <loc1023>
PALIGEMMA_SEG = 257024  # <seg000> … <seg127>
SPECIAL_PIECES: dict[str, int] = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "\n": NEWLINE}
# Stand-in ids (the pieces' ids in the real vocabulary are not needed: no program reads them).
ACTION_PIECES: dict[str, int] = {
    piece: TOKENIZER.word_ids(word)[0]
    for piece, word in (("Action", "action"), (":", "colon"), ("▁", "space"), ("|", "bar"))
}
END_OF_ACTION = "|"
ACTION_PREFIX = ("Action", ":", "▁")


def _ids(tokens: Any) -> list[int]:
    """Token ids from a list, a numpy array or a tensor (as transformers' ``to_py_obj`` reads them)."""
    if isinstance(tokens, torch.Tensor | np.ndarray):
        tokens = tokens.tolist()
    if isinstance(tokens, int):
        return [tokens]
    return [int(token) for token in tokens]


class StandInBPE:
    """The FAST processor's ``bpe_tokenizer`` without merges: id ``i`` is the character ``chr(i)``.

    Like the real tokenizer's ``decode``, ids outside the vocabulary decode to nothing and a negative id
    is an error (``tokenizers`` cannot read it as an unsigned id); LeRobot catches decoding errors.
    """

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def __len__(self) -> int:
        return self.vocab_size

    def __call__(self, text: str) -> dict[str, list[int]]:
        ids = [ord(character) for character in text]
        if any(i >= self.vocab_size for i in ids):
            raise ValueError(f"a coefficient is outside the {self.vocab_size}-character alphabet")
        return {"input_ids": ids}

    def decode(self, token_ids: Any, **kwargs: Any) -> str:
        ids = _ids(token_ids)
        if any(i < 0 for i in ids):
            raise OverflowError("can't convert negative int to unsigned")
        return "".join(chr(i) for i in ids if i < self.vocab_size)


class StandInFastProcessor:
    """What LeRobot uses of the FAST action processor (``UniversalActionProcessor``), without the hub."""

    def __init__(self, scale: float, vocab_size: int, min_token: int) -> None:
        self.scale = scale
        self.vocab_size = vocab_size
        self.min_token = min_token
        self.bpe_tokenizer = StandInBPE(vocab_size)
        self.time_horizon: int | None = None
        self.action_dim: int | None = None

    def __call__(self, action_chunk: Any) -> list[list[int]]:
        """Token ids of each chunk of ``[batch,] time, action_dim`` actions."""
        from scipy.fft import dct

        chunk = np.asarray(action_chunk, dtype=np.float64)
        if chunk.ndim == 2:
            chunk = chunk[None]
        if chunk.ndim != 3:
            raise ValueError(f"actions of shape {chunk.shape}: expected [batch,] time, action_dim")
        self.time_horizon, self.action_dim = chunk.shape[1], chunk.shape[2]
        coefficients = np.around(dct(chunk, axis=1, norm="ortho") * self.scale)
        tokens = []
        for item in coefficients:
            shifted = np.maximum(item.reshape(-1) - self.min_token, 0).astype(int)
            tokens.append(self.bpe_tokenizer("".join(chr(int(c)) for c in shifted))["input_ids"])
        return tokens

    def coefficients(self, tokens: Any) -> np.ndarray:
        """The scaled DCT coefficients that ``tokens`` spell (flat), as ``decode`` reads them."""
        return np.array([ord(c) for c in self.bpe_tokenizer.decode(tokens)], dtype=np.int64) + self.min_token

    def decode(
        self, tokens: Iterable[Any], *, time_horizon: int | None = None, action_dim: int | None = None
    ) -> np.ndarray:
        """Actions ``[batch, time, action_dim]`` from token ids: the inverse DCT of the coefficients."""
        from scipy.fft import idct

        horizon, dim = time_horizon or self.time_horizon, action_dim or self.action_dim
        if horizon is None or dim is None:
            raise ValueError("decode needs time_horizon and action_dim (or an encode call first)")
        actions = [
            idct(self.coefficients(item).reshape(horizon, dim) / self.scale, axis=0, norm="ortho")
            for item in tokens
        ]
        return np.stack(actions)


def fast_processor(name: str) -> StandInFastProcessor:
    """The stand-in for ``AutoProcessor.from_pretrained(name)`` (the FAST action tokenizer only)."""
    return StandInFastProcessor(**known({FAST_ACTION_TOKENIZER: FAST_PROCESSOR}, name, "processor"))


class StandInPaliGemmaTokenizer:
    """PaliGemma's vocabulary as ids and pieces, with the calls pi0_fast makes on its tokenizer."""

    def __init__(self) -> None:
        self.checkpoint = PALIGEMMA_3B
        self.vocab_size = PALIGEMMA_VOCAB
        self.bos_token_id = SPECIAL_PIECES["<bos>"]
        self.eos_token_id = SPECIAL_PIECES["<eos>"]
        self.pad_token_id = SPECIAL_PIECES["<pad>"]
        self.named = {**SPECIAL_PIECES, **ACTION_PIECES}
        self.by_id = {i: piece for piece, i in self.named.items()}
        if len(self.by_id) != len(self.named):
            raise ValueError("stand-in PaliGemma pieces share an id")

    def __len__(self) -> int:
        return self.vocab_size

    def convert_ids_to_tokens(self, ids: Any) -> Any:
        if isinstance(ids, int):
            return self._piece(ids)
        return [self._piece(i) for i in _ids(ids)]

    def _piece(self, i: int) -> str:
        if not 0 <= i < self.vocab_size:
            raise IndexError(f"id {i} outside PaliGemma's vocabulary of {self.vocab_size}")
        if i in self.by_id:
            return self.by_id[i]
        if PALIGEMMA_LOC <= i < PALIGEMMA_SEG:
            return f"<loc{i - PALIGEMMA_LOC:04d}>"
        if i >= PALIGEMMA_SEG:
            return f"<seg{i - PALIGEMMA_SEG:03d}>"
        return f"<{i:06d}>"

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> Any:
        if isinstance(tokens, str):
            return self._id(tokens)
        return [self._id(piece) for piece in tokens]

    def _id(self, piece: str) -> int:
        if piece in self.named:
            return self.named[piece]
        for prefix, base, digits in (("<loc", PALIGEMMA_LOC, 4), ("<seg", PALIGEMMA_SEG, 3), ("<", 0, 6)):
            number = piece[len(prefix) : -1]
            if (
                piece.startswith(prefix)
                and piece.endswith(">")
                and len(number) == digits
                and number.isdigit()
            ):
                return base + int(number)
        return SPECIAL_PIECES["<unk>"]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids of the two texts pi0_fast encodes: ``"Action: "`` and ``"|"``."""
        pieces = {"Action: ": ACTION_PREFIX, END_OF_ACTION: (END_OF_ACTION,)}
        if text not in pieces:
            raise NotImplementedError(f"the stand-in PaliGemma tokenizer does not encode {text!r}")
        ids = [self.named[piece] for piece in pieces[text]]
        # The policy loads it with add_bos_token=False and add_eos_token=True.
        return [*ids, self.eos_token_id] if add_special_tokens else ids


def paligemma_tokenizer(name: str) -> StandInPaliGemmaTokenizer:
    """The stand-in for ``AutoTokenizer.from_pretrained(name)`` (PaliGemma's tokenizer only)."""
    known({PALIGEMMA_3B: None}, name, "tokenizer")
    return StandInPaliGemmaTokenizer()
