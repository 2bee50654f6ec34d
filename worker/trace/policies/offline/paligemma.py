"""PaliGemma (pi0, pi05 and pi0_fast's backbone): its tokenizer's special ids, as data.

The architecture needs no download: LeRobot builds it from transformers' ``CONFIG_MAPPING["paligemma"]``
(SigLIP so400m/14 at 224) with openpi's gemma_2b / gemma_300m sizes written in its own code.
"""

from __future__ import annotations

from worker.trace.policies.offline.tokens import StandInTokenizer

PALIGEMMA_3B = "google/paligemma-3b-pt-224"

# google/paligemma-3b-pt-224's tokenizer (Gemma's SentencePiece vocabulary of 256,000 plus 1,024
# <locNNNN> and 128 <segNNN> tokens = 257,152): <pad> 0, <eos> 1, <bos> 2, <unk> 3, "\n" 108. openpi's
# prompts are "<bos>" + task + "\n"; ordinary words are the ids below 256,000.
PALIGEMMA_VOCAB = 257152
NEWLINE = 108
TOKENIZER = StandInTokenizer(
    checkpoint=PALIGEMMA_3B,
    vocab_size=PALIGEMMA_VOCAB,
    pad=0,
    first=109,
    last=256000,
    prefix=(2,),
    suffix=(NEWLINE,),
)
