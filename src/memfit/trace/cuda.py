"""The CUDA prediction from a CPU trace: what differs between the two devices, and the corrections.

Fake tensors on a CPU-only torch must be CPU tensors (autograd's engine needs a device guard for the
device it runs backward on, and a CPU-only build has none for CUDA), so the trace dispatches CPU
kernels. Every operator with the same outputs on both devices (matmuls, norms, elementwise, the loss)
is exact as traced. These are not, and are corrected here for ``--device cuda``:

1. **Attention kernel.** ``scaled_dot_product_attention`` on CPU takes the CPU flash kernel
   (saves its output and a float32 log-sum-exp, supports masks and GQA). On CUDA, PyTorch tries, in
   order (``torch/csrc/.../sdp_utils.cpp``):

   - flash (FlashAttention-2): fp16/bf16, no ``attn_mask``, head_dim a multiple of 8 and <= 256, GQA
     and dropout supported. Saves ``q, k, v, out`` and ``lse (b, a, s)`` fp32, like the CPU flash kernel;
     with dropout also the RNG seed and offset, which torch 2.13 makes as 0-d int64 *host* tensors
     (``at::scalar_tensor(seed, at::dtype(at::kLong))`` in flash_api.cpp ``mha_fwd`` and in
     ``_efficient_attention_forward``, outside CUDA-graph capture): no GPU memory, so not counted. Note the
     CPU flash kernel has no dropout: a model with attention dropout in training (GPT-2's ``attn_pdrop``)
     takes the math path on CPU, keeping the ``(b, a, s, s)`` probabilities and dropout mask, but the
     flash kernel on CUDA. Its
     backward allocates, inside the kernel, ``softmax_d (b, a, s128)`` fp32 and ``dq_accum (b, s128, a,
     d32)`` fp32 (s128 = s rounded up to 128, d32 = d rounded up to 32), and for GQA the per-query-head
     ``dk, dv (b, s, a, d)`` before summing them to the kv heads.
   - memory-efficient (xformers/cutlass): also fp32 and with a mask (the boolean mask converted to an
     additive float mask first, and saved), no GQA. Saves ``q, k, v, out``, ``lse (b, a, s32)`` fp32.
     Backward allocates ``delta (b, a, s)`` fp32.
   - math: the composite ``softmax(q k^T) v``, which materialises the ``(b, a, s, s)`` scores and keeps
     them for backward (what eager attention does).

   :func:`cuda_attention` replaces ``torch.nn.functional.scaled_dot_product_attention`` during a CUDA
   trace with a custom autograd function that allocates exactly those tensors (fake: no memory), or
   runs the math composite. ``--attention flash`` (flash-attn's own package) saves the same tensors as
   the flash kernel and is traced that way.
2. **Optimizer kernels.** ``torch.optim.AdamW`` defaults to the for-each implementation when every
   parameter is on CUDA, and to the per-parameter loop on CPU. For-each computes ``sqrt(v)`` for all
   parameters of a group at once: one temporary as large as the second moments. A CUDA trace builds the
   optimizer with ``foreach=True``.
3. **Allocator rounding.** The CUDA caching allocator rounds every block to a multiple of 512 bytes
   (``kMinBlockSize`` in ``c10/cuda/CUDACachingAllocator.cpp``) and ``max_memory_allocated`` counts
   the rounded sizes; a CUDA trace counts each storage rounded up to 512 B.

4. **Autocast op lists** (``mixed-*``). CUDA autocast runs a list of ops in float32 whatever their
   input (``pow``, ``exp``, ``rsqrt``, ``softmax``, ``log_softmax``, ``layer_norm``, ``sum``, the losses...:
   "CUDA Ops that can autocast to float32" in PyTorch's AMP reference); CPU autocast leaves those ops in
   bf16. For most catalogue models those ops already see float32 (the residual stream and the norms run
   in float32, softmax is called with ``dtype=float32``), but e.g. GPT-2's ``gelu_new`` computes
   ``pow(x, 3)`` on a bf16 projection: on CUDA that and everything after it in the activation is float32.
   :class:`CudaAutocastFloat32` casts the inputs of those ops to float32 during a CUDA ``mixed-*`` trace,
   as CUDA autocast does (the casts are recorded by autograd, as autocast's are).

5. **Dropout** (``F.dropout`` in training: GPT-2 / OPT's model dropout, eager attention's dropout on the
   probabilities, PEFT's ``lora_dropout``). ``at::dropout`` takes the fused ``native_dropout`` kernel only
   on CUDA (and XPU / lazy) devices, which saves a bool mask (1 B per element); on CPU it multiplies by a
   noise tensor in the input's dtype and saves that (4 B per element in fp32). :class:`CudaDropout` makes a
   CUDA trace call ``native_dropout``. (The dropout inside CUDA's math sdpa fallback, a C++ call, is not
   redirected: it keeps the CPU noise.)

Segments and fragmentation: ``trace_step`` replays the step's allocations through a model of the caching allocator
(:mod:`memfit.estimate.allocator`, :mod:`memfit.runtime.allocations`) for ``reserved_bytes``. Not modelled: cuBLAS
workspaces and the CUDA context (the stated 512 MiB is added), and which of flash and cuDNN attention a given GPU
prefers (both save the output and a float32 log-sum-exp per row).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

CUDA_BLOCK_BYTES = 512  # c10/cuda/CUDACachingAllocator.cpp kMinBlockSize: every block is a multiple of it
FLASH_MAX_HEAD_DIM = 256  # FlashAttention-2 supports head dims up to 256, multiples of 8


def round_cuda(nbytes: int) -> int:
    """Bytes the CUDA caching allocator books for a tensor of ``nbytes``.

    >>> round_cuda(1), round_cuda(512), round_cuda(513), round_cuda(0)
    (512, 512, 1024, 0)
    """
    return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES


def cuda_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                 enable_gqa: bool) -> str:
    """The kernel CUDA's ``scaled_dot_product_attention`` picks: ``"flash"``, ``"efficient"`` or ``"math"``."""
    d = q.shape[-1]
    same_dtype = q.dtype == k.dtype == v.dtype
    gqa = enable_gqa and q.shape[-3] != k.shape[-3]
    if not enable_gqa and not q.shape[-3] == k.shape[-3] == v.shape[-3]:
        # both fused kernels need equal head counts unless enable_gqa (sdp_utils
        # check_batch_size_and_num_heads_dense): Falcon's multi-query k, v (b, 1, s, d) run the math composite
        return "math"
    if (same_dtype and q.dtype in (torch.float16, torch.bfloat16) and attn_mask is None
            and d % 8 == 0 and d <= FLASH_MAX_HEAD_DIM and v.shape[-1] == d):
        return "flash"
    align = 4 if q.dtype == torch.float32 else 8
    if same_dtype and not gqa and d % align == 0 and v.shape[-1] % align == 0:
        return "efficient"
    return "math"


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


