"""A map via the provider's Batch API survives its kernel: killed mid-batch, %unity resume NAME in a new kernel
finds the provider's batches in the store, polls them and assembles the result, uploading and submitting nothing
twice."""

import textwrap
import time

from _kernel import Kernel
from batch_server import BatchServer

FIRST = textwrap.dedent(
    """
    %load_ext unity_nb
    import pandas as pd, unity_nb as u
    items = pd.Series([f"item {i}" for i in range(6)], index=[f"k{i}" for i in range(6)], name="text")
    %unity model gpt-4.1-mini --base-url {url}
    says = %unity map items --via batch --batch-poll 0.05 --name says Say {text}
    import dataclasses
    says._rows.settings = dataclasses.replace(says._rows.settings, max_requests=3)  # before its drive starts
    """
)

SECOND = textwrap.dedent(
    """
    %load_ext unity_nb
    import pandas as pd, unity_nb as u
    items = pd.Series([f"item {i}" for i in range(6)], index=[f"k{i}" for i in range(6)], name="text")
    %unity model gpt-4.1-mini --base-url {url}
    """
)


def wait_until(check, timeout=30.0):
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_batch_api_map_resumes_in_a_new_kernel_without_submitting_anything_twice(tmp_path):
    server = BatchServer().start_in_thread()
    server.hold_after = 1  # the first file's batch completes; the second stays in progress
    store = str(tmp_path / "state.db")
    try:
        first = Kernel(env={"UNITY_NB_STORE": store, "OPENAI_API_KEY": "sk-test"})
        try:
            first.run(FIRST.replace("{url}", server.url))
            wait_until(lambda: server.creates == 2)
            first.run("await says.wait_for('provider_batch', lambda e: e.stage == 'created' and e.chunk == 1, "
                      "timeout=20)\nawait says.wait_for('provider_batch', lambda e: e.stage == 'ended', timeout=20)")
        finally:
            first.kill()
        assert server.uploads == 2 and server.creates == 2
        second = Kernel(env={"UNITY_NB_STORE": store, "OPENAI_API_KEY": "sk-test"})
        try:
            second.run(SECOND.replace("{url}", server.url))
            second.run("says = %unity resume says")
            server.hold_after = None
            result = second.value("(await says).tolist()", timeout=60)
            assert result == [f"answer to: Say item {i}" for i in range(6)]
            assert second.value("list((await says).index)") == [f"k{i}" for i in range(6)]
            assert server.uploads == 2 and server.creates == 2 and server.live_calls == 0
        finally:
            second.close()
    finally:
        server.stop_thread()
