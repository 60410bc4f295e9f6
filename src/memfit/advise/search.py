"""The exhaustive search beside the ordered plan: the cheapest fitting configuration of every knob.

Every combination of the knobs the remedies turn (checkpointing none/full/every-2/sqrt, every micro-batch
dividing the effective batch, packing, sequence lengths, method, ranks, attention kernels, loss, sharding
over the spec's GPUs) is ranked by :class:`memfit.advise.costs.Cost` (what it gives up in the lesson's order
of reluctance, then the step-time factor) and estimated in that order; the first that fits is the cheapest
(ties in cost go to the fewest changed knobs, then the fewest needing more than a transformers flag, then
the smallest peak). Thousands of candidates; typically tens to a few hundred estimates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import product
from typing import Any, cast

from memfit.advise.cache import PeakCache
from memfit.advise.costs import Cost, TimeModel, setup_cost
from memfit.advise.profile import DataProfile
from memfit.advise.remedies import divisors, halved_ranks
from memfit.advise.result import CheapestFit, Need
from memfit.advise.setup import Setup
from memfit.errors import MemfitError
from memfit.estimate.adapter import fused_loss_modelled
from memfit.estimate.constants import seq_round_up
from memfit.estimate.fits import Target
from memfit.estimate.sharding import LADDER
from memfit.estimate.spec import Checkpointing

# (checkpointing, checkpoint_every): all recompute once (same time); they differ in what they keep
CHECKPOINT_OPTIONS: tuple[tuple[Checkpointing, int], ...] = (("none", 2), ("full", 2), ("every-k", 2), ("sqrt", 2))


def candidates(initial: Setup, *, data: DataProfile | None, extra_seqs: tuple[int, ...] = (),
               kernels: tuple[str, ...] | None = None, chunked: bool = True) -> Iterator[Setup]:
    """Every combination of the knobs the advisor may turn (module docstring); ``extra_seqs`` adds sequence
    lengths to the grid (the ordered plan's, so the search can always match the ordered plan); ``kernels``: the
    attention kernels the architecture has (``Architecture.attention_kernels``; Gemma 2 and GPT-OSS have no
    sdpa), None for all; ``chunked`` False leaves the chunked loss out (the estimate does not model it for the run:
    ``fused_loss_modelled``)."""
    s0 = initial.spec
    ckpts = list(dict.fromkeys([(s0.checkpointing, s0.checkpoint_every), *CHECKPOINT_OPTIONS]))
    seqs = [s0.seq]
    if data is not None:
        seqs += [data.no_cut_seq_len(), data.recommended_seq_len]
    else:
        seqs += [seq_round_up(3 * s0.seq // 4), seq_round_up(s0.seq // 2)]
    seqs = sorted({L for L in [*seqs, *extra_seqs] if L <= s0.seq}, reverse=True)
    methods = [s0.method] + {"full": ["lora", "qlora"], "lora": ["qlora"], "int8-lora": ["qlora"],
                             "qlora": []}[s0.method]
    ranks = [s0.rank] + (halved_ranks(s0.rank) if s0.is_adapter else [])  # a full run made LoRA keeps its rank
    attentions = [a for a in dict.fromkeys([s0.attention, "sdpa"] + (["flash"] if s0.device == "cuda" else []))
                  if kernels is None or a == s0.attention or a in kernels]
    losses = list(dict.fromkeys([s0.loss, "chunked"])) if chunked else [s0.loss]
    shardings = list(dict.fromkeys([*LADDER, s0.sharding])) if s0.gpus > 1 else [s0.sharding]
    packings = [False, True] if data is not None else [initial.packing]
    rows0 = s0.batch * s0.grad_accum
    for packing, seq in product(packings, seqs):
        repack = packing and data is not None and not initial.packing
        rows = data.packed_rows(rows0, seq) if repack and data is not None else rows0
        batches = [b for b in divisors(rows) if b <= s0.batch]
        for (ck, every), b, method, rank, attn, loss, shard in product(
                ckpts, batches, methods, ranks, attentions, losses, shardings):
            try:
                spec = s0.with_(checkpointing=ck, checkpoint_every=every, batch=b, grad_accum=rows // b, seq=seq,
                                method=method, rank=rank, attention=attn, loss=loss, sharding=shard)
            except MemfitError:
                continue
            yield Setup(spec=spec, packing=packing)


def minimal_setups(initial: Setup, *, data: DataProfile | None, extra_seqs: tuple[int, ...] = (),
                   kernels: tuple[str, ...] | None = None, chunked: bool = True) -> list[Setup]:
    """The few least-memory candidates: if none of them fits, nothing does."""
    s0 = initial.spec
    cands = list(candidates(initial, data=data, extra_seqs=extra_seqs, kernels=kernels, chunked=chunked))
    min_seq = min(c.spec.seq for c in cands)
    min_rank = min(c.spec.rank for c in cands)
    # every method's: a 4-bit base is not always the smallest (transformers 5.24 leaves MoE experts unquantised,
    # and PEFT's prepare_model_for_kbit_training makes them fp32: more bytes than a bf16 LoRA base)
    out = [c for c in cands if c.spec.batch == 1 and c.spec.seq == min_seq and c.spec.rank == min_rank
           and c.spec.loss == ("chunked" if chunked else s0.loss)
           and c.spec.checkpointing in ("full", "sqrt")
           and c.spec.sharding == (LADDER[-1] if s0.gpus > 1 else s0.sharding)]
    return out or [initial.with_(batch=1, grad_accum=s0.batch * s0.grad_accum)]


def cheapest_fit(cache: PeakCache, target: Target, initial: Setup, *, time_model: TimeModel,
                 data: DataProfile | None, progress: Callable[[int, int], None] | None = None,
                 extra_seqs: tuple[int, ...] = ()) -> CheapestFit:
    """The cheapest fitting configuration: candidates sorted by cost, estimated in that order."""
    kernels = cache.shape.arch.attention_kernels
    chunked = fused_loss_modelled(cache.shape, initial.spec)
    cands = list(candidates(initial, data=data, extra_seqs=extra_seqs, kernels=kernels, chunked=chunked))
    costed = sorted(((setup_cost(initial, c, time_model=time_model, data=data), c) for c in cands),
                    key=lambda pair: pair[0].key())
    n = len(costed)

    def fits(setup: Setup) -> bool:
        return cache.fits(target, setup.spec)

    if not any(fits(m) for m in minimal_setups(initial, data=data, extra_seqs=extra_seqs, kernels=kernels,
                                               chunked=chunked)):
        return CheapestFit(setup=None, peak_bytes=None, cost=None, candidates=n, evaluated=cache.estimates)
    best: tuple[tuple[int, int, int], int, Setup, Cost] | None = None
    best_key = None
    for i, (cost, setup) in enumerate(costed):
        if best_key is not None and cost.key() != best_key:
            break
        peak = cache.peak(setup.spec)
        if progress is not None and i % 64 == 0:
            progress(i, n)
        tie = (len(setup_changes(initial, setup)), _extras(initial, setup), peak)
        if fits(setup) and (best is None or tie < best[0]):
            best = (tie, peak, setup, cost)
            best_key = cost.key()
    if progress is not None:
        progress(n, n)
    if best is None:
        return CheapestFit(setup=None, peak_bytes=None, cost=None, candidates=n, evaluated=cache.estimates)
    _, peak, setup, cost = best
    return CheapestFit(setup=setup, peak_bytes=peak, cost=cost, candidates=n, evaluated=cache.estimates,
                       changes=setup_changes(initial, setup), needs=requirements(initial, setup),
                       reserved_bytes=cache.reserved(setup.spec))


def _extras(initial: Setup, setup: Setup) -> int:
    """Changed knobs that need more than a transformers / PEFT flag: segment checkpointing (every-k, sqrt),
    flash-attn, a fused cross-entropy kernel."""
    a, b = initial.spec, setup.spec
    return (int(b.checkpointing != a.checkpointing and b.checkpointing in ("every-k", "sqrt"))
            + int(b.attention != a.attention and b.attention == "flash")
            + int(b.loss != a.loss and b.loss == "chunked"))


def requirements(initial: Setup, setup: Setup) -> tuple[Need, ...]:
    """What the changed knobs need beyond a flag, in the HF / PyTorch stack (the sentences:
    :func:`memfit.report.fit.need_text`)."""
    a, b = initial.spec, setup.spec
    out: list[Need] = []
    if b.checkpointing != a.checkpointing:
        if b.checkpointing == "full":
            out.append("gradient_checkpointing")
        elif b.checkpointing in ("every-k", "sqrt"):
            out.append("segment_checkpointing")
    if b.attention != a.attention and b.attention == "flash":
        out.append("flash_attention")
    if b.loss != a.loss and b.loss == "chunked":
        out.append("fused_cross_entropy")
    if setup.packing and not initial.packing:
        out.append("packing")
    if b.sharding != a.sharding and b.sharding in ("zero1", "zero2", "zero3"):
        out.append(cast(Need, b.sharding))
    if b.method == "qlora" and a.method != "qlora":
        out.append("bitsandbytes")
    return tuple(out)


def setup_changes(initial: Setup, setup: Setup) -> dict[str, Any]:
    """The knobs that differ from the user's: ``{"batch": [8, 2], ...}``."""
    a, b = initial.to_dict(), setup.to_dict()
    out: dict[str, Any] = {k: [a["spec"][k], v] for k, v in b["spec"].items() if a["spec"][k] != v}
    if a["packing"] != b["packing"]:
        out["packing"] = [a["packing"], b["packing"]]
    return out
