"""``--gpus-per-node G``: the machines a ``--gpus N`` run spans are N / G (issue 19: "says when the run needs more
than one node"); without it, ``--nodes`` or 8 GPUs per node."""

from __future__ import annotations

import pytest

from memfit.cli import main
from memfit.errors import MemfitError
from memfit.estimate import RunSpec
from memfit.estimate.sharding import nodes_needed


def test_nodes_follow_the_node_size() -> None:
    """By hand: 16 GPUs in nodes of 8 span 2 machines, in nodes of 4 span 4, in one node of 16 a single one (the
    8-per-node default said 2); fewer GPUs than a node holds stay on one."""
    assert nodes_needed(RunSpec(method="full", sharding="fsdp", gpus=16)) == 2
    for per_node, nodes in ((8, 2), (4, 4), (16, 1), (32, 1)):
        spec = RunSpec(method="full", sharding="fsdp", gpus=16, gpus_per_node=per_node)
        assert (spec.nodes, nodes_needed(spec)) == (nodes, nodes)
    hybrid = RunSpec(method="full", sharding="hsdp", gpus=16, gpus_per_node=4)
    assert hybrid.nodes == 4 and hybrid.with_(gpus=8).nodes == 2  # derived again from the new world size


@pytest.mark.parametrize("kw, match", [
    ({"gpus": 12, "gpus_per_node": 8}, "make --gpus a multiple of 8"),
    ({"gpus": 16, "gpus_per_node": 0}, "--gpus-per-node must be a positive integer"),
    ({"gpus": 8, "gpus_per_node": 8, "sharding": "hsdp"}, "add --nodes M"),
])
def test_bad_node_sizes_name_the_fix(kw: dict[str, object], match: str) -> None:
    with pytest.raises(MemfitError, match=match):
        RunSpec(**{"method": "full", "sharding": "fsdp", **kw})  # type: ignore[arg-type]


def test_fit_names_the_nodes_from_the_node_size(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B full on 16 x H100-80GB must shard; the advice says how many machines carry the traffic."""
    args = ["fit", "llama-3.1-70b", "--method", "full", "--gpu", "H100-80GB", "--gpus", "16"]
    assert main([*args, "--gpus-per-node", "4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "4 nodes of 4" in out
    assert main([*args, "--gpus-per-node", "16"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "nodes of" not in out
    assert main([*args, "--gpus-per-node", "8", "--nodes", "2"]) == 1
    err = capsys.readouterr().err
    assert "pass one" in err and "Traceback" not in err
