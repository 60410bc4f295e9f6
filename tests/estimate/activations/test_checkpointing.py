"""What checkpointing keeps, worked by hand: segments, kept block inputs and the attention masks."""

from __future__ import annotations

import pytest
from activation_cases import LLAMA, model

from memfit.estimate import RunSpec
from memfit.estimate.activations.checkpointing import checkpoint_segment, checkpoints


@pytest.mark.parametrize(("mode", "every", "layers", "segment"), [
    ("none", 2, 32, 0),
    ("full", 2, 32, 1),
    ("every-k", 2, 3, 1),
    ("every-k", 5, 3, 1),  # k > L: block 0 alone (transformers 5.24: layer_index % every_n_layers == 0)
    ("sqrt", 2, 32, 6),  # 5*5 = 25 < 32 <= 36 = 6*6
    ("sqrt", 2, 36, 6),
    ("sqrt", 2, 37, 7),
])
def test_segment(mode: str, every: int, layers: int, segment: int) -> None:
    assert checkpoint_segment(RunSpec(checkpointing=mode, checkpoint_every=every), layers) == segment  # type: ignore[arg-type]


def test_kept_inputs_and_masks() -> None:
    """4 layers, b=1, s=8, one block input 8*16*2 = 256 B (bf16):

    - full: 4 inputs, 1,024 B; with eager attention each checkpointed block also keeps its (1, 1, 8, 8) bf16
      mask argument, one tensor for all, 128 B: 1,152 B;
    - sqrt: segments of 2, ceil(4/2) = 2 inputs, 512 B;
    - every-k, k = 2: blocks 0 and 2 checkpointed (transformers 5.24.0 ``_set_gradient_checkpointing``:
      ``layer_index % every_n_layers == 0``), 512 B, the other 2 plain;
    - every-k, k = 3: blocks 0 and 3, 512 B, 2 plain (the old floor(4/3) = 1 block left one out);
    - offload: the inputs live in host memory, 0 B (the mask stays: 128 B under eager).
    """
    shape = model(LLAMA, num_hidden_layers=4)
    cases = [({"checkpointing": "full"}, 1, 1024, 0), ({"checkpointing": "full", "attention": "eager"}, 1, 1152, 0),
             ({"checkpointing": "sqrt"}, 2, 512, 0), ({"checkpointing": "every-k"}, 1, 512, 2),
             ({"checkpointing": "every-k", "checkpoint_every": 3}, 1, 512, 2),
             ({"checkpointing": "full", "offload": True, "attention": "eager"}, 1, 128, 0)]
    for fields, segment, kept, plain in cases:
        ck = checkpoints(shape, RunSpec(batch=1, seq=8, **fields), layer_input=256, mask_itemsize=2)
        assert (ck.segment, ck.kept_bytes, ck.plain_blocks) == (segment, kept, plain), fields


def test_sliding_and_full_layers_keep_two_masks() -> None:
    """Gemma 2 alternates sliding-window and full attention layers: transformers builds one mask for each kind and
    each checkpointed block keeps its own, so two (1, 1, 8, 8) bf16 masks stay: 4 x 256 + 2 x 128 = 1,280 B.
    Without a sliding window every layer is full: one mask, 1,152 B. A one-layer model has one kind of layer."""
    gemma2 = {"model_type": "gemma2", "num_hidden_layers": 4, "hidden_size": 16, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 32, "vocab_size": 64}
    spec = RunSpec(batch=1, seq=8, checkpointing="full", attention="eager")
    assert model(gemma2).layer_types == ("sliding", "full", "sliding", "full")
    assert checkpoints(model(gemma2), spec, layer_input=256, mask_itemsize=2).kept_bytes == 1280
    assert checkpoints(model(gemma2, sliding_window=None), spec, layer_input=256, mask_itemsize=2).kept_bytes == 1152
    one_layer = checkpoints(model(gemma2, num_hidden_layers=1), spec, layer_input=256, mask_itemsize=2)
    assert one_layer.kept_bytes == 256 + 128


def test_offload_keeps_a_leaf_first_input_and_copies_every_input_to_the_host() -> None:
    """--offload, 4 layers, one block input 256 B: every checkpointed input is copied to the host, 4 x 256 =
    1,024 B. On the device: nothing (full fine-tune: block 0's input has a grad_fn), or block 0's input when it is a
    leaf (an adapter run: the frozen embedding's output, held by the graph's AccumulateGrad), 256 B; plus the eager
    mask, 128 B."""
    shape = model(LLAMA, num_hidden_layers=4)
    spec = RunSpec(batch=1, seq=8, checkpointing="full", offload=True, attention="eager")
    plain = checkpoints(shape, spec, layer_input=256, mask_itemsize=2)
    leaf = checkpoints(shape, spec, layer_input=256, mask_itemsize=2, leaf_input=True)
    assert (plain.kept_bytes, plain.host_bytes) == (128, 1024)
    assert (leaf.kept_bytes, leaf.host_bytes) == (256 + 128, 1024)
    assert checkpoints(shape, spec.with_(offload=False), layer_input=256, mask_itemsize=2).host_bytes == 0
