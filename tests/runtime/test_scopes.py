"""Module scopes and the saved-tensor ledger on a hand-built two-module network."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memfit.runtime.scopes import ModuleScopes, SavedTensorLedger, layer_index, short_path  # noqa: E402
from memfit.runtime.tracker import LiveTensorTracker  # noqa: E402


def test_layer_index_and_short_path() -> None:
    assert layer_index("base_model.model.model.layers.12.self_attn.q_proj.lora_A.default") == 12
    assert [layer_index(p) for p in ("transformer.h.0.attn", "gpt_neox.layers.3", "lm_head", None)] == [0, 3, None,
                                                                                                        None]
    assert short_path("base_model.model.model.layers.0.mlp") == "model.layers.0.mlp"


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())


def test_each_storage_is_tagged_with_the_module_that_made_it_or_the_phase() -> None:
    """Linear(4, 8) + ReLU on x (2, 4), loss = sum, fp32. At the backward peak (456 B) are alive: the weights
    (128 + 32 B, registered, no tag), the ReLU's output y, which the caller holds (2 x 8 x 4 = 64 B, made by
    module "1"; the linear's output is freed in forward), the loss (4 B, made outside any module: "(forward)"), and,
    made in backward outside any module forward: the seed gradient (4 B), the ReLU's input gradient (64 B),
    the weight's and bias's gradients (128 + 32 B): 228 B tagged "(backward)"."""
    net = _net()
    tracker = LiveTensorTracker()
    tracker.track_model(net)
    x = torch.randn(2, 4)
    with tracker, ModuleScopes(net, tracker):
        with tracker.phase("forward"):
            y = net(x)
            loss = y.sum()
        with tracker.phase("backward"):
            loss.backward()
    assert (tracker.peak_bytes, tracker.peak_phase) == (456, "backward")
    by_tag: dict[str | None, int] = {}
    for nbytes, _, tag in tracker.peak_storages():
        by_tag[tag] = by_tag.get(tag, 0) + nbytes
    assert by_tag == {None: 160, "1": 64, "(forward)": 4, "(backward)": 228}


def test_the_ledger_counts_what_autograd_saves_once_per_storage() -> None:
    """x (2 x 4, no grad) through Linear(4, 8) and ReLU: addmm saves x for the weight's gradient (32 B; the
    transposed weight is a parameter's storage, excluded), ReLU saves its output (2 x 8 x 4 = 64 B)."""
    net = _net()
    tracker = LiveTensorTracker()
    scopes = ModuleScopes(net, tracker)
    with scopes, SavedTensorLedger.for_model(net, scopes) as ledger:
        y = net(torch.randn(2, 4))
    assert dict(ledger.by_module) == {"0": 32, "1": 64}
    assert ledger.by_layer() == {"0": 32, "1": 64}
    y.sum().backward()  # the hooks hand tensors back unchanged: backward still works
