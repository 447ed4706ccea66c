"""u.map(..., via="batch") / %unity map --via batch: a map through the provider's Batch API, against a loopback
server implementing the documented endpoints and states (tests/batch_server.py), on both request paths."""

import asyncio
import json

import openai
import pandas as pd
import pytest
from batch_server import BatchServer

import unity_nb as u

_CLIENTS: list = []
"""The openai clients a test made: closed with its server (one left open closed its socket in a later test's
event loop, an 'unclosed transport' that test saw)."""


@pytest.fixture
async def server():
    async with BatchServer() as s:
        try:
            yield s
        finally:
            while _CLIENTS:
                await _CLIENTS.pop().close()


def client_for(server):
    _CLIENTS.append(openai.AsyncOpenAI(api_key="sk-test", base_url=server.url))
    return _CLIENTS[-1]


def model_for(server, path):
    if path == "client":  # a client handed in: the client's own files and batches methods
        return u.OpenAIModel("gpt-4.1-mini", client=client_for(server))
    return u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test")


async def test_the_server_speaks_the_documented_shapes_to_the_openai_package(server):
    client = client_for(server)
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    f = await client.files.create(file=("in.jsonl", json.dumps(line).encode() + b"\n"), purpose="batch")
    assert f.purpose == "batch" and f.status == "processed"
    server.hold = True
    b = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert b.status == "validating" and b.request_counts.total == 1
    b = await client.batches.retrieve(b.id)
    assert b.status == "in_progress"
    b = await client.batches.cancel(b.id)
    assert b.status == "cancelling"
    server.cancel_finishes = 1
    b = await client.batches.retrieve(b.id)
    assert b.status == "cancelled" and b.output_file_id and b.request_counts.completed == 1
    out = json.loads((await client.files.content(b.output_file_id)).content)
    assert out["custom_id"] == "a" and out["response"]["body"]["choices"][0]["message"]["content"] == "answer to: hi"


@pytest.mark.parametrize("path", ["aiohttp", "client"])
async def test_a_thousand_rows_come_back_on_the_input_index_with_no_live_call(server, bus, path):
    items = pd.Series([f"item {i}" for i in range(1000)], index=[f"k{i}" for i in range(1000)], name="text")
    h = u.map(items, "Say {text}", model=model_for(server, path), via="batch", batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 30)
    assert list(result.index) == list(items.index)
    assert result["k7"] == "answer to: Say item 7" and result["k999"] == "answer to: Say item 999"
    assert server.live_calls == 0 and server.uploads == 1 and server.creates == 1
    assert h.progress["done"] == 1000 and h.progress["provider_batch"]["completed"] == 1000
    assert "provider batch (1 file(s)): completed, 1,000 of 1,000 requests done" in h.progress["text"]
    assert "within its 24h window" in h.progress["text"]  # the line the widget shows
    stages = [e.stage for e in h.events if e.kind == "provider_batch"]
    assert stages[:2] == ["uploaded", "created"] and stages[-1] == "ended"
    assert h.rows.counts["finished"] == 1000


def aio(server):
    return model_for(server, "aiohttp")


