"""Whether a run fits a GPU: the one rule that ``estimate``, ``trace`` and ``fit`` all apply and print.

The GPU is not part of the run (:class:`~memfit.estimate.spec.RunSpec`): a :class:`Target` (a GPU and the
headroom kept free on it) judges a step's peak, in every command.

::

    need  = reserved                      (--device cuda)
          = the caching allocator's reserved peak, replayed over the step's allocations (block rounding,
            2/20 MiB segments, fragmentation; memfit.estimate.allocator)
            + 512 MiB                       CUDA context, cuBLAS / cuDNN workspaces
          (sharded runs, or a bare peak: peak + 5% of the peak + 256 MiB + 512 MiB, the stated rule)
    need  = peak                          (--device cpu: nothing is reserved beyond the live tensors)

    fits  <=>  need + headroom <= the GPU's bytes

``peak`` is the estimated (or traced) peak of live tensor bytes, what ``torch.cuda.max_memory_allocated``
reports; ``reserved`` is what ``torch.cuda.memory_reserved`` + the context add up to, what ``nvidia-smi``
shows as used. The allocator and context figures are memfit's stated assumptions (the context is
commonly 300-600 MiB, depending on the driver and GPU; neither has been measured on a GPU yet).

``memfit trace --device cuda`` replays the step's real allocation sequence through the caching allocator
(:mod:`memfit.estimate.allocator`; ``FitVerdict.reserved``); ``estimate`` and ``fit`` replay a sequence
synthesised from the estimate's tensors (:mod:`memfit.estimate.synth_allocations`; ``MemoryEstimate.reserved_bytes``,
passed as ``reserved``). :func:`reserved_bytes` (the stated 5% + 256 MiB allowance) is what is left for a peak
without a sequence: sharded estimates, :func:`smallest_gpu` given only a peak.

``headroom`` (``--headroom``, default 5% of the GPU) is kept free on top of ``reserved`` for what the
model does not know: the estimate's own error (max 2.85% over the 45-row agreement matrix of
bench/RESULTS.md), the spread of the CUDA context around its assumed 512 MiB, and memory other processes
hold (a desktop session takes a few hundred MiB of a GeForce card). A verdict of "fits" with less
than that to spare is the one that fails at 3 a.m., so the default is not zero; ``--headroom 0`` judges
``reserved`` against the whole GPU.

Worked example (the stated rule): a peak of 20 GiB on a 24 GiB card (CUDA): reserved = 20 + 1.00 + 0.25 + 0.50 = 21.75
GiB; headroom 5% x 24 = 1.20 GiB; 21.75 + 1.20 = 22.95 <= 24.00: fits, 1.05 GiB to spare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.gpus import GpuSpec, resolve_gpu, smallest_fitting_gpu
from memfit.units import BYTES_PER_GIB, BYTES_PER_MIB, parse_size

CUDA_CONTEXT_BYTES = 512 * BYTES_PER_MIB  # assumed: CUDA context + cuBLAS/cuDNN workspaces
ALLOCATOR_OVERHEAD_FRACTION = 0.05  # assumed: caching-allocator rounding and fragmentation
ALLOCATOR_OVERHEAD_BYTES = 256 * BYTES_PER_MIB
DEFAULT_HEADROOM = 0.05  # share of the GPU kept free on top of reserved (module docstring)


def reserved_bytes(peak_bytes: int, device: str) -> int:
    """What the step holds on the device: on CUDA the peak + allocator overhead + CUDA context, on CPU the peak.

    >>> reserved_bytes(20 * 1024**3, "cuda") - 20 * 1024**3 == 1024**3 + 768 * 1024**2
    True
    """
    if device != "cuda":
        return peak_bytes
    return peak_bytes + int(peak_bytes * ALLOCATOR_OVERHEAD_FRACTION) + ALLOCATOR_OVERHEAD_BYTES + CUDA_CONTEXT_BYTES


@dataclass(frozen=True, kw_only=True, slots=True)
class Headroom:
    """Memory kept free on the GPU on top of what the step reserves: a share of it or a fixed size."""

    fraction: float | None = DEFAULT_HEADROOM
    bytes: int | None = None

    def bytes_of(self, gpu_bytes: int) -> int:
        """The headroom in bytes on a GPU of ``gpu_bytes``: 5% of 24 GiB -> 1,288,490,188 B."""
        if self.bytes is not None:
            return self.bytes
        return gpu_bytes - int(gpu_bytes * (1.0 - (self.fraction or 0.0)))

    def budget(self, gpu_bytes: int) -> int:
        """Bytes the step may reserve on a GPU of ``gpu_bytes``: 24 GiB at 5% -> 24,481,313,587 B."""
        return gpu_bytes - self.bytes_of(gpu_bytes)

    def describe(self) -> str:
        if self.bytes is not None:
            return f"{self.bytes / BYTES_PER_GIB:.2f} GiB"
        return f"{100 * (self.fraction or 0.0):g}% of the GPU"

    @classmethod
    def parse(cls, text: str | float | None) -> Headroom:
        """``"5%"``, ``"0.05"`` (a share of the GPU) or ``"2GiB"`` (a size); None is the default (5%).

        >>> Headroom.parse("10%").fraction, Headroom.parse("2GiB").bytes
        (0.1, 2147483648)
        """
        if text is None:
            return cls()
        if isinstance(text, int | float):
            value = float(text)
        else:
            t = text.strip()
            if t.endswith("%"):
                value = _float(t[:-1], text) / 100.0
            elif any(c.isalpha() for c in t):
                try:
                    return cls(fraction=None, bytes=parse_size(t))
                except MemfitError:
                    raise MemfitError(f"--headroom {text!r}: write a share (0.05 or 5%) or a size (2GiB)") from None
            else:
                value = _float(t, text)
        if not 0.0 <= value < 1.0:
            raise MemfitError(f"--headroom {text!r} must be a share of the GPU in [0, 1) (0.05 or 5%) or a size "
                              "such as 2GiB")
        return cls(fraction=value)

    def to_dict(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "bytes": self.bytes}


@dataclass(frozen=True, kw_only=True, slots=True)
class FitVerdict:
    """The rule of the module docstring applied to one step on one GPU."""

    gpu: GpuSpec
    device: str
    peak_bytes: int
    headroom: Headroom
    reserved: int | None = None  # a replayed reserved peak + context (:mod:`memfit.estimate.allocator`); None: the rule

    @property
    def reserved_bytes(self) -> int:
        if self.reserved is not None and self.device == "cuda":
            return self.reserved
        return reserved_bytes(self.peak_bytes, self.device)

    @property
    def headroom_bytes(self) -> int:
        return self.headroom.bytes_of(self.gpu.bytes)

    @property
    def need_bytes(self) -> int:
        """reserved + headroom: what must not exceed the GPU."""
        return self.reserved_bytes + self.headroom_bytes

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.gpu.bytes

    @property
    def spare_bytes(self) -> int:
        """GPU bytes left beyond reserved + headroom (negative: short by that much)."""
        return self.gpu.bytes - self.need_bytes

    def rule(self) -> str:
        """The comparison in numbers: ``reserved 23.96 GiB + headroom 1.20 GiB (5% of the GPU) = 25.16 GiB >
        24.00 GiB (24GiB)``."""
        what = "reserved" if self.device == "cuda" else "peak"
        sign = "<=" if self.fits else ">"
        return (f"{what} {_gib(self.reserved_bytes)} + headroom {_gib(self.headroom_bytes)} "
                f"({self.headroom.describe()}) = {_gib(self.need_bytes)} {sign} {_gib(self.gpu.bytes)} "
                f"({self.gpu.name})")

    def to_dict(self) -> dict[str, Any]:
        return {"fits": self.fits, "rule": self.rule(), "gpu_bytes": self.gpu.bytes, "device": self.device,
                "peak_bytes": self.peak_bytes, "reserved_bytes": self.reserved_bytes,
                "headroom": self.headroom.to_dict(), "headroom_bytes": self.headroom_bytes,
                "need_bytes": self.need_bytes, "spare_bytes": self.spare_bytes}


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """What a step is judged against: a GPU and the headroom kept free on it (module docstring).

    >>> t = Target.resolve("24GiB")
    >>> t.budget_bytes, t.fits(20 * 1024**3, "cuda"), t.fits(22 * 1024**3, "cuda")
    (24481313587, True, False)
    """

    gpu: GpuSpec
    headroom: Headroom = Headroom()

    @classmethod
    def resolve(cls, gpu: str | GpuSpec, headroom: Headroom | str | float | None = None) -> Target:
        """The target of ``--gpu`` and ``--headroom``; a headroom that leaves nothing of the GPU is refused."""
        spec = gpu if isinstance(gpu, GpuSpec) else resolve_gpu(gpu)
        room = headroom if isinstance(headroom, Headroom) else Headroom.parse(headroom)
        target = cls(gpu=spec, headroom=room)
        if target.budget_bytes <= 0:
            raise MemfitError(f"--headroom {room.describe()} leaves nothing of {spec.name} "
                              f"({_gib(spec.bytes)}): lower it")
        return target

    @property
    def headroom_bytes(self) -> int:
        return self.headroom.bytes_of(self.gpu.bytes)

    @property
    def budget_bytes(self) -> int:
        """The most a step may reserve: the GPU's bytes less the headroom."""
        return self.headroom.budget(self.gpu.bytes)

    def judge(self, peak_bytes: int, device: str, *, reserved: int | None = None) -> FitVerdict:
        """The rule applied to a step with ``peak_bytes`` of live tensors on ``device`` (``reserved``: a reserved
        figure replayed through the caching allocator, used instead of the stated assumption on CUDA)."""
        return FitVerdict(gpu=self.gpu, device=device, peak_bytes=peak_bytes, headroom=self.headroom,
                          reserved=reserved)

    def fits(self, peak_bytes: int, device: str, *, reserved: int | None = None) -> bool:
        return self.judge(peak_bytes, device, reserved=reserved).fits

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu.to_dict(), "headroom": self.headroom.to_dict(), "budget_bytes": self.budget_bytes}


