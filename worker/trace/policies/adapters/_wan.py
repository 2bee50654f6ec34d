"""Pieces the Wan2.2-based adapters (fastwam, lingbot_va) share: the frozen VAE, UMT5 encoder and tokenizer
built offline, the policy's dtypes restored after ``build_policy``'s fp32 cast, a denoising plan whose
steps read a time and a step size, static variants of Wan's data-dependent helpers (the prompt's padding
zeroed by ``torch.where``, rotary embeddings as real arithmetic over host-built tables), Wan's CUDA-only
fp32 autocast region on CPU, and host tables computed on real tensors under fake weights.

Both policies load the frozen part of Wan2.2-TI2V-5B with ``from_pretrained`` (diffusers'
``AutoencoderKLWan``, transformers' ``UMT5EncoderModel`` and a UMT5 tokenizer); offline those names are
replaced, in the one LeRobot module that calls them, by loaders whose ``from_pretrained(name)`` calls the
builders here (``vae_from``, ``text_encoder_from``, ``tokenizer_from``): the same architectures from
``worker.trace.policies.offline.wan2_2``'s published configs with random weights from the seed, or a one-line
``MissingOfflineConfig`` for a repo with no offline config.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch

from worker.trace.fake_weights import real_tensors
from worker.trace.policies.offline import wan2_2
from worker.trace.policies.offline.hub import known


def vae_from(configs: Mapping[str, dict[str, Any]]) -> Callable[[str], Any]:
    """``AutoencoderKLWan.from_pretrained(name, subfolder="vae")`` without the download: the named repo's
    published VAE config with random weights."""
    return lambda name: wan2_2.build_vae(known(configs, name, "VAE config"))


def text_encoder_from(configs: Mapping[str, dict[str, Any]]) -> Callable[[str], Any]:
    """``UMT5EncoderModel.from_pretrained(name, subfolder="text_encoder")`` without the download: the named
    repo's published UMT5 config with random weights."""
    return lambda name: wan2_2.build_text_encoder(known(configs, name, "text encoder config"))


def tokenizer_from(tokenizers: Mapping[str, Any]) -> Callable[[str], Any]:
    """``AutoTokenizer.from_pretrained(name)`` without the download: the UMT5 stand-in of the name."""
    return lambda name: wan2_2.StandInUMT5Tokenizer(known(tokenizers, name, "tokenizer"))


@contextlib.contextmanager
def host_tables_on_real_tensors(owner: Any, method: str) -> Iterator[None]:
    """Inside the block ``owner.<method>`` runs on real tensors, also while building under fake weights.

    Upstream behaviour worked around (under ``weights: fake`` only): constructors compute host tables
    from tensors they create, which are fake when every new tensor is: Python numbers
    (``WanContinuousFlowMatchScheduler.__init__``'s ``_precompute_training_weight_stats``:
    ``float(y.min().item())`` over a ``linspace``, a ``DataDependentOutputException``) and the rotary
    tables (``rope_params``), plain attributes that the programs read as constants, which
    ``torch.export`` refuses to hold as fake tensors. With real weights it is a no-op.
    """
    original = getattr(owner, method)

    def on_real_tensors(*args: Any, **kwargs: Any) -> Any:
        with real_tensors():
            return original(*args, **kwargs)

    with mock.patch.object(owner, method, on_real_tensors):
        yield