async def test_rows_in_the_error_file_fail_with_the_providers_message(server, bus):
    server.fail_row = lambda cid, body: "bad row" if cid.startswith("3:") else None
    h = u.map([f"x{i}" for i in range(6)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert result[2] == "answer to: Say x2" and pd.isna(result[3])
    assert "bad row" in result.attrs["reasons"][3] and h.progress["failed"] == 1 and h.progress["done"] == 5


async def test_typed_columns_come_from_the_forced_answer_tool(server, bus):
    h = u.map(["ab", "abcd"], "Describe {value}", model=aio(server), via="batch", columns="topic,size:int",
              batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert list(result.columns) == ["topic", "size"] and result.loc[0, "topic"] == "topic of Describe ab"
    assert result.loc[1, "size"] == len("Describe abcd")


async def test_rows_are_split_at_the_request_and_byte_limits(server, bus):
    h = u.map([f"r{i}" for i in range(25)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01,
              batch_max_requests=10, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert server.uploads == 3 and server.creates == 3
    assert result.tolist() == [f"answer to: Say r{i}" for i in range(25)]
    sizes = [len(f["_content"].splitlines()) for f in server.files.values() if f["purpose"] == "batch"]
    assert sizes == [10, 10, 5]
    before = set(server.files)
    h2 = u.map([f"r{i}" for i in range(6)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01,
               batch_max_bytes=600, bus=bus)
    result = await asyncio.wait_for(h2.result(), 20)
    made = [f for k, f in server.files.items() if k not in before and f["purpose"] == "batch"]
    assert len(made) > 1 and all(f["bytes"] <= 600 for f in made) and result.notna().all()


async def test_stop_cancels_the_providers_batch_and_keeps_what_it_finished(server, bus):
    server.hold, server.cancel_finishes = True, 3
    h = u.map([f"r{i}" for i in range(10)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    await h.wait_for("provider_batch", lambda e: e.stage == "created")
    await asyncio.wait_for(h.stop("enough"), 20)
    assert server.cancels == 1 and h.status == "stopped"
    result = h.results()
    assert result.notna().sum() == 3 and h.progress["stopped"] == 7
    assert "cancelled" in next(iter(r for r in result.attrs["reasons"].values() if r))


async def test_pause_stops_polling_and_resume_goes_on(server, bus):
    server.hold = True
    h = u.map([f"r{i}" for i in range(4)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    await h.wait_for("provider_batch", lambda e: e.stage == "created")
    await h.pause()
    await asyncio.sleep(0.05)  # a look already on its way when the pause came ends
    polls = server.requests.count(("GET", "/v1/batches"))
    await asyncio.sleep(0.3)  # thirty poll intervals: none is made while paused
    assert server.requests.count(("GET", "/v1/batches")) == polls
    server.hold = False
    await h.resume()
    result = await asyncio.wait_for(h.result(), 20)
    assert result.notna().all() and server.creates == 1


async def test_an_expired_batch_fails_its_unfinished_rows_naming_the_expiry(server, bus):
    server.expire, server.expire_after = True, 2
    h = u.map([f"r{i}" for i in range(5)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert result.notna().sum() == 2 and h.progress["failed"] == 3
    assert all("expired" in why and "24h" in why for why in result.attrs["reasons"].values())


async def test_a_batch_that_fails_validation_ends_clearly(server, bus):
    server.fail_validation = "the model is not available for batch"
    h = u.map(["a", "b"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    with pytest.raises(u.UnityError, match="not available for batch"):
        await asyncio.wait_for(h.result(), 20)


@pytest.mark.parametrize("path", ["aiohttp", "client"])
async def test_a_provider_without_the_batch_api_is_one_clear_error_and_no_live_call(server, bus, path):
    server.no_batch_api = True
    h = u.map([f"r{i}" for i in range(5)], "Say {value}", model=model_for(server, path), via="batch",
              batch_poll=0.01, bus=bus)
    with pytest.raises(u.ModelError, match="has no Batch API") as err:
        await asyncio.wait_for(h.result(), 20)
    assert "404" in str(err.value) and server.live_calls == 0 and server.uploads == 0


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "openai client"])
async def test_a_batch_api_moved_to_another_host_is_not_followed_there(server, bus, monkeypatch, fast_path):
    # aiohttp (and the openai client's httpx) followed the 307 with the upload and every header but Authorization
    # (the organisation's among them)
    monkeypatch.setenv("OPENAI_ORG_ID", "org-secret-42")
    async with BatchServer() as elsewhere:
        server.moved_to = elsewhere.url
        async with u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", fast_path=fast_path) as m:
            h = u.map(["a", "b"], "Say {value}", model=m, via="batch", batch_poll=0.01, bus=bus)
            with pytest.raises(u.UnityError, match="another host") as err:
                await asyncio.wait_for(h.result(), 20)
        assert elsewhere.requests == [] and "307" in str(err.value) and "sk-test" not in str(err.value)


async def test_a_map_with_tools_or_a_scripted_model_is_refused_before_anything_is_sent(server, bus):
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    with pytest.raises(u.UserError, match="one request"):
        u.map(["a"], "Say {value}", model=aio(server), via="batch", tools=[lookup], bus=bus)
    with pytest.raises(u.UserError, match="OpenAI-compatible"):
        u.map(["a"], "Say {value}", model=u.ScriptedModel(lambda m, t: "x"), via="batch", bus=bus)
    with pytest.raises(u.UserError, match="via takes"):
        u.map(["a"], "Say {value}", model=aio(server), via="later", bus=bus)
    assert server.requests == []


async def test_the_estimate_is_at_the_batch_price(server):
    live = u.map(["a" * 400] * 10, "Say {value}", model=aio(server), estimate=True)
    batch = u.map(["a" * 400] * 10, "Say {value}", model=aio(server), via="batch", estimate=True)
    price = u.price_of("gpt-4.1-mini")  # genai-prices knows its batch rate: half the live one, as OpenAI lists it
    assert price.batch_input == pytest.approx(price.input / 2) and price.batch_output == pytest.approx(price.output / 2)
    assert batch.dollars == pytest.approx(live.dollars / 2)
    assert "batch price (its batch rate)" in str(batch) and "24h" in str(batch)
    other = u.OpenAIModel("batch-rate-unknown-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-rate-unknown-35", input=1.0, output=2.0)  # no batch rate known: half the live price, said
    guessed = u.map(["a" * 400] * 10, "Say {value}", model=other, via="batch", estimate=True)
    assert "half its live price" in str(guessed)


async def test_an_interjection_reaches_the_rows_not_yet_submitted_and_says_so_for_the_rest(server, bus):
    server.hold = True
    h = u.map([f"r{i}" for i in range(4)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01,
              batch_max_requests=2, bus=bus)
    await h.wait_for("provider_batch", lambda e: e.stage == "created" and e.chunk == 1)
    await h.interject("be brief")
    note = await h.wait_for("notification", lambda e: "not yet submitted" in e.text)
    assert "4 row(s) already with the provider" in note.text
    server.hold = False
    await asyncio.wait_for(h.result(), 20)


async def test_an_operator_runs_via_batch(server, bus):
    server.answer = lambda body: {"role": "assistant", "content": None, "tool_calls": [{
        "id": "c", "type": "function", "function": {"name": "submit_answer", "arguments": json.dumps(
            {"keep": "dog" not in body["messages"][-1]["content"], "reason": "looked"})}}]}
    h = u.filter(["a cat", "a dog", "two cats"], "Is it about cats?", model=aio(server), via="batch",
                 batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert list(result) == ["a cat", "two cats"] and server.live_calls == 0 and server.creates == 1


async def test_answers_go_into_the_result_cache_and_a_later_batch_asks_only_the_rest(server, bus, tmp_path):
    store = u.Store(tmp_path / "cache.db")
    try:
        first = u.map(["a", "b", "c"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, cache=store,
                      bus=bus)
        assert (await asyncio.wait_for(first.result(), 20)).tolist() == [f"answer to: Say {x}" for x in "abc"]
        assert await asyncio.to_thread(first.rows.cache.flush, 10)
        uploads = server.uploads
        again = u.map(["a", "b", "c", "d"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01,
                      cache=store, bus=bus)
        result = await asyncio.wait_for(again.result(), 20)
        assert result.tolist() == [f"answer to: Say {x}" for x in "abcd"]
        assert again.rows.cached == 3 and server.uploads == uploads + 1  # only "d" went to the provider
        lines = [json.loads(x) for f in server.files.values() if f["purpose"] == "batch"
                 for x in f["_content"].splitlines()]
        assert sum(1 for x in lines if "Say d" in json.dumps(x)) == 1 and len(lines) == 4
    finally:
        store.close()


async def test_an_answer_the_provider_cut_is_used_and_never_cached(server, bus, tmp_path):
    cut = {"Say a": "length", "Say b": "content_filter"}  # at the request's max tokens; by a content filter
    server.answer = lambda body: {"role": "assistant", "content": "the answer to " + body["messages"][-1]["content"],
                                  "finish_reason": cut.get(body["messages"][-1]["content"])}
    store = u.Store(tmp_path / "cache.db")
    try:
        for _ in range(2):
            h = u.map(["a", "b", "c"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, cache=store,
                      bus=bus)
            result = await asyncio.wait_for(h.result(), 20)
            assert result.tolist() == [f"the answer to Say {x}" for x in "abc"]
            assert sorted(result.attrs["cut"]) == [0, 1]  # said cut, with what cut them
            assert "finish_reason 'length'" in result.attrs["cut"][0]
            assert "finish_reason 'content_filter'" in result.attrs["cut"][1]
            assert "2 cut off" in h.progress["rows_text"]
            assert await asyncio.to_thread(h.rows.cache.flush, 10)
        assert h.rows.cached == 1  # "c"; "a" and "b" were sent to the provider again
        lines = [json.loads(x) for f in server.files.values() if f["purpose"] == "batch"
                 for x in f["_content"].splitlines()]
        assert sorted(x["body"]["messages"][-1]["content"] for x in lines) == ["Say a", "Say a", "Say b", "Say b",
                                                                              "Say c"]
    finally:
        store.close()


async def test_a_budget_is_applied_before_submitting(server, bus):
    model = u.OpenAIModel("batch-budgeted-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-budgeted-35", input=1_000_000.0, output=1_000_000.0)  # a dollar a token: the budget bites
    # each row is estimated at its prompt's tokens and 50 out, at half the price: a file is cut to what $300 covers
    h = u.map([f"r{i}" for i in range(20)], "Say {value}", model=model, via="batch", batch_poll=0.01,
              budget=300.0, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    sizes = [len(f["_content"].splitlines()) for f in server.files.values() if f["purpose"] == "batch"]
    assert sizes[0] < 20 and sum(sizes) == 20  # the first file cut at the estimate; the rest once it cost less
    assert result.notna().all() and h.spending.spent <= 300 and server.live_calls == 0
    uploads = server.uploads
    tight = u.map([f"s{i}" for i in range(5)], "Say {value}", model=model, via="batch", batch_poll=0.01,
                  budget=10.0, bus=bus)  # not even one row's estimate fits: nothing is sent
    reached = await asyncio.wait_for(tight.wait_for("budget_reached", timeout=20), 25)
    assert "budget" in reached.message and server.uploads == uploads and server.live_calls == 0
    await asyncio.wait_for(tight.stop("enough"), 20)


async def test_a_budget_counts_every_submitted_rows_tokens_out(server, bus):
    model = u.OpenAIModel("batch-budget-out-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-budget-out-35", input=0.0, output=1_000_000.0)  # out alone costs: $0.5 a token at the batch
    server.completion_tokens = 50  # each reply is what the estimate assumes: 50 tokens out, $25 a row
    h = u.map([f"r{i}" for i in range(20)], "Say {value}", model=model, via="batch", batch_poll=0.01, budget=100.0,
              bus=bus)
    await asyncio.wait_for(h.wait_for("budget_reached", timeout=20), 25)
    sizes = [len(f["_content"].splitlines()) for f in server.files.values() if f["purpose"] == "batch"]
    assert sizes == [4] and h.spending.spent == pytest.approx(100.0)  # not 20 rows, $500, for a $100 budget
    await asyncio.wait_for(h.stop("enough"), 20)


async def test_a_budget_counts_the_expected_output_tokens(server, bus):
    model = u.OpenAIModel("batch-budget-expected-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-budget-expected-35", input=0.0, output=1_000_000.0)
    server.completion_tokens = 200
    h = u.map([f"r{i}" for i in range(20)], "Say {value}", model=model, via="batch", batch_poll=0.01, budget=400.0,
              expected_output_tokens=200, bus=bus)  # $100 a row, as the person said: four rows fit
    await asyncio.wait_for(h.wait_for("budget_reached", timeout=20), 25)
    sizes = [len(f["_content"].splitlines()) for f in server.files.values() if f["purpose"] == "batch"]
    assert sizes == [4] and h.spending.spent == pytest.approx(400.0)
    await asyncio.wait_for(h.stop("enough"), 20)


async def test_files_that_cannot_be_read_are_tried_again_then_their_rows_fail_each_with_a_reason(server, bus):
    server.content_status = 500  # the provider's batch completed; its output file cannot be read, ever
    model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_retries=0)
    h = u.map([f"r{i}" for i in range(4)], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
    with pytest.raises(u.UnityError, match=r"every row of the batch failed \(4\).*HTTP 500.*5 tries"):
        await asyncio.wait_for(h.result(), 20)
    assert h.rows.counts["running"] == 0 and h.rows.counts["failed"] == 4
    assert server.requests.count(("GET", "/v1/files/content")) == 5  # one try a look, five looks
    reasons = h.results().attrs["reasons"]
    assert len(reasons) == 4 and all("HTTP 500" in why and "5 tries" in why for why in reasons.values())
    said = [e.text for e in h.events if e.kind == "notification" and "tried again at the next look" in e.text]
    assert len(said) == 4 and "(1 of 5 tries)" in said[0]


async def test_an_output_file_that_cannot_be_read_once_is_read_at_the_next_look(server, bus):
    """The provider did the work (and is paid for it): a download that fails once does not lose its answers."""
    server.content_status = 500
    model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_retries=0)
    h = u.map([f"r{i}" for i in range(4)], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
    await h.wait_for("notification", lambda e: "could not be read" in e.text, timeout=20)
    server.content_status = None
    out = await asyncio.wait_for(h.result(), 20)
    assert out.notna().all() and h.rows.counts["finished"] == 4 and out.attrs["reasons"] == {}


async def test_rows_an_earlier_kernel_submitted_are_not_cached_as_asked_without_its_interjections(server, tmp_path):
    def answer(body):  # what a row says depends on what it was told besides its task
        french = any("French" in str(m.get("content")) for m in body["messages"])
        return {"role": "assistant", "content": ("réponse" if french else "answer") + " to: "
                + body["messages"][0]["content"]}

    server.answer, server.hold = answer, True
    store = u.Store(tmp_path / "state.db")
    try:
        first_bus = u.EventBus()
        store.attach(first_bus)
        first = u.map(["a", "b"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, name="says",
                      bus=first_bus)
        await first.interject("answer in French")  # before its rows are submitted: they are sent with it
        await first.wait_for("provider_batch", lambda e: e.stage == "created", timeout=10)
        await first.pause()  # its kernel dies: the provider's batch is continued by another
        server.hold = False
        bus = u.EventBus()
        store.attach(bus)
        resumed = u.map(["a", "b"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, name="says",
                        bus=bus, batches=u.provider_batches(store, "says"), cache=store)
        assert (await asyncio.wait_for(resumed.result(), 20)).tolist() == ["réponse to: Say a", "réponse to: Say b"]
        assert await asyncio.to_thread(resumed.rows.cache.flush, 10)
        plain = u.map(["a", "b"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, cache=store,
                      bus=bus)  # asked with no interjection: not given the answers to another question
        assert (await asyncio.wait_for(plain.result(), 20)).tolist() == ["answer to: Say a", "answer to: Say b"]
        assert plain.rows.cached == 0
        await asyncio.wait_for(first.stop("done"), 20)
    finally:
        store.close()


async def test_a_reply_that_says_nothing_fails_its_row(server, bus):
    blank = {"Say a": "", "Say b": "  \n"}
    server.answer = lambda body: {"role": "assistant",
                                  "content": blank.get(body["messages"][-1]["content"], "said")}
    h = u.map(["a", "b", "c"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert result.tolist() == [None, None, "said"] and h.rows.counts["failed"] == 2
    assert all("answered nothing" in why for why in result.attrs["reasons"].values())


async def test_a_batch_the_provider_no_longer_has_fails_its_rows_and_is_not_waited_for(server, bus):
    server.forget = True  # each look at the batch is a 404: it was deleted, or the key is another's
    h = u.map([f"r{i}" for i in range(3)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    with pytest.raises(u.UnityError, match="every row of the batch failed"):
        await asyncio.wait_for(h.result(), 20)
    reasons = h.results().attrs["reasons"]
    assert len(reasons) == 3 and all("has no batch batch-" in why and "404" in why for why in reasons.values())


async def test_a_stop_does_not_wait_for_a_batch_the_provider_no_longer_has(server, bus):
    server.hold = True
    h = u.map([f"r{i}" for i in range(3)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01,
              batch_stop_wait=600, bus=bus)
    await h.wait_for("provider_batch", lambda e: e.stage == "created")
    await h.pause()
    server.forget = True
    await asyncio.wait_for(h.stop("enough"), 10)  # not batch_stop_wait
    assert h.status == "stopped" and h.progress["stopped"] == 3
    assert all("has no batch" in why for why in h.results().attrs["reasons"].values())


async def test_rows_kept_from_a_dead_kernel_are_not_taken_again_from_its_provider_batch(server, tmp_path):
    store = u.Store(tmp_path / "state.db")
    try:
        bus = u.EventBus()
        store.attach(bus)
        first = u.map(["a", "b", "c"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, name="says",
                      bus=bus)
        await asyncio.wait_for(first.result(), 20)
        # its kernel died after rows 0 and 1 were committed as finished, before row 2 and the batch's end were
        batches = [e for e in u.provider_batches(store, "says") if e.stage != "ended"]
        done = {k: v for k, v in u.finished_rows(store, "says").items() if json.loads(k)[0] != 2}
        bus = u.EventBus()
        store.attach(bus)
        resumed = u.map(["a", "b", "c"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01,
                        name="says", bus=bus, batches=batches, done=done)
        result = await asyncio.wait_for(resumed.result(), 20)
        assert result.tolist() == [f"answer to: Say {x}" for x in "abc"] and server.uploads == 1
        assert resumed.rows.kept == 2 and resumed.rows.counts["finished"] == 3 and resumed.rows.counts["queued"] == 0
    finally:
        store.close()


async def test_the_budgets_note_projects_at_the_batch_price_and_says_where_it_pauses(server, bus):
    model = u.OpenAIModel("batch-budget-note-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-budget-note-35", input=0.0, output=1_000_000.0)
    server.completion_tokens = 50
    items = [f"r{i}" for i in range(20)]
    assert u.map(items, "Say {value}", model=model, via="batch", estimate=True).dollars == pytest.approx(500.0)
    h = u.map(items, "Say {value}", model=model, via="batch", batch_poll=0.01, budget=300.0, bus=bus)
    assert "$500.00 for 20 rows" in h.spending.note and "after about 12 rows" in h.spending.note
    await asyncio.wait_for(h.wait_for("budget_reached", timeout=20), 25)
    assert sum(len(f["_content"].splitlines()) for f in server.files.values() if f["purpose"] == "batch") == 12
    await asyncio.wait_for(h.stop("enough"), 20)


async def test_what_a_batch_api_run_spent_is_in_the_store_for_a_resume_to_count(server, tmp_path):
    from unity_nb.batch._spend import spent_in_store

    model = u.OpenAIModel("batch-spent-stored-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-spent-stored-35", input=0.0, output=1_000_000.0)
    server.completion_tokens = 50
    store = u.Store(tmp_path / "state.db")
    try:
        bus = u.EventBus()
        store.attach(bus)
        h = u.map(["a", "b", "c"], "Say {value}", model=model, via="batch", batch_poll=0.01, name="says", bus=bus,
                  budget=1000.0)
        await asyncio.wait_for(h.result(), 20)
        server.answer = lambda body: {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c", "type": "function", "function": {"name": "submit_answer", "arguments": json.dumps(
                {"keep": "dog" not in body["messages"][-1]["content"], "reason": "looked"})}}]}
        kept = u.filter(["a cat", "a dog"], "Is it about cats?", model=model, via="batch", batch_poll=0.01,
                        name="cats", bus=bus, budget=1000.0)
        await asyncio.wait_for(kept.result(), 20)
        store.flush()
        assert spent_in_store(store, store.find("says")["uid"]) == (pytest.approx(75.0), [])  # 3 rows, $25 each
        assert spent_in_store(store, store.find("cats")["uid"]) == (pytest.approx(50.0), [])  # its map's rows
    finally:
        store.close()


async def test_a_stop_while_a_file_is_uploaded_ends_its_rows_with_a_reason(server, bus):
    server.upload_delay = 3.0
    h = u.map([f"r{i}" for i in range(3)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    await asyncio.wait_for(server.uploading.wait(), 10)  # the upload is on its way
    await asyncio.wait_for(h.stop("enough"), 20)
    assert h.rows.counts["running"] == 0 and h.rows.counts["stopped"] == 3
    assert all("uploaded" in why for why in h.results().attrs["reasons"].values())


@pytest.mark.parametrize("looks", ["still in progress", "cannot be looked at", "no expires_at"])
async def test_a_provider_batch_long_past_its_window_is_not_waited_for_forever(server, bus, looks):
    server.hold = True  # it never ends
    server.expires_in = -3 * 3600  # its window ended three hours ago (as a clock would have it a day later)
    if looks == "no expires_at":  # its window told only by when it was made and how long it is ("24h")
        server.expires_in, server.created_ago = None, 27 * 3600
    if looks == "cannot be looked at":
        server.look_status = 503
    model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_retries=0)
    h = u.map([f"r{i}" for i in range(3)], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
    with pytest.raises(u.UnityError, match="every row of the batch failed"):
        await asyncio.wait_for(h.result(), 20)
    reasons = h.results().attrs["reasons"]
    assert len(reasons) == 3 and all("passed its 24h window" in why for why in reasons.values())


async def test_a_row_the_provider_answers_twice_fails_saying_so(server, bus):
    server.twice = lambda cid: cid.startswith("1:")  # two lines for row 1, with other answers
    h = u.map(["a", "b", "c"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert result[0] == "answer to: Say a" and pd.isna(result[1]) and result[2] == "answer to: Say c"
    assert "2 results for this row" in result.attrs["reasons"][1]
    assert h.rows.counts["failed"] == 1 and h.spending.usage().output_tokens == 4 * 7  # both of its answers counted


async def test_a_batch_whose_rows_all_fit_the_budget_exactly_ends_with_its_result(server, bus):
    model = u.OpenAIModel("batch-budget-fit-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-budget-fit-35", input=0.0, output=1_000_000.0)
    server.completion_tokens = 50  # $25 a row: four rows spend the budget to the cent
    h = u.map([f"r{i}" for i in range(4)], "Say {value}", model=model, via="batch", batch_poll=0.01, budget=100.0,
              bus=bus)
    assert (await asyncio.wait_for(h.result(), 20)).notna().all() and h.spending.spent == pytest.approx(100.0)


async def test_a_resume_at_its_budget_still_takes_the_rows_an_earlier_kernel_submitted(server, tmp_path):
    model = u.OpenAIModel("batch-budget-resumed-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-budget-resumed-35", input=0.0, output=1_000_000.0)
    server.completion_tokens = 50  # $25 a row
    server.hold_after = 1  # the first file's batch (rows 0, 1) ends; the second's (rows 2, 3) runs on
    server.fail_row = lambda cid, body: "bad luck" if cid.startswith("1:") else None
    store = u.Store(tmp_path / "state.db")
    try:
        bus = u.EventBus()
        store.attach(bus)
        first = u.map(list("abcd"), "Say {value}", model=model, via="batch", batch_poll=0.01, name="says", bus=bus,
                      batch_max_requests=2)
        await first.wait_for("provider_batch", lambda e: e.stage == "ended" and e.chunk == 0, timeout=10)
        await first.wait_for("provider_batch", lambda e: e.stage == "created" and e.chunk == 1, timeout=10)
        await first.pause()  # its kernel dies
        server.fail_row, server.hold_after = None, None
        bus = u.EventBus()
        store.attach(bus)
        # row 1 is sent again and its estimate fits; one more row would not: rows 2 and 3 are with the provider
        resumed = u.map(list("abcd"), "Say {value}", model=model, via="batch", batch_poll=0.01, name="says",
                        bus=bus, batches=u.provider_batches(store, "says"), done=u.finished_rows(store, "says"),
                        budget=30.0)
        result = await asyncio.wait_for(resumed.result(), 20)
        assert result.tolist() == [f"answer to: Say {x}" for x in "abcd"] and server.creates == 3
        await asyncio.wait_for(first.stop("done"), 20)
    finally:
        store.close()


async def test_an_output_line_for_no_row_sent_is_said_not_silently_dropped(server, bus):
    server.stranger = True
    model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_retries=0)
    h = u.map([f"r{i}" for i in range(3)], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
    out = await asyncio.wait_for(h.result(), 20)
    assert out.notna().all()
    said = [e.text for e in h.events if e.kind == "notification" and "for no row waiting" in e.text]
    assert len(said) == 1 and "1 result line(s)" in said[0] and "row-that-was-never-sent" in said[0]


@pytest.mark.parametrize("counts", [{"total": "n/a", "completed": None, "failed": -3}, "lots", [1, 2]])
async def test_request_counts_that_are_not_counts_do_not_fail_the_map(server, bus, counts):
    server.garbled_counts = counts  # what the provider says of its progress: shown, never trusted to be numbers
    model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_retries=0)
    h = u.map([f"r{i}" for i in range(3)], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
    out = await asyncio.wait_for(h.result(), 20)
    assert out.notna().all() and h.rows.counts["finished"] == 3


@pytest.mark.parametrize("path", ["aiohttp", "client"])
async def test_output_files_are_read_as_they_come_in_any_pieces(server, bus, path):
    server.content_piece, server.crlf = 7, True  # lines cut anywhere, CRLF cut between its two bytes too
    h = u.map([f"r{i}" for i in range(30)], "Say {value}", model=model_for(server, path), via="batch",
              batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert result.tolist() == [f"answer to: Say r{i}" for i in range(30)]


@pytest.mark.parametrize("path", ["aiohttp", "client"])
@pytest.mark.parametrize("bomb", ["one endless line", "endless blank lines"])
async def test_a_gzip_bomb_for_an_output_file_fails_the_rows_saying_so_and_is_not_read_whole(server, bus, path,
                                                                                              bomb):
    """The server answers the output file with 64 MiB that gzip makes 64 KiB: the reader stops at what a batch of
    these rows can hold (a line of max_reply_chars, two lines a row), and every row fails saying why, at once."""
    model = model_for(server, path)
    model.max_reply_chars = 1000
    server.content_gzip = (b"x" if bomb == "one endless line" else b"\n") * (64 * 1024 * 1024)
    h = u.map([f"r{i}" for i in range(4)], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
    with pytest.raises(u.UnityError, match="every row of the batch failed"):
        await asyncio.wait_for(h.result(), 30)
    result = h.results()
    assert result.isna().all()
    reasons = result.attrs["reasons"]
    said = "has a line longer than" if bomb == "one endless line" else "has more than 24 lines"
    assert h.progress["failed"] == 4 and reasons and all(said in why for why in reasons.values()), reasons
    assert len(reasons) == 4
    assert server.requests.count(("GET", "/v1/files/content")) == 1  # not read again: it reads the same


async def test_a_gzip_bomb_for_a_look_at_the_batch_is_not_read_whole_and_is_said(server, bus):
    server.look_gzip = b" " * (32 * 1024 * 1024)  # 32 MiB of JSON whitespace, 32 KiB on the wire
    h = u.map(["a", "b"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    said = await h.wait_for("notification", lambda e: "could not be looked at" in e.text, timeout=20)
    assert "longer than 16,777,216 bytes" in said.text and "hostile" in said.text
    server.look_gzip = None  # the server mended: the batch is looked at, and its rows answered
    result = await asyncio.wait_for(h.result(), 20)
    assert result.tolist() == ["answer to: Say a", "answer to: Say b"]


async def test_a_resumed_batch_whose_rows_are_mostly_kept_still_reads_its_whole_output_file(server, tmp_path):
    """The file of a provider batch an earlier kernel submitted holds a line for each of its requests, also for the
    rows a resume keeps (done=): its read is bounded by the requests the file had, not by the rows still waiting."""
    store = u.Store(tmp_path / "state.db")
    items = [f"r{i}" for i in range(40)]
    try:
        bus = u.EventBus()
        store.attach(bus)
        first = u.map(items, "Say {value}", model=aio(server), via="batch", batch_poll=0.01, name="says", bus=bus)
        await asyncio.wait_for(first.result(), 20)
        # its kernel died after 38 rows were committed as finished, before the last two and the batch's end were
        batches = [e for e in u.provider_batches(store, "says") if e.stage != "ended"]
        done = {k: v for k, v in u.finished_rows(store, "says").items() if json.loads(k)[0] < 38}
        bus = u.EventBus()
        store.attach(bus)
        resumed = u.map(items, "Say {value}", model=aio(server), via="batch", batch_poll=0.01, name="says",
                        bus=bus, batches=batches, done=done)
        result = await asyncio.wait_for(resumed.result(), 20)
        assert result.tolist() == [f"answer to: Say {x}" for x in items], result.attrs["reasons"]
        assert server.uploads == 1 and resumed.rows.kept == 38
    finally:
        store.close()


@pytest.mark.parametrize("errors", [[{"message": "line 9 was skipped"}], "some lines were skipped",
                                    {"data": {"message": "skipped"}}, {"data": ["skipped", 3]}])
async def test_errors_in_a_shape_not_the_documented_one_do_not_lose_a_completed_batch(server, bus, errors):
    server.garbled_errors = errors  # a provider's own shape for a batch's errors: said if it can be, never fatal
    model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_retries=0)
    h = u.map([f"r{i}" for i in range(3)], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
    out = await asyncio.wait_for(h.result(), 20)
    assert out.tolist() == [f"answer to: Say r{i}" for i in range(3)] and h.rows.counts["finished"] == 3


async def test_a_failed_batch_whose_errors_are_a_list_fails_its_rows_with_the_providers_message(server, bus):
    server.fail_validation = "ignored"
    server.garbled_errors = [{"code": "invalid_request", "message": "the model is not available for batch"}]
    model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_retries=0)
    h = u.map(["a", "b"], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
    with pytest.raises(u.UnityError, match="not available for batch"):
        await asyncio.wait_for(h.result(), 20)
    assert h.rows.counts["failed"] == 2


async def test_a_look_that_is_not_a_batch_object_is_said_and_looked_at_again(server, bus):
    server.look_gzip = b'["not", "a", "batch"]'  # JSON, but not a Batch object
    h = u.map(["a", "b"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    said = await h.wait_for("notification", lambda e: "could not be looked at" in e.text, timeout=20)
    assert "not a Batch object" in said.text
    server.look_gzip = None
    result = await asyncio.wait_for(h.result(), 20)
    assert result.tolist() == ["answer to: Say a", "answer to: Say b"]


async def test_a_stop_waits_no_longer_than_batch_stop_wait_for_a_provider_that_does_not_answer_its_cancel(server,
                                                                                                        bus):
    server.hold, server.cancel_hold = True, asyncio.Event()  # the cancel is never answered (until the test ends)
    h = u.map([f"r{i}" for i in range(4)], "Say {value}", model=aio(server), via="batch", batch_poll=0.01,
              batch_stop_wait=0.5, bus=bus)  # the model's own timeout (120 s) and retries would wait minutes
    await h.wait_for("provider_batch", lambda e: e.stage == "created", timeout=10)
    try:
        await asyncio.wait_for(h.stop("enough"), 20)
        assert h.status == "stopped" and h.rows.counts["running"] == 0 and h.rows.counts["stopped"] == 4
        reasons = h.results().attrs["reasons"]
        assert all("batch_stop_wait=0.5 s" in why for why in reasons.values()), reasons
    finally:
        server.cancel_hold.set()


async def test_a_completed_batch_whose_files_hold_fewer_results_than_it_counts_is_read_again(server, bus):
    server.files_late = 2  # 'completed', 3 requests done, and no file named yet at the first two looks
    h = u.map(["a", "b", "c"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 20)
    assert result.tolist() == ["answer to: Say a", "answer to: Say b", "answer to: Say c"]
    said = [e.text for e in h.events if e.kind == "notification" and "request_counts" in e.text]
    assert len(said) == 2 and "0 result(s)" in said[0] and "3 request(s) ended" in said[0]


async def test_rows_a_completed_batch_counts_but_its_files_never_hold_fail_saying_so(server, bus):
    server.files_late = 100  # the files never come
    h = u.map(["a", "b"], "Say {value}", model=aio(server), via="batch", batch_poll=0.01, bus=bus)
    with pytest.raises(u.UnityError, match="every row of the batch failed"):
        await asyncio.wait_for(h.result(), 20)
    reasons = h.results().attrs["reasons"]
    assert len(reasons) == 2 and all("no line for this row" in why and "request_counts say 2" in why
                                     and "5 of 5 reads" in why for why in reasons.values()), reasons


async def test_answers_a_resume_cannot_use_are_counted_in_what_it_spent(server, tmp_path):
    """A resume asks its rows under another system prompt: the answers the provider batch it continues gave (to the
    old question) are not used, and the rows are asked again; both were paid for, and both are counted."""
    from unity_nb.batch._spend import spent_in_store

    model = u.OpenAIModel("batch-unused-answers-35", base_url=server.url, api_key="sk-test")
    u.set_price("batch-unused-answers-35", input=0.0, output=1_000_000.0)
    server.completion_tokens, server.hold = 50, True  # $25 an answer at the batch price
    store = u.Store(tmp_path / "state.db")
    try:
        bus = u.EventBus()
        store.attach(bus)
        first = u.map(["a", "b"], "Say {value}", model=model, via="batch", batch_poll=0.01, name="says", bus=bus,
                      system="Be brief.")
        await first.wait_for("provider_batch", lambda e: e.stage == "created", timeout=10)
        await first.pause()  # its kernel dies
        server.hold = False
        bus = u.EventBus()
        store.attach(bus)
        resumed = u.map(["a", "b"], "Say {value}", model=model, via="batch", batch_poll=0.01, name="says", bus=bus,
                        system="Be very brief.", batches=u.provider_batches(store, "says"))
        result = await asyncio.wait_for(resumed.result(), 20)
        assert result.tolist() == ["answer to: Say a", "answer to: Say b"] and server.creates == 2
        assert resumed.cost == pytest.approx(100.0)  # two answers used, two paid for and not used
        said = [e.text for e in resumed.events if e.kind == "notification" and "for no row waiting" in e.text]
        assert len(said) == 1 and "2 result line(s)" in said[0] and "$50.00" in said[0]
        store.flush()
        assert spent_in_store(store, store.find("says")["uid"]) == (pytest.approx(100.0), [])  # a resume counts it
        await asyncio.wait_for(first.stop("done"), 20)
    finally:
        store.close()


@pytest.mark.parametrize("how", ["expired", "never in its files", "gone"])
async def test_rows_the_provider_never_answered_say_how_to_ask_them_again(server, bus, how):
    if how == "expired":
        server.expire, server.expire_after = True, 1  # row 0 answered, the rest expired
    elif how == "never in its files":
        server.files_late = 100
    else:
        server.forget = True  # a look at it: 404
    model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_retries=0)
    h = u.map(["a", "b", "c"], "Say {value}", model=model, via="batch", batch_poll=0.01, name="says", bus=bus)
    try:
        await asyncio.wait_for(h.result(), 20)
    except u.UnityError:
        pass  # every row failed
    reasons = h.results().attrs["reasons"]
    assert len(reasons) == (2 if how == "expired" else 3), reasons
    assert all("%unity resume says" in why and "done=u.finished_rows(store, 'says')" in why
               for why in reasons.values()), reasons