class _FlashAttention(torch.autograd.Function):
    """Memory of CUDA's FlashAttention-2 through ``scaled_dot_product_attention`` (values are fake)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
        b, a, s, _ = q.shape
        dv = v.shape[-1]
        out = q.new_empty((b, s, a, dv)).transpose(1, 2)  # the kernel writes (b, s, a, d)
        lse = q.new_empty((b, a, s), dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse, *_philox(q, dropout_p))
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v = ctx.saved_tensors[:3]
        b, a, s, d = q.shape
        kv_heads, sk = k.shape[1], k.shape[2]
        s128 = _round_up(s, 128)
        d32 = _round_up(d, 32) if d <= 192 else FLASH_MAX_HEAD_DIM
        softmax_d = q.new_empty((b, a, s128), dtype=torch.float32)
        dq_accum = q.new_empty((b, s128, a, d32), dtype=torch.float32)
        dq = q.new_empty((b, s, a, d)).transpose(1, 2)
        if kv_heads != a:
            dk_exp = k.new_empty((b, sk, a, d))
            dv_exp = v.new_empty((b, sk, a, v.shape[-1]))
            dk = dk_exp.view(b, sk, kv_heads, a // kv_heads, d).sum(3).transpose(1, 2)
            dvv = dv_exp.view(b, sk, kv_heads, a // kv_heads, v.shape[-1]).sum(3).transpose(1, 2)
            del dk_exp, dv_exp
        else:
            dk = k.new_empty((b, sk, kv_heads, d)).transpose(1, 2)
            dvv = v.new_empty((b, sk, kv_heads, v.shape[-1])).transpose(1, 2)
        del softmax_d, dq_accum
        return dq, dk, dvv, None


def _philox(q: torch.Tensor, dropout_p: float) -> tuple[torch.Tensor, ...]:
    """With dropout the CUDA kernels keep the RNG seed and offset for the backward, as two 0-d int64 tensors on
    the host (torch 2.13, outside CUDA-graph capture; see the module docstring): nothing on the GPU."""
    return ()


class _EfficientAttention(torch.autograd.Function):
    """Memory of CUDA's memory-efficient attention (cutlass) through ``scaled_dot_product_attention``."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                bias: torch.Tensor | None, dropout_p: float) -> torch.Tensor:
        b, a, s, _ = q.shape
        out = q.new_empty((b, s, a, v.shape[-1])).transpose(1, 2)
        lse = q.new_empty((b, a, _round_up(s, 32)), dtype=torch.float32)
        extra = (bias,) if bias is not None else ()
        ctx.save_for_backward(q, k, v, out, lse, *extra, *_philox(q, dropout_p))
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v = ctx.saved_tensors[:3]
        b, a, s, _ = q.shape
        delta = q.new_empty((b, a, s), dtype=torch.float32)
        dq = torch.empty_like(q)
        dk = torch.empty_like(k)
        dvv = torch.empty_like(v)
        del delta
        return dq, dk, dvv, None, None


