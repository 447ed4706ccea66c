"""``backend="ray"`` against the local backend on rows that end without an answer: each such row ends once, with
the reason it ends with locally, and the batch's counts and money say what the local backend's say (a local Ray
cluster of two worker processes, a loopback OpenAI-compatible server)."""

import asyncio

import pandas as pd
import pytest
from _ray_cluster import ray_cluster, serve, task_of  # noqa: F401 - fixtures
from fake_openai import Reply

import unity_nb as u

pytestmark = pytest.mark.timeout(300)


async def test_a_row_whose_filled_task_is_blank_fails_alone_on_ray_as_locally(ray_cluster, serve):  # noqa: F811
    """Its worker could not start a loop for it: the row was never reported, and the batch waited for it for good."""
    s = serve(lambda body: Reply(content="ok " + task_of(body)))
    model = u.OpenAIModel("ray-m", base_url=s.url)
    items = pd.Series(["a", "", "b", "  "], index=["x", "y", "x", "z"])  # a repeated label too
    local = await asyncio.wait_for(u.map(items, "{value}", model=model).result(), 60)
    on_ray = await asyncio.wait_for(u.map(items, "{value}", model=model, backend="ray").result(), 120)
    pd.testing.assert_series_equal(on_ray, local)
    assert on_ray.attrs == local.attrs and on_ray.tolist() == ["ok a", None, "ok b", None]
    frame = pd.DataFrame({"title": ["", "t1", "t2"]})  # read on the cluster: a block whose first row is blank
    h = u.map(ray_cluster.data.from_pandas(frame), "{title}", model=model, backend="ray")
    got = await asyncio.wait_for(h.result(), 120)
    assert got.tolist() == [None, "ok t1", "ok t2"] and h.rows.counts["failed"] == 1
    assert got.attrs["reasons"][0].startswith("row 0 cannot fill the task: its values make it blank")
    await model.close()


async def test_a_model_without_a_price_leaves_the_cost_unknown_on_ray_not_zero(ray_cluster, serve):  # noqa: F811
    s = serve(lambda body: Reply(content="ok", usage=(1000, 1000)))
    model = u.OpenAIModel("ray-unpriced", base_url=s.url)
    local = u.map(["a", "b", "c"], "Say {value}", model=model)
    on_ray = u.map(["a", "b", "c"], "Say {value}", model=model, backend="ray")
    for h in (local, on_ray):
        assert (await asyncio.wait_for(h.result(), 120)).tolist() == ["ok"] * 3
    assert local.cost is None and on_ray.cost is None  # Ray said $0.00 spent
    assert on_ray.spending.unpriced_models() == local.spending.unpriced_models() == ["ray-unpriced"]
    assert "$ unknown (no price for this model)" in on_ray.progress["text"]
    assert on_ray.tree.usage == local.tree.usage
    await model.close()

