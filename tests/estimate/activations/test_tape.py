"""The symbolic tape's rules, each worked by hand on a few small tensors (no model involved)."""

from __future__ import annotations

from memfit.estimate.activations.tape import BackwardEvent, Tape


def test_a_view_keeps_its_whole_storage_once() -> None:
    """x (2, 8, 16) fp32 = 1,024 B. Saving q = x[..., :4] (2*8*4*4 = 256 B of its own) keeps all of x's
    storage; saving x again after that adds nothing: 1,024 B in all, under the first component that saved it."""
    t = Tape(compute_itemsize=4)
    x = t.new((2, 8, 16), 4, True)
    q = x.view(2, 8, 4)
    assert (q.nbytes, q.storage_bytes) == (256, 1024)
    t.save(q, "attention/q")
    t.save(x, "norm")
    assert t.saved_total == 1024
    assert [(s.nbytes, s.component) for s in t.saved.values()] == [(1024, "attention/q")]


def test_parameters_are_never_saved_as_activations() -> None:
    """A (16, 16) fp32 weight saved by an op is a parameter: 0 B of activations."""
    t = Tape(compute_itemsize=4)
    w = t.param((16, 16), 4, True)
    t.save(w, "lin")
    assert t.saved_total == 0 and t.is_param(w)


def test_linear_saves_what_its_backward_reads() -> None:
    """F.linear(x, W), x (2, 8, 16) fp32:

    - W trained, x frozen (the first layer of a full fine-tune): x, 2*8*16*4 = 1,024 B; W is a parameter.
    - under autocast (bf16), W frozen fp32 (32, 16), x requiring grad: the bf16 copy of W autocast makes,
      32*16*2 = 1,024 B, saved for x's gradient; x is not saved (W needs no gradient). Output (2, 8, 32) bf16.
    """
    t = Tape(compute_itemsize=4)
    x = t.new((2, 8, 16), 4, False)
    out = t.linear(x, t.weight((32, 16), 4, True), 32, "lin")
    assert t.saved_total == 1024 and out.shape == (2, 8, 32) and out.requires_grad

    a = Tape(compute_itemsize=2, autocast=True)
    x = a.new((2, 8, 16), 4, True)
    out = a.linear(x, a.weight((32, 16), 4, False), 32, "lin")
    assert {s.component: s.nbytes for s in a.saved.values()} == {"lin/weight_copy": 1024}
    assert (out.shape, out.itemsize) == ((2, 8, 32), 2)


def test_mul_saves_the_other_operand() -> None:
    """a * b with a (4, 8) fp32 requiring grad and b (4, 8) bf16 frozen: b only, 64 B; the product is fp32."""
    t = Tape(compute_itemsize=4)
    a, b = t.new((4, 8), 4, True), t.new((4, 8), 2, False)
    out = t.mul(a, b, "mul")
    assert t.saved_total == 64 and out.itemsize == 4


def test_backward_events_and_pending_gradients() -> None:
    """x (4,) fp32 requiring grad. silu(x) saves x (16 B); its backward holds its output's and its input's
    gradients, 16 + 16 = 32 B, beside the 16 B saved by then. Then y * c (c frozen, 16 B saved) with 8 B of
    gradients pending (not made yet when it runs): 16 + 16 - 8 = 24 B beside 32 B saved. The widest moment of
    the replayed backward: max(16 + 32, 32 + 24) = 56 B."""
    t = Tape(compute_itemsize=4)
    mark = t.mark()
    x = t.new((4,), 4, True)
    y = t.unary_saving_input(x, "act")
    t.mul(y, t.new((4,), 4, False), "mul", pending=8)
    assert t.events == [BackwardEvent(16, 32), BackwardEvent(32, 24)]
    assert t.backward_peak(mark) == 56


def test_saved_since_a_mark_in_the_order_saved() -> None:
    t = Tape(compute_itemsize=4)
    t.save(t.new((2,), 4, False), "before")
    mark = t.mark()
    t.save(t.new((3,), 4, False), "b")
    t.save(t.new((1,), 4, False), "a")
    assert [(s.component, s.nbytes) for s in t.saved_since(mark).values()] == [("b", 12), ("a", 4)]


def test_a_cast_to_the_same_dtype_is_the_same_tensor() -> None:
    t = Tape(compute_itemsize=4)
    x = t.new((2, 3), 4, True)
    assert t.cast(x, 4) is x
    assert t.cast(x, 2).storage != x.storage