def zeroed_after(embedding: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``for i, v in enumerate(lengths): embedding[i, v:] = 0`` without the tensor-valued slice bound:
    positions from each row's length on are zero, the others unchanged."""
    positions = torch.arange(embedding.shape[1], device=embedding.device)
    keep = positions[None, :] < lengths[:, None]
    return torch.where(keep[..., None], embedding, torch.zeros_like(embedding))


@dataclass(frozen=True)
class Rotation:
    """A complex rotary table as its real and imaginary parts (float64), for rotations without complex
    dtypes."""

    cos: torch.Tensor
    sin: torch.Tensor

    @staticmethod
    def of(freqs: torch.Tensor) -> Rotation:
        with real_tensors():
            return Rotation(freqs.real.contiguous(), freqs.imag.contiguous())

    def apply(self, pairs: torch.Tensor) -> torch.Tensor:
        """``view_as_real(view_as_complex(pairs) * table)`` of float64 pairs ``[..., c, 2]``, in real
        arithmetic: the same products and sums, bit for bit."""
        re, im = pairs[..., 0], pairs[..., 1]
        return torch.stack([re * self.cos - im * self.sin, re * self.sin + im * self.cos], dim=-1)


def wan_video_freqs(rope_params: Callable[..., torch.Tensor], head_dim: int, end: int = 1024) -> torch.Tensor:
    """The rotary table ``WanModel.__init__`` builds (frame, row and column parts of ``rope_params``,
    concatenated), on real tensors."""
    d = head_dim
    with real_tensors():
        parts = [
            rope_params(end, d - 4 * (d // 6)),
            rope_params(end, 2 * (d // 6)),
            rope_params(end, 2 * (d // 6)),
        ]
        return torch.cat(parts, dim=1)


def grid_rotation(freqs: torch.Tensor, grid: Sequence[int], head_dim: int) -> Rotation:
    """The table Wan's ``rope_apply`` builds for the token grid ``(f, h, w)``: the frame, row and column
    parts of ``freqs`` broadcast over the grid, ``[f·h·w, 1, head_dim / 2]``."""
    c = head_dim // 2
    f, h, w = grid
    with real_tensors():
        parts = freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
        table = torch.cat(
            [
                parts[0][:f].view(f, 1, 1, -1).expand(f, h, w, -1),
                parts[1][:h].view(1, h, 1, -1).expand(f, h, w, -1),
                parts[2][:w].view(1, 1, w, -1).expand(f, h, w, -1),
            ],
            dim=-1,
        ).reshape(f * h * w, 1, -1)
    return Rotation.of(table)


def static_rope_apply(rotation: Rotation, seq_len: int) -> Callable[..., torch.Tensor]:
    """Wan's ``rope_apply(x, grid_sizes, freqs)`` with the grid's table given (``grid_rotation``) instead of
    built from ``grid_sizes.tolist()``, and the complex product in real arithmetic."""

    def rope_apply(x: torch.Tensor, grid_sizes: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        n = x.size(2)
        output = []
        for i in range(x.size(0)):
            pairs = x[i, :seq_len].to(torch.float64).reshape(seq_len, n, -1, 2)
            x_i = rotation.apply(pairs).flatten(2)
            output.append(torch.cat([x_i, x[i, seq_len:]]))
        return torch.stack(output).float()

    return rope_apply


def static_dense_rope(rotation: Rotation) -> Callable[..., torch.Tensor]:
    """FastWAM's ``apply_dense_rope(x, freqs, num_heads)`` with the table given, and the complex64 ×
    complex128 product in real (float64) arithmetic."""

    def apply_dense_rope(x: torch.Tensor, freqs: torch.Tensor, num_heads: int) -> torch.Tensor:
        b, s = x.shape[:2]
        pairs = x.reshape(b, s, num_heads, -1).to(torch.float32).to(torch.float64)
        x_out = rotation.apply(pairs.reshape(b, s, num_heads, -1, 2)).flatten(2)
        return x_out.to(x.dtype)

    return apply_dense_rope


class _Float32Linear(torch.overrides.TorchFunctionMode):
    """``F.linear`` with its floating tensors cast to fp32: what CUDA autocast with ``dtype=float32`` does
    to the linears it covers."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in (torch.nn.functional.linear, torch._C._nn.linear):
            args = tuple(
                a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
            )
            kwargs = {
                k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                for k, v in kwargs.items()
            }
        return func(*args, **kwargs)


class _Autocast:
    """``torch.amp.autocast``, except ``autocast("cuda", dtype=torch.float32)`` on a machine without CUDA,
    which is the fp32-linear mode instead of a disabled autocast."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __call__(self, device_type: str, *args: Any, **kwargs: Any) -> Any:
        dtype = kwargs.get("dtype", args[0] if args else None)
        if device_type == "cuda" and dtype is torch.float32 and not torch.cuda.is_available():
            return _Float32Linear()
        return self.original(device_type, *args, **kwargs)


@contextlib.contextmanager
def cuda_fp32_autocast_on_cpu() -> Iterator[None]:
    """Inside the block, Wan's ``torch.amp.autocast("cuda", dtype=torch.float32)`` regions compute their
    linears in fp32, as they do on CUDA.

    Upstream behaviour worked around: Wan's time embedding (``WanVideoDiT.pre_dit``, the video ``Head``)
    feeds an fp32 sinusoidal embedding to bf16 linears inside ``autocast("cuda", dtype=float32)``, which
    casts both to fp32 on CUDA; on CPU that autocast is disabled and ``F.linear(fp32, bf16)`` raises, so
    the policy's default bf16 cannot run at all.
    """
    with mock.patch.object(torch.amp, "autocast", _Autocast(torch.amp.autocast)):
        yield
