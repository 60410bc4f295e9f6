"""RunSpec: one typed description of a training run that ``estimate``, ``trace`` and ``measure`` all read,
so the three engines mean the same thing by the same flag.

Precision, in PyTorch terms:

==============  ===========================  =========================================================
``precision``   weights stored as            compute
==============  ===========================  =========================================================
``fp32``        ``torch.float32``            fp32, no autocast
``bf16``        ``torch.bfloat16``           bf16, no autocast (``model.to(torch.bfloat16)``)
``fp16``        ``torch.float16``            fp16, no autocast
``mixed-bf16``  ``torch.float32`` (master)   ``torch.autocast(device, dtype=torch.bfloat16)``
``mixed-fp16``  ``torch.float32`` (master)   ``torch.autocast(device, dtype=torch.float16)`` + GradScaler
==============  ===========================  =========================================================

LoRA adapter weights are fp32 whatever the base precision (PEFT's ``autocast_adapter_dtype=True``).
``qlora`` stores the base linears in 4-bit NF4 (bitsandbytes), with ``double_quant`` quantising the
per-block absmax constants as well, and ``prepare_model_for_kbit_training`` upcasting the
non-quantised parameters (norms, embeddings, lm_head) to fp32.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, get_args

from memfit.errors import MemfitError
from memfit.estimate.allocator import AllocatorSettings

Method = Literal["full", "lora", "qlora", "int8-lora"]
Precision = Literal["fp32", "bf16", "fp16", "mixed-bf16", "mixed-fp16"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "paged-adamw-32bit", "paged-adamw-8bit"]
AdamWImpl = Literal["fused", "foreach", "forloop"]  # torch.optim.AdamW(fused=True) / (foreach=True) / (both False)
Checkpointing = Literal["none", "full", "every-k", "sqrt"]
Attention = Literal["eager", "sdpa", "flash"]
Device = Literal["cuda", "cpu"]
Bias = Literal["none", "all", "lora_only"]  # PEFT LoraConfig.bias: which biases train beside the adapters
Loss = Literal["standard", "chunked", "trl"]  # trl: TRL SFTTrainer's fused LM head (estimate/trl_loss.py)
Sharding = Literal["none", "zero1", "zero2", "zero3",  # ZeRO stages; FSDP SHARD_GRAD_OP = zero2, FULL_SHARD = zero3
                   "ddp", "fsdp", "hsdp"]  # DDP (replicas + buckets), FSDP2 fully_shard, hybrid: estimate/sharding
FsdpWrap = Literal["layers", "accelerate"]  # FSDP2 units: layers + root (torchtitan), or accelerate 1.15's

ALL_LINEAR = "all-linear"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSpec:
    """One fine-tuning run's memory-relevant settings.

    ``targets`` is a tuple of module names (``("q_proj", "v_proj")``), ``("all-linear",)`` as PEFT means
    it (every linear layer but the output layer), or empty for PEFT's default for the architecture.
    ``checkpoint_every`` is k for ``checkpointing="every-k"`` (checkpoint one block in k).
    ``gpus`` is the data-parallel world size and ``sharding`` the ZeRO stage the model states are sharded
    over it with (:mod:`memfit.estimate.sharding`); the estimate's figures are then per GPU. The GPU the run
    is judged against is not part of the run (:class:`memfit.estimate.fits.Target`).
    """

    method: Method = "lora"
    rank: int = 16
    alpha: int = 32
    lora_dropout: float = 0.0
    targets: tuple[str, ...] = ()
    modules_to_save: tuple[str, ...] = ()
    double_quant: bool = True
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    batch: int = 1
    seq: int = 2048
    grad_accum: int = 1
    checkpointing: Checkpointing = "none"
    checkpoint_every: int = 2
    offload: bool = False
    attention: Attention = "sdpa"
    device: Device = "cuda"
    padding_mask: bool = False
    loss: Loss = "standard"
    sharding: Sharding = "none"
    gpus: int = 1
    # evaluation (transformers 5.24 Trainer.evaluation_loop; :mod:`memfit.estimate.evaluation`): None = not modelled
    eval_batch: int | None = None  # per_device_eval_batch_size
    eval_metrics: bool = False  # a compute_metrics is passed: Trainer.evaluate gathers the logits (unless below)
    prediction_loss_only: bool = False  # TrainingArguments.prediction_loss_only: never gather the logits
    eval_accumulation_steps: int | None = None  # gathered logits leave the GPU every N eval steps (None: at the end)
    eval_samples: int | None = None  # examples in the eval set (how many steps' logits pile up without the above)
    loss_token_share: float = 1.0  # share of the b*(s-1) positions whose label is not -100 (completion-only loss)
    nodes: int = 1  # machines the gpus are spread over (hsdp shards within one, replicates across them)
    reshard_after_forward: bool | None = None  # FSDP2's flag; None = the sharding's own (zero2 False, else True)
    prefetch: int = 1  # layers gathered ahead of the one computing (FSDP2's implicit prefetch: 1)
    cpu_offload_params: bool = False  # sharded weights (and their gradients) kept in host memory (CPUOffloadPolicy)
    cpu_offload_optimizer: bool = False  # optimizer states and their step on the host (DeepSpeed offload_optimizer)
    bucket_mb: int = 25  # DDP's bucket_cap_mb (torch 2.13.0 default 25): the gradient buckets' split
    fsdp_wrap: FsdpWrap = "layers"  # FSDP2's units: per layer + root, or accelerate 1.15's (+ embedding, + tail)
    gpus_per_node: int | None = None  # GPUs in one machine: --nodes = gpus / this (None: --nodes, or 8 per node)
    adamw_impl: AdamWImpl = "fused"
    exclude_modules: tuple[str, ...] = ()  # PEFT exclude_modules (a list: full names or name endings; lora.py)
    targets_regex: str = ""  # PEFT target_modules as a str: re.fullmatch over full module names (lora.py)
    rank_pattern: tuple[tuple[str, int], ...] = ()  # PEFT rank_pattern {regex: r}, in order (lora.rank_of)
    use_dora: bool = False  # PEFT LoraConfig(use_dora=True): magnitudes and weight norm (activations/ops.py)
    layers_to_transform: tuple[int, ...] = ()  # PEFT layers_to_transform: adapters on these decoder layers only
    layers_pattern: tuple[str, ...] = ()  # PEFT layers_pattern: the ModuleList name the layer index follows
    trainable_token_indices: tuple[int, ...] = ()  # PEFT LoraConfig.trainable_token_indices: embedding rows trained
    bias: Bias = "none"  # PEFT bias: "all" trains every parameter named *.bias, "lora_only" the adapted linears'
    alloc_conf: str = ""  # PYTORCH_CUDA_ALLOC_CONF the run sets (expandable_segments, max_split_size_mb; allocator.py)
    # TRL 1.16 SFTConfig(activation_offloading=True) / OffloadActivations: every saved tensor of >= 1024 B that is not
    # a parameter nor saved inside lm_head goes to host memory (memfit.runtime.act_offload); not --offload's rule
    offload_activations: bool = False

    def __post_init__(self) -> None:
        _check_choice("method", self.method, Method)
        _check_choice("precision", self.precision, Precision)
        _check_choice("optimizer", self.optimizer, Optimizer)
        _check_choice("checkpointing", self.checkpointing, Checkpointing)
        _check_choice("attention", self.attention, Attention)
        _check_choice("device", self.device, Device)
        _check_choice("loss", self.loss, Loss)
        _check_choice("sharding", self.sharding, Sharding)
        _check_choice("adamw_impl", self.adamw_impl, AdamWImpl)
        _check_choice("bias", self.bias, Bias)
        _check_choice("fsdp-wrap", self.fsdp_wrap, FsdpWrap)
        for name in ("batch", "seq", "grad_accum", "rank", "alpha", "checkpoint_every", "gpus", "nodes", "prefetch",
                     "bucket_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MemfitError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.targets_regex and self.targets:
            raise MemfitError("--targets-regex and --targets both choose LoRA's targets (PEFT's target_modules is a "
                              "regular expression or a list): pass one")
        object.__setattr__(self, "rank_pattern", parse_rank_pattern(self.rank_pattern))  # a dict from Python too
        object.__setattr__(self, "layers_to_transform", parse_layers(self.layers_to_transform))
        object.__setattr__(self, "layers_pattern", parse_targets(self.layers_pattern, flag="--layers-pattern")
                           if isinstance(self.layers_pattern, str) else tuple(self.layers_pattern))
        _check_layers(self)
        object.__setattr__(self, "trainable_token_indices", parse_token_indices(self.trainable_token_indices))
        for key, r in self.rank_pattern:
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise MemfitError(f"--rank-pattern {key}={r!r}: a rank must be a positive integer")
        for name in ("eval_batch", "eval_accumulation_steps", "eval_samples"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise MemfitError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.gathers_eval_logits and self.eval_accumulation_steps is None and self.eval_samples is None:
            raise MemfitError("--eval-metrics gathers every evaluation step's logits on the GPU until the eval set "
                              "ends (eval_accumulation_steps None): add --eval-samples N (the eval set's size), or "
                              "--eval-accumulation-steps K, or --prediction-loss-only")
        if not 0.0 < self.loss_token_share <= 1.0:
            raise MemfitError(f"--loss-token-share must be in (0, 1] (the share of positions whose label is not "
                              f"-100), got {self.loss_token_share}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise MemfitError(f"--lora-dropout must be in [0, 1), got {self.lora_dropout}")
        if self.sharding != "none" and self.gpus == 1:
            raise MemfitError(f"--sharding {self.sharding} shards the model states over data-parallel GPUs: add --gpus "
                              "N (the world size, N > 1), or drop --sharding")
        _check_sharding_knobs(self)
        if self.method == "full":
            # contradictions the spec alone can tell (these fields' defaults are "none given"); --rank and
            # --alpha have real defaults, so the CLI refuses those when typed (cli/_spec_options.ONLY_WITH)
            if self.targets:
                raise MemfitError("--targets chooses LoRA's adapted modules; --method full trains every weight: "
                                  "drop --targets or pass --method lora")
            if self.modules_to_save:
                raise MemfitError("--modules-to-save lists modules trained in full beside LoRA; --method full trains "
                                  "every module already: drop it or pass --method lora")
            if self.lora_dropout:
                raise MemfitError("--lora-dropout applies to the LoRA adapter; --method full has none: drop it or "
                                  "pass --method lora")
            if self.targets_regex:
                raise MemfitError("--targets-regex chooses LoRA's adapted modules; --method full trains every weight: "
                                  "drop it or pass --method lora")
            if self.rank_pattern:
                raise MemfitError("--rank-pattern sets LoRA ranks; --method full has no adapter: drop it or pass "
                                  "--method lora")
            if self.exclude_modules:
                raise MemfitError("--exclude-modules narrows LoRA's targets; --method full trains every weight: "
                                  "drop it or pass --method lora")
            if self.trainable_token_indices:
                raise MemfitError("--trainable-tokens trains some embedding rows beside LoRA; --method full trains "
                                  "the whole embedding already: drop it or pass --method lora")
            if self.bias != "none":
                raise MemfitError(f"--bias {self.bias} is PEFT's choice of biases trained beside LoRA; --method full "
                                  "trains every bias already: drop it or pass --method lora")
            if self.use_dora:
                raise MemfitError("--dora decomposes LoRA's update (PEFT use_dora); --method full has no adapter: "
                                  "drop --dora or pass --method lora")
        if self.offload and self.checkpointing == "none":
            raise MemfitError("--offload moves the checkpoints to CPU memory; with --checkpointing none there are "
                              "none: add --checkpointing full (or every-k, sqrt) or drop --offload")
        if self.offload and self.offload_activations:
            raise MemfitError("--offload (checkpoints to the host) and --offload-activations (TRL's "
                              "OffloadActivations: every saved tensor) are two rules for the same tensors: keep one")
        if self.attention == "flash" and self.device == "cpu":
            raise MemfitError("--attention flash needs --device cuda (FlashAttention has no CPU kernel); "
                              "use --attention sdpa on CPU")
        AllocatorSettings.parse(self.alloc_conf)  # refuses the options the allocator replay does not model

    @property
    def allocator_settings(self) -> AllocatorSettings:
        """The CUDA caching allocator's settings of the run (``PYTORCH_CUDA_ALLOC_CONF``, :attr:`alloc_conf`)."""
        return AllocatorSettings.parse(self.alloc_conf)

    @property
    def is_adapter(self) -> bool:
        return self.method in ("lora", "qlora", "int8-lora")

    @property
    def is_quantised(self) -> bool:
        """A bitsandbytes base (``qlora``: 4-bit NF4, ``int8-lora``: LLM.int8) under a LoRA adapter, prepared by
        PEFT's ``prepare_model_for_kbit_training`` (the non-quantised parameters upcast to fp32)."""
        return self.method in ("qlora", "int8-lora")

    @property
    def is_paged(self) -> bool:
        """bitsandbytes' paged optimizers keep their states in CUDA unified memory (``cudaMallocManaged``),
        outside the CUDA caching allocator's counters."""
        return self.optimizer.startswith("paged-")

    @property
    def gathers_eval_logits(self) -> bool:
        """Trainer.evaluate keeps each eval step's logits: only with a compute_metrics (evaluate passes
        ``prediction_loss_only=True`` without one) and ``prediction_loss_only`` False (transformers 5.24)."""
        return self.eval_batch is not None and self.eval_metrics and not self.prediction_loss_only

    @property
    def is_mixed(self) -> bool:
        return self.precision.startswith("mixed-")

    @property
    def weight_bytes(self) -> int:
        """Bytes per element of the stored (non-quantised) weights: fp32 for mixed precision."""
        return {"fp32": 4, "bf16": 2, "fp16": 2, "mixed-bf16": 4, "mixed-fp16": 4}[self.precision]

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of activations: the autocast dtype, or the weight dtype without autocast."""
        return 4 if self.precision == "fp32" else 2

    @property
    def tokens(self) -> int:
        """Tokens in one micro-batch: b*s."""
        return self.batch * self.seq

    def with_(self, **changes: Any) -> RunSpec:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["targets"] = list(self.targets)
        d["modules_to_save"] = list(self.modules_to_save)
        d["exclude_modules"] = list(self.exclude_modules)
        d["rank_pattern"] = dict(self.rank_pattern)
        d["layers_to_transform"] = list(self.layers_to_transform)
        d["layers_pattern"] = list(self.layers_pattern)
        d["trainable_token_indices"] = list(self.trainable_token_indices)
        return d

    @classmethod
    def from_config(cls, *paths: str | os.PathLike[str], **overrides: Any) -> RunSpec:
        """The run described by the user's training config(s): axolotl, LLaMA-Factory, TRL ``SFTConfig`` /
        ``TrainingArguments`` YAML or JSON, torchtune, PEFT ``adapter_config.json``, DeepSpeed, accelerate
        (several files merge, later ones win; ``KIND:PATH`` names the kind), with each framework's defaults
        where a file is silent and ``overrides`` winning over every file.

        >>> RunSpec.from_config("qlora.yml", batch=1).batch  # doctest: +SKIP
        1

        The readers live in :mod:`memfit.configs`, a layer above this package: imported when called.
        """
        configs = importlib.import_module("memfit.configs")
        spec: RunSpec = configs.spec_from_files(paths, overrides).spec
        return spec

    @classmethod
    def from_training_args(cls, args: Any = None, model_config: Any = None, peft_config: Any = None,
                           **overrides: Any) -> RunSpec:
        """The run of live objects: a transformers ``TrainingArguments`` or TRL ``SFTConfig``, the model's
        ``PretrainedConfig`` (the dtype it was loaded in, its attention kernel and quantization) and a PEFT
        ``LoraConfig``; attributes are read, nothing is called. ``overrides`` win.

        >>> RunSpec.from_training_args(args, model.config, lora_config)  # doctest: +SKIP
        """
        configs = importlib.import_module("memfit.configs")
        spec: RunSpec = configs.spec_from_objects(args, model_config, peft_config, overrides).spec
        return spec

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        d = dict(d)
        for key in ("targets", "modules_to_save", "exclude_modules", "layers_pattern"):
            if key in d and d[key] is not None:
                d[key] = tuple(d[key])
        if "rank_pattern" in d:
            d["rank_pattern"] = parse_rank_pattern(d["rank_pattern"])
        return cls(**d)


def parse_targets(text: str | None, *, flag: str = "--targets") -> tuple[str, ...]:
    """``"q_proj,v_proj"`` -> ``("q_proj", "v_proj")``; ``"all-linear"`` -> ``("all-linear",)``; None (the
    flag not given) -> ``()``, PEFT's default. A given but empty list (``""``, ``",,,"``) is refused: it
    would silently mean the default."""
    if text is None:
        return ()
    raw = text.split(",")
    names = tuple(t.strip() for t in raw)
    if not any(names):
        raise MemfitError(f"{flag} {text!r} names no module: list them (q_proj,v_proj or all-linear), or leave "
                          f"{flag} out for PEFT's default")
    if not all(names):
        raise MemfitError(f"{flag} {text!r} has an empty name between commas: write it like q_proj,v_proj")
    if ALL_LINEAR in names and len(names) > 1:
        raise MemfitError(f"{flag} all-linear stands alone; drop the other names")
    return names


def parse_rank_pattern(value: Any) -> tuple[tuple[str, int], ...]:
    """``"q_proj=32,v_proj=8"`` or PEFT's ``{"q_proj": 32}`` -> ``(("q_proj", 32), ("v_proj", 8))`` (order kept: PEFT
    takes the first key that matches)."""
    if value is None:
        return ()
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, str):
        items = []
        for part in (p.strip() for p in value.split(",") if p.strip()):
            key, sep, r = part.rpartition("=")
            if not sep or not key or not r.strip().isdigit():
                raise MemfitError(f"--rank-pattern {value!r}: write NAME=RANK pairs, e.g. q_proj=32,mlp.down_proj=8")
            items.append((key.strip(), int(r)))
    else:
        items = [tuple(i) for i in value]
    return tuple((str(k), r) for k, r in items)


def parse_layers(value: Any) -> tuple[int, ...]:
    """PEFT's ``layers_to_transform`` (an int or a list of ints) or ``"0,1,5"`` / ``"0-3,8"`` -> sorted distinct
    layer indexes ``(0, 1, 5)`` / ``(0, 1, 2, 3, 8)``; None -> ``()`` (every layer)."""
    if value is None or value == "":
        return ()
    if isinstance(value, bool):
        raise MemfitError(f"--layers-to-transform {value!r}: list layer indexes, e.g. 0,1,5 or 0-3")
    if isinstance(value, int):
        items: list[Any] = [value]
    elif isinstance(value, str):
        items = []
        for part in (p.strip() for p in value.split(",")):
            lo, sep, hi = part.partition("-")
            if not lo.strip().isdigit() or (sep and not hi.strip().isdigit()):
                raise MemfitError(f"--layers-to-transform {value!r}: list layer indexes (from 0) or ranges, e.g. "
                                  "0,1,5 or 0-3,8")
            a, b = int(lo), int(hi) if sep else int(lo)
            if b < a:
                raise MemfitError(f"--layers-to-transform {value!r}: the range {part} runs backwards; write {b}-{a}")
            items.extend(range(a, b + 1))
    else:
        items = list(value)
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in items):
        raise MemfitError(f"--layers-to-transform {value!r}: layer indexes are integers from 0, e.g. 0,1,5")
    return tuple(sorted(set(items)))


def parse_token_indices(value: Any) -> tuple[int, ...]:
    """PEFT's ``trainable_token_indices`` list (or ``"5,7,128000"``) -> ``(5, 7, 128000)``, order and repeats kept
    (PEFT keeps the list as given: one delta row per entry)."""
    if value is None or value == "":
        return ()
    items = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value)
    out = []
    for i in items:
        if isinstance(i, str) and i.isdigit():
            i = int(i)
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise MemfitError(f"--trainable-tokens {value!r}: list token ids (from 0), e.g. 128000,128001")
        out.append(i)
    return tuple(out)


def _check_layers(spec: RunSpec) -> None:
    """PEFT 0.21.2 ``LoraConfig.__post_init__``: ``layers_to_transform`` and ``layers_pattern`` need a list
    ``target_modules`` (not a regular expression, nor ``"all-linear"``, also a str there), and ``layers_pattern``
    needs ``layers_to_transform``."""
    if spec.layers_pattern and not spec.layers_to_transform:
        raise MemfitError("--layers-pattern names the layer list --layers-to-transform indexes (PEFT: 'When "
                          "layers_pattern is specified, layers_to_transform must also be specified'): add "
                          "--layers-to-transform or drop --layers-pattern")
    if spec.layers_to_transform and spec.targets_regex:
        raise MemfitError("--layers-to-transform cannot be used with --targets-regex (PEFT: 'layers_to_transform "
                          "cannot be used when target_modules is a str'): name the targets with --targets, or put "
                          "the layer indexes in the regular expression")
    if spec.layers_to_transform and spec.targets == (ALL_LINEAR,):
        raise MemfitError("--layers-to-transform cannot be used with --targets all-linear (PEFT 0.21.2: "
                          "'layers_to_transform cannot be used when target_modules is a str'): list the linears, "
                          "e.g. --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    if spec.layers_to_transform and spec.method == "full":
        raise MemfitError("--layers-to-transform chooses the layers LoRA adapts; --method full trains every weight: "
                          "drop it or pass --method lora")


def _check_choice(name: str, value: object, choices: Any) -> None:
    allowed = get_args(choices)
    if value not in allowed:
        raise MemfitError(f"--{name} must be one of {', '.join(allowed)}; got {value!r}")


def _check_sharding_knobs(spec: RunSpec) -> None:
    """The world's shape: whole nodes, and hsdp's replicas across them. The flags that act only with some shardings
    (--offload-*, --reshard-after-forward, --prefetch, --bucket-mb) are refused where typed (cli ONLY_WITH): a
    DeepSpeed file's offload settings arrive before the world size does."""
    g = spec.gpus_per_node
    if g is not None:
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise MemfitError(f"--gpus-per-node must be a positive integer, got {g!r}")
        if spec.gpus % g and spec.gpus > g:
            raise MemfitError(f"--gpus {spec.gpus} with --gpus-per-node {g}: every node holds the same number of "
                              f"GPUs; make --gpus a multiple of {g} (or fewer than {g}, on one node)")
        object.__setattr__(spec, "nodes", max(1, spec.gpus // g))  # derived (the command refuses both flags)
    if spec.gpus % spec.nodes:
        raise MemfitError(f"--gpus {spec.gpus} over --nodes {spec.nodes}: every node holds the same number of "
                          "GPUs; make --gpus a multiple of --nodes")
    if spec.sharding == "hsdp" and spec.nodes < 2:
        raise MemfitError("--sharding hsdp shards within a node and replicates across nodes: add --nodes M (M > 1), "
                          "or use --sharding fsdp")
