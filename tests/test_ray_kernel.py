"""``%unity map ... --backend ray`` in a real kernel killed with SIGKILL mid-batch: a new kernel's ``%unity resume``
asks only the rows the store does not hold as finished (its rows run on the same Ray cluster, which both kernels
join through RAY_ADDRESS)."""

import textwrap

import pytest
from _kernel import Kernel
from _ray_cluster import ray_cluster, serve, task_of  # noqa: F401 - fixtures
from fake_openai import Reply

pytestmark = pytest.mark.timeout(600)

ITEMS = "import pandas as pd\nitems = pd.Series([f'row {i}' for i in range(30)], index=[f'r{i}' for i in range(30)])\n"


def test_a_kernel_killed_mid_batch_on_ray_resumes_asking_only_unfinished_rows(ray_cluster, serve, tmp_path):  # noqa: F811
    first_server = serve(lambda body: Reply(content="one " + task_of(body), first_byte_delay=0.5))
    second_server = serve(lambda body: Reply(content="two " + task_of(body)))  # the second kernel's model
    env = {"UNITY_NB_STORE": str(tmp_path / "state.db"), "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    first = Kernel(env=env)
    try:
        first.run("%load_ext unity_nb\n" + ITEMS + f"%unity model ray-m --base-url {first_server.url}\n")
        first.run(textwrap.dedent("""
            labels = %unity map items --backend ray --concurrency 2 --name labels Label {value}
            await labels.wait_for("row_finished", lambda e: labels.rows.counts["finished"] >= 6, timeout=240)
        """), timeout=300)
    finally:
        first.kill()
    second = Kernel(env=env)
    try:
        second.run("%load_ext unity_nb\n" + ITEMS + f"%unity model ray-m --base-url {second_server.url}\n")
        second.run("labels = %unity resume labels", timeout=120)
        result = second.value("(await labels).tolist()", timeout=300)
    finally:
        second.close()
    assert len(result) == 30 and all(result)
    kept = [a for a in result if a.startswith("one ")]
    again = [a for a in result if a.startswith("two ")]
    assert len(kept) >= 6 and len(kept) + len(again) == 30
    asked = sorted(task_of(b) for b in second_server.bodies)
    assert asked == sorted(a.removeprefix("two ") for a in again)  # only the rows not finished, each once
    assert not set(asked) & {a.removeprefix("one ") for a in kept}
