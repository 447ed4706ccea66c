"""A run ends with something said: an empty reply is not an answer, a stray call at the last step keeps the
text written beside it, and a stop mid-stream keeps what had streamed (issue 23)."""

import asyncio

import pytest

import unity_nb as u
from unity_nb.store import Store


def lookup(key: str) -> str:
    """Look a key up."""
    return key * 2


def users(messages):
    return [m["content"] for m in messages if m["role"] == "user" and isinstance(m.get("content"), str)]


async def test_an_empty_reply_is_asked_again_and_the_second_reply_is_the_answer(bus):
    def script(messages, tools):
        return "the answer is 4" if any("was empty" in t for t in users(messages)) else ""

    model = u.ScriptedModel(script)
    h = u.start_loop("what is 2 + 2?", model=model, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "the answer is 4"
    assert len(model.requests) == 2
    notes = [m.content for m in h.transcript if m.kind == "notification"]
    assert notes and "empty" in notes[0]


async def test_a_model_that_answers_nothing_twice_fails_the_run_with_the_reason(bus):
    h = u.start_loop("what is 2 + 2?", model=u.ScriptedModel(lambda m, t: u.Reply(content="", finish_reason="stop")),
                     bus=bus)
    with pytest.raises(u.UnityError, match=r"answered nothing \(finish_reason='stop'\)"):
        await asyncio.wait_for(h.result(), 10)
    assert h.status == "failed"


async def test_a_map_row_whose_model_answers_nothing_fails_with_a_reason(bus):
    def script(messages, tools):
        return "" if "row b" in users(messages)[0] else "fine"

    h = u.map(["row a", "row b"], "Say something about", model=u.ScriptedModel(script), bus=bus)
    results = await asyncio.wait_for(h, 20)
    assert results.iloc[0] == "fine"
    assert results.isna().iloc[1]  # no empty string passed off as an answer
    reason = results.attrs["reasons"][1]
    assert reason and "answered nothing" in reason


async def test_text_beside_a_stray_call_at_the_last_step_is_the_answer_and_marked(bus):
    def script(messages, tools):
        if any(m["role"] == "tool" for m in messages):
            return u.Reply(content="a is aa", tool_calls=[u.call_tool("lookup", key="b")])
        return u.call_tool("lookup", key="a")

    h = u.start_loop("find a", model=u.ScriptedModel(script), tools=[lookup], max_steps=2, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "a is aa"
    assert h.tool_calls == 1  # the stray call did not run
    notes = [m.content for m in h.transcript if m.kind == "notification"]
    assert any("did not run" in n and "answer" in n for n in notes)


class _StreamsThenHangs:
    """Streams two pieces, then waits for ever (until cancelled): a reply a stop cuts off."""

    name = "hangs"

    def __init__(self) -> None:
        self.streamed = asyncio.Event()

    async def complete(self, request, on_delta=None):
        on_delta("The tallest mountain ")
        on_delta("is Everest, at")
        self.streamed.set()
        await asyncio.Event().wait()


async def test_a_stop_mid_stream_keeps_the_streamed_text_in_the_transcript_and_the_store(tmp_path):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    model = _StreamsThenHangs()
    h = u.start_loop("tallest mountain?", model=model, bus=bus, name="peak")
    await asyncio.wait_for(model.streamed.wait(), 10)
    await h.wait_for("model_delta", lambda e: "Everest" in e.text)
    await h.stop("enough")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), 10)
    cut = [m for m in h.transcript if m.kind == "interrupted"]
    assert [m.content for m in cut] == ["The tallest mountain is Everest, at"]
    store.flush()
    rebuilt = [(m.kind, m.content) for m in store.transcript("peak")]
    assert ("interrupted", "The tallest mountain is Everest, at") in rebuilt
    store.close()


async def test_estimated_usage_is_said_so_in_the_handle_the_widget_and_a_batch(bus):
    from unity_nb.jupyter._widget import HandleWidget

    guessed = u.ScriptedModel(lambda m, t: u.Reply(content="hi", usage=u.Usage(10, 2, estimated=True)))
    h = u.start_loop("say hi", model=guessed, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "hi"
    assert h.usage.estimated and (h.usage.input_tokens, h.usage.output_tokens) == (10, 2)
    w = HandleWidget(h)
    w.flush()
    assert w.nodes[0]["tokens_estimated"] is True
    batch = u.map(["a", "b"], "say", model=guessed, bus=bus)
    await asyncio.wait_for(batch, 20)
    assert batch.progress["tokens_estimated"] is True and batch.progress["input_tokens"] == 20
    counted = u.ScriptedModel(lambda m, t: u.Reply(content="hi", usage=u.Usage(10, 2)))
    h2 = u.start_loop("say hi", model=counted, bus=bus)
    await asyncio.wait_for(h2.result(), 10)
    assert not h2.usage.estimated


async def test_a_map_row_whose_answer_the_provider_cut_finishes_said_cut(bus, tmp_path):
    cut = {"long": "length", "filtered": "content_filter"}  # the request's max tokens reached; a content filter

    def script(messages, tools):
        word = users(messages)[-1].split()[-1]
        return u.Reply(content=f"the method of {word} is an exp", finish_reason=cut.get(word, "stop"))

    store = Store(str(tmp_path / "state.db"))
    store.attach(bus)
    try:
        h = u.map(["long", "filtered", "whole"], "Label {value}", model=u.ScriptedModel(script), bus=bus,
                  name="labels", concurrency=1)
        result = await asyncio.wait_for(h.result(), 10)
        # each row's answer is used, and the rows the provider cut are said cut (what cut them), the whole one not
        assert result.tolist() == [f"the method of {w} is an exp" for w in ("long", "filtered", "whole")]
        assert sorted(result.attrs["cut"]) == [0, 1]
        assert "max tokens (finish_reason 'length')" in result.attrs["cut"][0]
        assert "content filter (finish_reason 'content_filter')" in result.attrs["cut"][1]
        assert result.attrs["reasons"] == {}  # every row has its answer
        assert "3 done (2 cut off" in h.progress["rows_text"] and "2 cut off" in repr(h)
        assert h.progress["outcome"] == "finished"
        # the store keeps what cut each row beside its answer
        store.flush()
        rows = {e.position: e for e in store.events("labels", kind="row_finished")}
        assert [rows[p].status for p in range(3)] == ["finished"] * 3
        assert "finish_reason 'length'" in rows[0].reason and rows[2].reason is None
    finally:
        store.close()
