"""The parameter-server strategies on 2 gloo workers (CPU processes)."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from d2lrepro import param_server


def _strategies(rank, world, store, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    mine = torch.arange(6.0) * (rank + 1)  # worker r holds (r + 1) * [0..5]
    gathered, ringed = mine.clone(), mine.clone()
    param_server.gather(gathered)
    param_server.ring(ringed)
    param, grad = torch.zeros(6), torch.ones(6)
    param_server.update_share(param, grad, world, rank)
    alone = torch.zeros(6)
    param_server.update_share(alone, grad, 1, rank)
    rows = param_server.measure(1, 2, torch.device("cpu"))
    torch.save(
        {"gathered": gathered, "ringed": ringed, "param": param, "alone": alone, "rows": rows},
        f"{out}.{rank}",
    )
    dist.destroy_process_group()


def test_every_strategy_gives_every_worker_the_sum(tmp_path):
    mp.spawn(_strategies, args=(2, tmp_path / "store", tmp_path / "out"), nprocs=2)
    got = [torch.load(tmp_path / f"out.{r}", weights_only=False) for r in (0, 1)]
    total = torch.arange(6.0) * 3
    for rank in (0, 1):
        assert torch.equal(got[rank]["gathered"], total) and torch.equal(got[rank]["ringed"], total)
    # Two servers update one half each; one server (rank 0) updates everything.
    assert (
        torch.equal(got[0]["param"][:3], torch.full((3,), -0.1)) and got[0]["param"][3:].eq(0).all()
    )
    assert got[1]["param"][:3].eq(0).all() and torch.equal(
        got[1]["param"][3:], torch.full((3,), -0.1)
    )
    assert got[0]["alone"].eq(-0.1).all() and got[1]["alone"].eq(0).all()


def test_rank_0_reports_every_strategy(tmp_path):
    mp.spawn(_strategies, args=(2, tmp_path / "store", tmp_path / "out"), nprocs=2)
    rows = {r["metric"]: r for r in torch.load(tmp_path / "out.0", weights_only=False)["rows"]}
    assert torch.load(tmp_path / "out.1", weights_only=False)["rows"] == []
    names = {r["metric"] for r in param_server.unmeasured_rows("x")}
    assert set(rows) == names and rows["ps.workers"]["value"] == 2
    for name in ("gather", "ring", "update.n1", "update.n2"):
        assert rows[f"ps.{name}.median_s"]["value"] > 0 and rows[f"ps.{name}.iqr_s"]["value"] >= 0
    assert rows["ps.ring.busbw_gbps"]["value"] > 0
    assert rows["ps.host.median_s"]["status"] == "not applicable"