def _additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``convert_boolean_attn_mask``: True -> 0, False -> -inf, in the query dtype (a new tensor)."""
    if mask.dtype == torch.bool:
        return torch.where(mask, torch.zeros((), dtype=dtype), torch.full((), -math.inf, dtype=dtype))
    return mask


def cuda_scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                      attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                      is_causal: bool = False, scale: float | None = None,
                                      enable_gqa: bool = False) -> torch.Tensor:
    """Drop-in for ``F.scaled_dot_product_attention`` with the memory of the kernel CUDA would pick.

    Under autocast (``mixed-*``; the trace's autocast is CPU's) the inputs are first cast to the autocast
    dtype, as autocast does for this operator on both devices: the casts are new tensors and they are
    what the kernel saves.
    """
    if torch.is_autocast_enabled("cpu"):
        amp = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(amp) if t.is_floating_point() and t.dtype != amp else t
                             for t in (query, key, value))
    backend = cuda_backend(query, key, value, attn_mask, enable_gqa)
    if backend == "flash":
        out: torch.Tensor = _FlashAttention.apply(query, key, value, dropout_p)
        return out
    if backend == "efficient":
        bias = _additive_mask(attn_mask, query.dtype) if attn_mask is not None else None
        out = _EfficientAttention.apply(query, key, value, bias, dropout_p)
        return out
    mask = _additive_mask(attn_mask, query.dtype) if attn_mask is not None else None
    result = torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)
    return result[0]  # type: ignore[no-any-return]


@contextlib.contextmanager
def cuda_attention() -> Iterator[None]:
    """Within the block, ``F.scaled_dot_product_attention`` has CUDA's memory behaviour (for fake tensors)."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = cuda_scaled_dot_product_attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def host_storages(optimizer: Any) -> set[int]:
    """``id()`` of the storages an optimizer keeps in host memory on a CUDA device: torch optimizers keep
    ``state["step"]`` as a 0-d CPU tensor even for CUDA parameters, unless ``capturable`` or ``fused``
    (torch 2.13.0, ``Adam._init_group`` in ``torch/optim/adam.py``, which AdamW inherits). The trace does not
    count them as device memory."""
    for group in optimizer.param_groups:
        if group.get("capturable") or group.get("fused"):
            return set()
    out = set()
    for state in optimizer.state.values():
        step = state.get("step") if isinstance(state, dict) else None
        if isinstance(step, torch.Tensor):
            out.add(id(step.untyped_storage()))
    return out


def use_foreach(optimizer: Any) -> None:
    """Make a torch optimizer take its for-each path, as it does by default on CUDA."""
    if "foreach" in getattr(optimizer, "defaults", {}):
        optimizer.defaults["foreach"] = True
        for group in optimizer.param_groups:
            group["foreach"] = True


# PyTorch AMP reference, "CUDA Ops that can autocast to float32" (the ops a CUDA autocast region runs in
# float32 whatever the input dtype; "set opt dtype" ops keep an explicit ``dtype=`` argument).
CUDA_AUTOCAST_FP32_OPS = frozenset({
    "__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin", "binary_cross_entropy_with_logits",
    "cosh", "cosine_embedding_loss", "cdist", "cosine_similarity", "cross_entropy", "cumprod", "cumsum",
    "dist", "erfinv", "exp", "expm1", "group_norm", "hinge_embedding_loss", "kl_div", "l1_loss", "layer_norm",
    "log", "log_softmax", "log10", "log1p", "log2", "margin_ranking_loss", "mse_loss",
    "multilabel_margin_loss", "multi_margin_loss", "nll_loss", "norm", "normalize", "pdist",
    "poisson_nll_loss", "pow", "prod", "reciprocal", "rsqrt", "sinh", "smooth_l1_loss", "soft_margin_loss",
    "softmax", "softmin", "softplus", "sum", "renorm", "tan", "triplet_margin_loss",
})
_LOW = (torch.bfloat16, torch.float16)


class CudaAutocastFloat32(TorchFunctionMode):
    """While CPU autocast is on, run CUDA autocast's float32 ops in float32 (inputs cast, as CUDA does)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if (getattr(func, "__name__", "") in CUDA_AUTOCAST_FP32_OPS and kwargs.get("dtype") is None
                and torch.is_autocast_enabled("cpu")):
            args, kwargs = tree_map(_to_float32, (args, kwargs))
        return func(*args, **kwargs)


class CudaDropout(TorchFunctionMode):
    """``F.dropout`` as CUDA runs it in training: the fused ``native_dropout``, which saves a bool mask."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.dropout:
            bound = dict(zip(("input", "p", "training", "inplace"), args, strict=False), **kwargs)
            x, p = bound["input"], float(bound.get("p", 0.5))
            if bound.get("training", True) and not bound.get("inplace", False) and 0.0 < p < 1.0 and x.numel():
                return torch.native_dropout(x, p, True)[0]
        return func(*args, **kwargs)


def _to_float32(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _LOW:
        return x.float()
    return x