def smallest_gpu(peak_bytes: int, device: str, headroom: Headroom, *, reserved: int | None = None) -> GpuSpec | None:
    """The smallest GPU of the bundled table on which a step of ``peak_bytes`` (``reserved`` on CUDA, when
    replayed) fits with ``headroom``."""
    return smallest_fitting_gpu(lambda g: Target(gpu=g, headroom=headroom).fits(peak_bytes, device, reserved=reserved))


def verdict_fields(target: Target | None, peak_bytes: int, device: str, *,
                   reserved: int | None = None) -> dict[str, Any]:
    """The verdict keys every engine's JSON carries: ``gpu``, ``gpu_bytes``, ``fits``, ``spare_bytes`` and
    ``verdict`` (all None without a target)."""
    if target is None:
        return {"gpu": None, "gpu_bytes": None, "fits": None, "spare_bytes": None, "verdict": None}
    v = target.judge(peak_bytes, device, reserved=reserved)
    return {"gpu": target.gpu.to_dict(), "gpu_bytes": target.gpu.bytes, "fits": v.fits,
            "spare_bytes": v.spare_bytes, "verdict": v.to_dict()}


def _gib(n: int) -> str:
    return f"{n / BYTES_PER_GIB:.2f} GiB"


def _float(text: str, original: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise MemfitError(f"--headroom {original!r}: write a share (0.05 or 5%) or a size (2GiB)") from None
