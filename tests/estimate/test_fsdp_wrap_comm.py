"""``--fsdp-wrap accelerate``'s all-gathers: its tail [final norm, lm_head] is gathered in the forward and kept
(``reshard_after_forward=False``, accelerate 1.15.0 ``fsdp2_prepare_model``), so only the rest is gathered again."""

from __future__ import annotations

from memfit.estimate import ModelShape, RunSpec
from memfit.estimate.sharding import communication_bytes
from memfit.validate.agreement import scaled_config


def test_accelerate_gathers_its_tail_once() -> None:
    """Scaled Pythia (V 50,304, h 512, 4 layers), fp32: W = 2 x 50,304 x 512 x 4 (untied embedding and lm_head)
    + 4 x 12,609,536 (the layers) + 4,096 (the final LayerNorm) = 256,487,424 B. Per-layer wrap: 2 W =
    512,974,848 B; accelerate's: 2 W - (lm_head 103,022,592 + norm 4,096) = 409,948,160 B."""
    shape = ModelShape.from_hf_config(scaled_config("pythia-1.4b", 512, 4), name="pythia-1.4b")
    spec = RunSpec(method="full", precision="fp32", sharding="fsdp", gpus=2)
    assert communication_bytes(shape, spec)["all_gather_bytes"] == 512_974_848
    assert communication_bytes(shape, spec.with_(fsdp_wrap="accelerate"))["all_gather_bytes"] == 409_948_160
    zero2 = spec.with_(sharding="zero2", fsdp_wrap="accelerate")  # nothing is gathered twice
    assert communication_bytes(shape, zero2)["all_gather_bytes"] == 256_487_424
