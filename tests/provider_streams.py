"""Streamed Chat Completions responses as each provider family sends them, with the reply they mean.

Every stream is the exact server-sent-event text a server writes: a list of event strings,
each ending with its blank line (``"data: {...}\\n\\n"``), comment lines (``": ..."``) and
``event:`` / bare fields where the provider uses them. Each comes with an :class:`Expect`: what
``OpenAIModel.complete`` must return (or the ``ModelError`` it must raise).

The formats are written from each provider's public documentation and SDK behaviour, never
from what ``unity_nb`` does: each family names its sources. Where a source was thin (noted
``UNSURE`` below), the stream follows the closest documented shape.

Every stream carries non-ASCII text (``café ☕ 日本``) in raw UTF-8, so a framing can cut a
chunk inside a multi-byte character.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = (
    "ANSWER",
    "FAMILIES",
    "SCENARIOS",
    "STREAMS",
    "TEXT",
    "THINK",
    "TOOL_NAME",
    "Call",
    "Expect",
    "Family",
    "ProviderStream",
    "stream",
    "streams_for",
)

# ----------------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class Call:
    """One tool call of the reply: ``arguments`` is the JSON text, the streamed pieces joined."""

    name: str
    arguments: str
    id: str
    extra: dict = field(default_factory=dict)  # provider fields to echo back on this call


@dataclass(frozen=True)
class Expect:
    content: str | None = None
    thinking: str | None = None
    refusal: str | None = None
    tool_calls: tuple[Call, ...] = ()
    finish_reason: str | tuple[str, ...] = "stop"  # a tuple: any of these
    usage: tuple[int, int] | None = None  # (input, output); None: not checked
    error: str | None = None  # the stream must raise ModelError containing this ("": any ModelError)


@dataclass(frozen=True)
class Family:
    name: str
    source: str
    # the reasoning field the provider requires back on an assistant turn with tool calls; for
    # every other family no reasoning field may be sent back (most reject unknown message fields)
    echo_reasoning: str | None = None


@dataclass(frozen=True)
class ProviderStream:
    family: str
    scenario: str
    events: tuple[str, ...]
    expect: Expect
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers the provider sends

    @property
    def id(self) -> str:
        return f"{self.family}-{self.scenario}"

    @property
    def text(self) -> str:
        return "".join(self.events)


SCENARIOS = ("text", "tool_call", "parallel_tool_calls", "reasoning", "error")

TOOL_NAME = "get_weather"

TEXT_PIECES = ("Bonjour ! Caf", "é ☕ et ", "日本", " — tout va bien.")
TEXT = "".join(TEXT_PIECES)
THINK_PIECES = ("L'utilisateur dit bonjour", " ; je réponds (naïve ☕)", " — 考える.")
THINK = "".join(THINK_PIECES)
ANSWER_PIECES = ("Voilà", " : 42 ✓ 日本")
ANSWER = "".join(ANSWER_PIECES)

ARGS_TOKYO = '{"city": "東京", "unit": "celsius"}'
ARGS_TOKYO_PIECES = ('{"ci', 'ty": "東', '京", "unit": "cel', 'sius"}')
ARGS_PARIS = '{"city": "Paris", "unit": "celsius"}'
ARGS_PARIS_PIECES = ('{"city": "Par', 'is", "unit": ', '"celsius"}')
ARGS_TOKYO_COMPACT = '{"city":"東京","unit":"celsius"}'
ARGS_PARIS_COMPACT = '{"city":"Paris","unit":"celsius"}'

assert "".join(ARGS_TOKYO_PIECES) == ARGS_TOKYO and "".join(ARGS_PARIS_PIECES) == ARGS_PARIS

DONE = "data: [DONE]\n\n"


def data(obj: object, *, spaced: bool = False) -> str:
    """One ``data:`` event, JSON in raw UTF-8 (``spaced``: Python's default separators, as
    servers written in Python that call ``json.dumps`` send)."""
    text = json.dumps(obj, ensure_ascii=False) if spaced else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n"


def comment(text: str) -> str:
    return f": {text}\n\n"


FAMILIES: dict[str, Family] = {}
STREAMS: dict[tuple[str, str], ProviderStream] = {}


def _family(name: str, source: str, **kw) -> None:
    FAMILIES[name] = Family(name, source, **kw)


def _add(family: str, scenario: str, events: list[str], expect: Expect, headers: dict | None = None) -> None:
    assert (family, scenario) not in STREAMS
    STREAMS[(family, scenario)] = ProviderStream(family, scenario, tuple(events), expect,
                                                 tuple((headers or {}).items()))


def stream(family: str, scenario: str) -> ProviderStream:
    return STREAMS[(family, scenario)]


def streams_for(*scenarios: str) -> list[ProviderStream]:
    """Every family's stream for these scenarios (families without one are left out)."""
    return [s for s in STREAMS.values() if not scenarios or s.scenario in scenarios]


# ===================================================================================== openai
# Sources: OpenAI API reference, "Create chat completion" / "The chat completion chunk object"
# (https://platform.openai.com/docs/api-reference/chat/streaming): deltas with role, content,
# refusal, tool_calls[index, id, type, function{name, arguments}]; finish_reason on a chunk of
# its own; with stream_options.include_usage "an additional chunk will be streamed before the
# data: [DONE] message ... the choices field will always be an empty array", and "usage": null on
# every other chunk; the "obfuscation" field (stream_options.include_obfuscation, on by default).
# An error inside a 200 stream is a data event holding only an "error" object (as recorded from
# the API in coder/aibridge fixtures/openai/chatcompletions/stream_error.txtar; the openai-python
# SDK raises APIError for any data payload with an "error" key).

_family("openai", "https://platform.openai.com/docs/api-reference/chat/streaming")


def _oa_chunk(delta: dict | None, finish: str | None = None, *, choices: list | None = None, usage=None,
              n: int = 0) -> dict:
    chunk = {
        "id": "chatcmpl-BwoiPTGRbKkY5rncfaM0s9KtWrq5N",
        "object": "chat.completion.chunk",
        "created": 1753357673,
        "model": "gpt-4.1-2025-04-14",
        "service_tier": "default",
        "system_fingerprint": "fp_51e1070cf2",
        "choices": choices if choices is not None else [{"index": 0, "delta": delta, "logprobs": None,
                                                         "finish_reason": finish}],
        "usage": usage,
        "obfuscation": "xK9q"[: 1 + n % 4],
    }
    return chunk


def _oa_usage(prompt: int, completion: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0,
                                      "rejected_prediction_tokens": 0},
    }


def _oa_tool_deltas(index: int, call_id: str, args_pieces, *, first_extra: dict | None = None) -> list[dict]:
    head = {"tool_calls": [{"index": index, "id": call_id, "type": "function",
                            "function": {"name": TOOL_NAME, "arguments": ""}}]}
    if first_extra:
        head = {**first_extra, **head}
    return [head] + [{"tool_calls": [{"index": index, "function": {"arguments": p}}]} for p in args_pieces]


def _openai() -> None:
    first = {"role": "assistant", "content": "", "refusal": None}
    ev = [data(_oa_chunk(first))]
    ev += [data(_oa_chunk({"content": p}, n=i)) for i, p in enumerate(TEXT_PIECES)]
    ev += [data(_oa_chunk({}, "stop")), data(_oa_chunk(None, choices=[], usage=_oa_usage(19, 12))), DONE]
    _add("openai", "text", ev, Expect(content=TEXT, usage=(19, 12)))

    deltas = _oa_tool_deltas(0, "call_Q1w2E3r4T5y6", ARGS_TOKYO_PIECES,
                             first_extra={"role": "assistant", "content": None, "refusal": None})
    ev = [data(_oa_chunk(d, n=i)) for i, d in enumerate(deltas)]
    ev += [data(_oa_chunk({}, "tool_calls")), data(_oa_chunk(None, choices=[], usage=_oa_usage(80, 21))), DONE]
    _add("openai", "tool_call", ev, Expect(tool_calls=(Call(TOOL_NAME, ARGS_TOKYO, "call_Q1w2E3r4T5y6"),),
                                           finish_reason="tool_calls", usage=(80, 21)))

    deltas = _oa_tool_deltas(0, "call_AAAA1111", ARGS_PARIS_PIECES,
                             first_extra={"role": "assistant", "content": None, "refusal": None})
    deltas += _oa_tool_deltas(1, "call_BBBB2222", ARGS_TOKYO_PIECES)
    ev = [data(_oa_chunk(d, n=i)) for i, d in enumerate(deltas)]
    ev += [data(_oa_chunk({}, "tool_calls")), data(_oa_chunk(None, choices=[], usage=_oa_usage(80, 40))), DONE]
    _add("openai", "parallel_tool_calls", ev, Expect(
        tool_calls=(Call(TOOL_NAME, ARGS_PARIS, "call_AAAA1111"), Call(TOOL_NAME, ARGS_TOKYO, "call_BBBB2222")),
        finish_reason="tool_calls", usage=(80, 40)))

    # a refusal streams in its own field; content stays null
    refusal = ("I'm sorry, ", "I can't help with that ☕.")
    ev = [data(_oa_chunk({"role": "assistant", "content": None, "refusal": ""}))]
    ev += [data(_oa_chunk({"refusal": p})) for p in refusal]
    ev += [data(_oa_chunk({}, "stop")), data(_oa_chunk(None, choices=[], usage=_oa_usage(15, 9))), DONE]
    _add("openai", "refusal", ev, Expect(content=None, refusal="".join(refusal), usage=(15, 9)))

    ev = [data(_oa_chunk(first))] + [data(_oa_chunk({"content": p})) for p in TEXT_PIECES[:2]]
    ev += [data({"error": {"message": "The server had an error while processing your request. Sorry about that!",
                           "type": "server_error"}}, spaced=True)]
    _add("openai", "error", ev, Expect(error="The server had an error while processing your request"))


# ====================================================================================== azure
# Sources: Azure OpenAI "Content filtering"
# (https://learn.microsoft.com/azure/ai-foundry/openai/concepts/content-filter):
# the first streamed chunk has an empty "choices" list, empty id/model/object, and
# "prompt_filter_results"; every choice carries "content_filter_results"; in asynchronous
# filter mode an annotation chunk (content_filter_results + content_filter_offsets, no "delta")
# arrives after the text. Otherwise the OpenAI chunk format (same service), including the
# include_usage chunk and the in-stream error object.

_family("azure", "https://learn.microsoft.com/azure/ai-foundry/openai/concepts/content-filter")

_AZ_SAFE = {
    "hate": {"filtered": False, "severity": "safe"},
    "self_harm": {"filtered": False, "severity": "safe"},
    "sexual": {"filtered": False, "severity": "safe"},
    "violence": {"filtered": False, "severity": "safe"},
}


def _az_first() -> dict:
    return {
        "choices": [],
        "created": 0,
        "id": "",
        "model": "",
        "object": "",
        "prompt_filter_results": [
            {"prompt_index": 0,
             "content_filter_results": {**_AZ_SAFE, "jailbreak": {"filtered": False, "detected": False}}}
        ],
    }


def _az_chunk(delta: dict | None, finish: str | None = None, *, filters: dict | None = None, usage=None,
              choices=None) -> dict:
    choice = {"content_filter_results": filters if filters is not None else _AZ_SAFE, "delta": delta,
              "finish_reason": finish, "index": 0, "logprobs": None}
    chunk = {
        "choices": choices if choices is not None else [choice],
        "created": 1747000000,
        "id": "chatcmpl-AZ9x7Kq2mNn4",
        "model": "gpt-4o-2024-11-20",
        "obfuscation": "aB",
        "object": "chat.completion.chunk",
        "system_fingerprint": "fp_ee1d74bde0",
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _az_annotation() -> dict:
    return {
        "id": "",
        "object": "",
        "created": 0,
        "model": "",
        "choices": [{"index": 0, "finish_reason": None, "content_filter_results": _AZ_SAFE,
                     "content_filter_offsets": {"check_offset": 0, "start_offset": 0, "end_offset": 58}}],
        "system_fingerprint": None,
    }


def _azure() -> None:
    first = {"content": "", "refusal": None, "role": "assistant"}
    ev = [data(_az_first()), data(_az_chunk(first, filters={}))]
    ev += [data(_az_chunk({"content": p})) for p in TEXT_PIECES]
    ev += [data(_az_chunk({}, "stop", filters={})), data(_az_annotation())]
    ev += [data(_az_chunk(None, choices=[], usage=_oa_usage(24, 14))), DONE]
    _add("azure", "text", ev, Expect(content=TEXT, usage=(24, 14)),
         headers={"apim-request-id": "4f1c0e", "x-ms-region": "Sweden Central"})

    deltas = _oa_tool_deltas(0, "call_az_7HkQ", ARGS_TOKYO_PIECES, first_extra={"role": "assistant", "content": None})
    ev = [data(_az_first())] + [data(_az_chunk(d, filters={})) for d in deltas]
    ev += [data(_az_chunk({}, "tool_calls", filters={})), data(_az_chunk(None, choices=[], usage=_oa_usage(90, 22))),
           DONE]
    _add("azure", "tool_call", ev,
         Expect(tool_calls=(Call(TOOL_NAME, ARGS_TOKYO, "call_az_7HkQ"),), finish_reason="tool_calls", usage=(90, 22)))

    deltas = _oa_tool_deltas(0, "call_az_P1", ARGS_PARIS_PIECES, first_extra={"role": "assistant", "content": None})
    deltas += _oa_tool_deltas(1, "call_az_T2", ARGS_TOKYO_PIECES)
    ev = [data(_az_first())] + [data(_az_chunk(d, filters={})) for d in deltas]
    ev += [data(_az_chunk({}, "tool_calls", filters={})), data(_az_chunk(None, choices=[], usage=_oa_usage(90, 44))),
           DONE]
    _add("azure", "parallel_tool_calls", ev, Expect(
        tool_calls=(Call(TOOL_NAME, ARGS_PARIS, "call_az_P1"), Call(TOOL_NAME, ARGS_TOKYO, "call_az_T2")),
        finish_reason="tool_calls", usage=(90, 44)))

    ev = [data(_az_first()), data(_az_chunk(first, filters={}))]
    ev += [data(_az_chunk({"content": p})) for p in TEXT_PIECES[:2]]
    ev += [data({"error": {"message": "The server had an error processing your request. Sorry about that! "
                                      "You can retry your request.",
                           "type": "server_error", "param": None, "code": None}})]
    _add("azure", "error", ev, Expect(error="The server had an error processing your request"))


# ===================================================================================== gemini
# Sources: "OpenAI compatibility" (https://ai.google.dev/gemini-api/docs/openai) and "Thought
# signatures" (https://ai.google.dev/gemini-api/docs/thought-signatures), whose OpenAI section
# puts the signature on a tool call as extra_content.google.thought_signature, to be sent back
# as received; with parallel calls only the first call carries one. Captured streams
# (noho/dayu-agent issue #45 and PR #91; open-webui/computer issue #224): tool-call deltas have
# no "index"; each call comes whole in one delta; parallel calls come one per chunk (or together
# in one delta); a tool-call reply may finish with "stop" rather than "tool_calls"; the
# arguments of one call may also be split over indexless deltas, the continuation carrying no
# id. Every delta repeats "role"; usage rides on the last chunk.
# UNSURE: the in-stream error: Google's error object (code, message, status), as its HTTP errors
# carry it, sent as a data event.

_family("gemini",
        "https://ai.google.dev/gemini-api/docs/openai ; https://ai.google.dev/gemini-api/docs/thought-signatures")

SIG_1 = "CiQBz0HtIm827fQXv7b+Q0jT1Yd9sIqV2bLJ5kZ8W3uXo0a1dGhRvb3Q="
SIG_2 = "EjQKMgEMOdbHJChLX75QUCJjyYlmZ2E3cGh5c2ljcw=="


def _gm_chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> dict:
    choice = {"delta": delta, "index": 0}
    if finish is not None:
        choice["finish_reason"] = finish
    chunk = {"choices": [choice], "created": 1761000000, "id": "Il0taoSYJ5Cez7", "model": "gemini-3-flash-preview",
             "object": "chat.completion.chunk"}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _gm_usage(p: int, c: int) -> dict:
    return {"completion_tokens": c, "prompt_tokens": p, "total_tokens": p + c}


def _gm_call(call_id: str, args: str, sig: str | None) -> dict:
    call = {"function": {"arguments": args, "name": TOOL_NAME}, "id": call_id, "type": "function"}
    if sig is not None:
        call = {"extra_content": {"google": {"thought_signature": sig}}, **call}
    return call


def _gemini() -> None:
    ev = [data(_gm_chunk({"content": p, "role": "assistant"})) for p in TEXT_PIECES]
    ev += [data(_gm_chunk({"content": "", "role": "assistant"}, "stop", _gm_usage(12, 11))), DONE]
    _add("gemini", "text", ev, Expect(content=TEXT, usage=(12, 11)))

    extra1 = {"extra_content": {"google": {"thought_signature": SIG_1}}}
    ev = [data(_gm_chunk({"role": "assistant", "tool_calls": [_gm_call("jm4owj31", ARGS_TOKYO_COMPACT, SIG_1)]}))]
    ev += [data(_gm_chunk({"content": "", "role": "assistant"}, "tool_calls", _gm_usage(70, 18))), DONE]
    _add("gemini", "tool_call", ev, Expect(tool_calls=(Call(TOOL_NAME, ARGS_TOKYO_COMPACT, "jm4owj31", extra1),),
                                           finish_reason="tool_calls", usage=(70, 18)))

    # one call, its arguments over two indexless deltas: the continuation has no id
    head = _gm_call("function-call-8123", '{"city":', SIG_1)
    ev = [data(_gm_chunk({"role": "assistant", "tool_calls": [head]})),
          data(_gm_chunk({"role": "assistant",
                          "tool_calls": [{"function": {"arguments": '"東京","unit":"celsius"}'}}]})),
          data(_gm_chunk({"content": "", "role": "assistant"}, "tool_calls", _gm_usage(70, 18))), DONE]
    _add("gemini", "tool_call_split", ev,
         Expect(tool_calls=(Call(TOOL_NAME, ARGS_TOKYO_COMPACT, "function-call-8123", extra1),),
                finish_reason="tool_calls", usage=(70, 18)))

    # parallel calls, one per chunk, neither with an index: they must stay two calls;
    # only the first carries the signature; the reply finishes with "stop"
    ev = [data(_gm_chunk({"role": "assistant", "tool_calls": [_gm_call("a1b2c3d4", ARGS_PARIS_COMPACT, SIG_1)]})),
          data(_gm_chunk({"role": "assistant", "tool_calls": [_gm_call("e5f6g7h8", ARGS_TOKYO_COMPACT, None)]})),
          data(_gm_chunk({"content": "", "role": "assistant"}, "stop", _gm_usage(70, 30))), DONE]
    _add("gemini", "parallel_tool_calls", ev, Expect(
        tool_calls=(Call(TOOL_NAME, ARGS_PARIS_COMPACT, "a1b2c3d4", extra1),
                    Call(TOOL_NAME, ARGS_TOKYO_COMPACT, "e5f6g7h8")),
        finish_reason=("tool_calls", "stop"), usage=(70, 30)))

    # both parallel calls in one delta, still without an index
    ev = [data(_gm_chunk({"role": "assistant", "tool_calls": [_gm_call("p9q8r7s6", ARGS_PARIS_COMPACT, SIG_2),
                                                                 _gm_call("t5u4v3w2", ARGS_TOKYO_COMPACT, None)]})),
          data(_gm_chunk({"content": "", "role": "assistant"}, "tool_calls", _gm_usage(70, 30))), DONE]
    _add("gemini", "parallel_same_chunk", ev, Expect(
        tool_calls=(Call(TOOL_NAME, ARGS_PARIS_COMPACT, "p9q8r7s6",
                         {"extra_content": {"google": {"thought_signature": SIG_2}}}),
                    Call(TOOL_NAME, ARGS_TOKYO_COMPACT, "t5u4v3w2")),
        finish_reason="tool_calls", usage=(70, 30)))

    ev = [data(_gm_chunk({"content": p, "role": "assistant"})) for p in TEXT_PIECES[:2]]
    ev += [data({"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                           "status": "UNAVAILABLE"}})]
    _add("gemini", "error", ev, Expect(error="The model is overloaded"))


# ==================================================================================== mistral
# Sources: "Reasoning" (https://docs.mistral.ai/capabilities/reasoning/) and the SDK example
# mistralai/client-python examples/mistral/chat/reasoning_with_streaming.py: "While the model is
# thinking, delta.content is a list containing a ThinkChunk. After the thinking phase ends,
# delta.content arrives as plain string fragments. The transition event may contain both a
# closing ThinkChunk and the first TextChunk in a single list." A ThinkChunk is
# {"type": "thinking", "thinking": [{"type": "text", "text": ...}]}. Plain streams
# (M-Lai-ai/LLM-Provider-reference Mistral/streaming.md, recorded from the API): a first
# {"role": "assistant", "content": ""} delta; usage on the chunk that carries finish_reason;
# tool calls come whole, with an index, on the finishing chunk (9-character ids). A generation
# that fails after the stream started ends with finish_reason "error" (the API's FinishReason
# includes "error": mistralai/client-python issue #74, where the SDK of the day rejected it).

_family("mistral",
        "https://docs.mistral.ai/capabilities/reasoning/ ; "
        "mistralai/client-python examples/mistral/chat/reasoning_with_streaming.py")


def _ms_chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> dict:
    chunk = {"id": "f798ebd5c41a45d88bb079635121cade", "object": "chat.completion.chunk", "created": 1732548656,
             "model": "magistral-medium-2509", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _ms_usage(p: int, c: int) -> dict:
    return {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}


def _think(text: str) -> dict:
    return {"type": "thinking", "thinking": [{"type": "text", "text": text}]}


def _ms_thinking() -> list[str]:
    ev = [data(_ms_chunk({"role": "assistant", "content": ""}))]
    ev += [data(_ms_chunk({"content": [_think(p)]})) for p in THINK_PIECES]
    return ev


def _mistral() -> None:
    ev = [data(_ms_chunk({"role": "assistant", "content": ""}))]
    ev += [data(_ms_chunk({"content": p})) for p in TEXT_PIECES]
    ev += [data(_ms_chunk({"content": ""}, "stop", _ms_usage(10, 12))), DONE]
    _add("mistral", "text", ev, Expect(content=TEXT, usage=(10, 12)))

    ev = [data(_ms_chunk({"role": "assistant", "content": ""}))]
    ev += [data(_ms_chunk({"content": [_think(p)]})) for p in THINK_PIECES[:-1]]
    # the transition event: the last thinking piece and the first answer text in one list
    ev += [data(_ms_chunk({"content": [_think(THINK_PIECES[-1]), {"type": "text", "text": ANSWER_PIECES[0]}]}))]
    ev += [data(_ms_chunk({"content": p})) for p in ANSWER_PIECES[1:]]
    ev += [data(_ms_chunk({"content": ""}, "stop", _ms_usage(30, 60))), DONE]
    _add("mistral", "reasoning", ev, Expect(content=ANSWER, thinking=THINK, usage=(30, 60)))

    ev = _ms_thinking()
    ev += [data(_ms_chunk({"tool_calls": [{"id": "D681PevKs", "function": {"name": TOOL_NAME, "arguments": ARGS_TOKYO},
                                           "index": 0}]},
                          "tool_calls", _ms_usage(95, 70))), DONE]
    _add("mistral", "tool_call", ev, Expect(thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_TOKYO, "D681PevKs"),),
                                            finish_reason="tool_calls", usage=(95, 70)))

    ev = _ms_thinking()
    ev += [data(_ms_chunk({"tool_calls": [{"id": "Xq1Pz8RtA", "function": {"name": TOOL_NAME, "arguments": ARGS_PARIS},
                                           "index": 0},
                                          {"id": "Lm2Nb7VcS", "function": {"name": TOOL_NAME, "arguments": ARGS_TOKYO},
                                           "index": 1}]},
                          "tool_calls", _ms_usage(95, 90))), DONE]
    _add("mistral", "parallel_tool_calls", ev, Expect(
        thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_PARIS, "Xq1Pz8RtA"), Call(TOOL_NAME, ARGS_TOKYO, "Lm2Nb7VcS")),
        finish_reason="tool_calls", usage=(95, 90)))

    # a generation that fails part-way ends with finish_reason "error" (no message comes with it)
    ev = [data(_ms_chunk({"role": "assistant", "content": ""}))]
    ev += [data(_ms_chunk({"content": p})) for p in TEXT_PIECES[:2]]
    ev += [data(_ms_chunk({"content": ""}, "error", _ms_usage(10, 5))), DONE]
    _add("mistral", "error", ev, Expect(error=""))


# =================================================================================== deepseek
# Sources: "Thinking Mode" (https://api-docs.deepseek.com/guides/thinking_mode): the chain of
# thought streams in delta.reasoning_content beside content (content null meanwhile); "for
# turns that do perform tool calls, the reasoning_content must be fully passed back to the API
# in all subsequent requests" or the API answers 400. "Rate limit"
# (https://api-docs.deepseek.com/quick_start/rate_limit): while a request waits, a streaming
# response "continuously return[s] SSE keep-alive comments (: keep-alive)". Usage: the
# include_usage chunk with empty choices (the OpenAI convention the API documents), with
# prompt_cache_hit_tokens / prompt_cache_miss_tokens.
# UNSURE: the in-stream error: no documented shape; the OpenAI one is used.

_family("deepseek",
        "https://api-docs.deepseek.com/guides/thinking_mode ; https://api-docs.deepseek.com/quick_start/rate_limit",
        echo_reasoning="reasoning_content")


def _ds_chunk(delta: dict | None, finish: str | None = None, *, choices=None, usage=None) -> dict:
    chunk = {"id": "5d9e8a0c-4f2b-4b8e-9a77-0e3c1d2f7b61", "object": "chat.completion.chunk", "created": 1745000000,
             "model": "deepseek-v4-pro", "system_fingerprint": "fp_8802369eaa_prod0425fp8",
             "choices": choices if choices is not None else [{"index": 0, "delta": delta, "logprobs": None,
                                                              "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _ds_usage(p: int, c: int) -> dict:
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 20}, "prompt_cache_hit_tokens": 0,
            "prompt_cache_miss_tokens": p}


def _ds_thinking() -> list[str]:
    ev = [comment("keep-alive"), comment("keep-alive"),
          data(_ds_chunk({"role": "assistant", "content": None, "reasoning_content": ""}))]
    ev += [data(_ds_chunk({"content": None, "reasoning_content": p})) for p in THINK_PIECES]
    return ev


def _deepseek() -> None:
    ev = [comment("keep-alive"), data(_ds_chunk({"role": "assistant", "content": ""}))]
    ev += [data(_ds_chunk({"content": p})) for p in TEXT_PIECES]
    ev += [data(_ds_chunk({"content": ""}, "stop")), data(_ds_chunk(None, choices=[], usage=_ds_usage(14, 12))), DONE]
    _add("deepseek", "text", ev, Expect(content=TEXT, usage=(14, 12)))

    ev = _ds_thinking()
    ev += [data(_ds_chunk({"content": p, "reasoning_content": None})) for p in ANSWER_PIECES]
    ev += [data(_ds_chunk({"content": ""}, "stop")), data(_ds_chunk(None, choices=[], usage=_ds_usage(20, 50))), DONE]
    _add("deepseek", "reasoning", ev, Expect(content=ANSWER, thinking=THINK, usage=(20, 50)))

    ev = _ds_thinking()
    deltas = _oa_tool_deltas(0, "call_00_ds7Kq2Wm", ARGS_TOKYO_PIECES)
    ev += [data(_ds_chunk({"content": None, "reasoning_content": None, **d})) for d in deltas]
    ev += [data(_ds_chunk({"content": ""}, "tool_calls")), data(_ds_chunk(None, choices=[], usage=_ds_usage(120, 60))),
           DONE]
    _add("deepseek", "tool_call", ev,
         Expect(thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_TOKYO, "call_00_ds7Kq2Wm"),),
                finish_reason="tool_calls", usage=(120, 60)))

    ev = _ds_thinking()
    deltas = _oa_tool_deltas(0, "call_00_dsPAR", ARGS_PARIS_PIECES)
    deltas += _oa_tool_deltas(1, "call_01_dsTOK", ARGS_TOKYO_PIECES)
    ev += [data(_ds_chunk({"content": None, "reasoning_content": None, **d})) for d in deltas]
    ev += [data(_ds_chunk({"content": ""}, "tool_calls")), data(_ds_chunk(None, choices=[], usage=_ds_usage(120, 80))),
           DONE]
    _add("deepseek", "parallel_tool_calls", ev, Expect(
        thinking=THINK,
        tool_calls=(Call(TOOL_NAME, ARGS_PARIS, "call_00_dsPAR"), Call(TOOL_NAME, ARGS_TOKYO, "call_01_dsTOK")),
        finish_reason="tool_calls", usage=(120, 80)))

    ev = [data(_ds_chunk({"role": "assistant", "content": ""}))]
    ev += [data(_ds_chunk({"content": p})) for p in TEXT_PIECES[:2]]
    ev += [data({"error": {"message": "Server overloaded, please try again later.", "type": "server_error",
                           "param": None, "code": "server_error"}})]
    _add("deepseek", "error", ev, Expect(error="Server overloaded, please try again later."))


# ======================================================================================= groq
# Sources: API reference "Create chat completion" (https://console.groq.com/docs/api-reference#chat-create)
# and "Text generation" (https://console.groq.com/docs/text-chat): chunks carry an "x_groq"
# object (its request id on the first chunk); the usage of a stream arrives in x_groq.usage on
# the last chunk, not in a top-level "usage". "Reasoning" (https://console.groq.com/docs/reasoning):
# with reasoning_format "parsed" the thinking streams in delta.reasoning. Tool calls come whole
# in one delta. Errors inside a stream come as an "event: error" SSE event whose data holds an
# "error" object (sashabaranov/go-openai PR #1057 "handle SSE error events from providers like
# Groq"; groq-python "handle streaming error"), e.g. code "tool_use_failed" with
# "failed_generation".

_family("groq", "https://console.groq.com/docs/api-reference#chat-create ; https://console.groq.com/docs/reasoning")


def _gq_chunk(delta: dict, finish: str | None = None, *, x_groq: dict | None = None) -> dict:
    chunk = {"id": "chatcmpl-3b5e0c8a-6f1d-4c9e-b2a7-91d0e4f3c2aa", "object": "chat.completion.chunk",
             "created": 1750500000,
             "model": "openai/gpt-oss-120b", "system_fingerprint": "fp_ed9190d8b7",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if x_groq is not None:
        chunk["x_groq"] = x_groq
    return chunk


def _gq_last(finish: str, p: int, c: int) -> dict:
    usage = {"queue_time": 0.021, "prompt_tokens": p, "prompt_time": 0.004, "completion_tokens": c,
             "completion_time": 0.06,
             "total_tokens": p + c, "total_time": 0.064}
    return _gq_chunk({}, finish, x_groq={"id": "req_01jx3k9v8sf2qbt7y8m4c5d6e7", "usage": usage})


def _gq_first(delta: dict | None = None) -> str:
    return data(_gq_chunk(delta or {"role": "assistant", "content": ""},
                          x_groq={"id": "req_01jx3k9v8sf2qbt7y8m4c5d6e7"}))


def _groq() -> None:
    hdr = {"x-groq-region": "dls", "x-request-id": "req_01jx3k9v8sf2qbt7y8m4c5d6e7"}
    ev = [_gq_first()] + [data(_gq_chunk({"content": p})) for p in TEXT_PIECES]
    ev += [data(_gq_last("stop", 18, 12)), DONE]
    _add("groq", "text", ev, Expect(content=TEXT, usage=(18, 12)), headers=hdr)

    think = [data(_gq_chunk({"reasoning": p})) for p in THINK_PIECES]
    ev = [_gq_first()] + think + [data(_gq_chunk({"content": p})) for p in ANSWER_PIECES]
    ev += [data(_gq_last("stop", 25, 48)), DONE]
    _add("groq", "reasoning", ev, Expect(content=ANSWER, thinking=THINK, usage=(25, 48)), headers=hdr)

    call = {"id": "fc_3f9a2b1c-7d8e", "type": "function",
            "function": {"name": TOOL_NAME, "arguments": ARGS_TOKYO_COMPACT}, "index": 0}
    ev = [_gq_first()] + think + [data(_gq_chunk({"tool_calls": [call]})), data(_gq_last("tool_calls", 140, 55)), DONE]
    _add("groq", "tool_call", ev,
         Expect(thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_TOKYO_COMPACT, "fc_3f9a2b1c-7d8e"),),
                finish_reason="tool_calls", usage=(140, 55)), headers=hdr)

    calls = [{"id": "fc_paris01", "type": "function", "function": {"name": TOOL_NAME, "arguments": ARGS_PARIS_COMPACT},
              "index": 0},
             {"id": "fc_tokyo02", "type": "function", "function": {"name": TOOL_NAME, "arguments": ARGS_TOKYO_COMPACT},
              "index": 1}]
    ev = [_gq_first()] + think + [data(_gq_chunk({"tool_calls": calls})), data(_gq_last("tool_calls", 140, 70)), DONE]
    _add("groq", "parallel_tool_calls", ev, Expect(
        thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_PARIS_COMPACT, "fc_paris01"),
                                    Call(TOOL_NAME, ARGS_TOKYO_COMPACT, "fc_tokyo02")),
        finish_reason="tool_calls", usage=(140, 70)), headers=hdr)

    err = {"error": {"message": "Failed to call a function. Please adjust your prompt. "
                                "See 'failed_generation' for more details.",
                     "type": "invalid_request_error", "code": "tool_use_failed",
                     "failed_generation": '<function=get_weather>{"city": "東京"}</function>'}}
    ev = [_gq_first()] + [data(_gq_chunk({"content": p})) for p in TEXT_PIECES[:2]]
    ev += ["event: error\n" + data(err)]
    _add("groq", "error", ev, Expect(error="Failed to call a function"), headers=hdr)


# ================================================================================= openrouter
# Sources: "Streaming" (https://openrouter.ai/docs/api-reference/streaming): SSE comments
# ": OPENROUTER PROCESSING" keep the connection alive and must be skipped; an error after the
# stream started is a data event with a top-level "error" ({code, message}) beside a choice with
# finish_reason "error", HTTP status still 200. "Reasoning tokens"
# (https://openrouter.ai/docs/use-cases/reasoning-tokens): thinking streams in delta.reasoning
# (with reasoning_details). "Usage accounting": the last chunk carries usage (with cost) and an
# empty choices list. A tool-call reply may repeat its finishing chunk (QwenLM/qwen-code #2402:
# "OpenRouter sends two consecutive SSE chunks with finish_reason: tool_calls").

_family("openrouter",
        "https://openrouter.ai/docs/api-reference/streaming ; https://openrouter.ai/docs/use-cases/reasoning-tokens")


def _or_chunk(delta: dict | None, finish: str | None = None, *, choices=None, usage=None) -> dict:
    chunk = {"id": "gen-1761000000-Rk2bQ9sY4xWm", "provider": "DeepInfra", "model": "qwen/qwen3-235b-a22b",
             "object": "chat.completion.chunk", "created": 1761000000,
             "choices": choices if choices is not None else [
                 {"index": 0, "delta": delta, "finish_reason": finish, "native_finish_reason": finish,
                  "logprobs": None}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _or_usage(p: int, c: int) -> dict:
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c, "cost": 0.000213, "is_byok": False,
            "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 30}}


def _or_thinking() -> list[str]:
    ev = [comment("OPENROUTER PROCESSING"), comment("OPENROUTER PROCESSING")]
    for i, p in enumerate(THINK_PIECES):
        ev.append(data(_or_chunk({"role": "assistant", "content": "", "reasoning": p,
                                  "reasoning_details": [{"type": "reasoning.text", "text": p, "format": "unknown",
                                                         "index": 0}]})))
        if i == 1:
            ev.append(comment("OPENROUTER PROCESSING"))
    return ev


def _openrouter() -> None:
    hdr = {"X-Generation-Id": "gen-1761000000-Rk2bQ9sY4xWm"}
    ev = [comment("OPENROUTER PROCESSING"), comment("OPENROUTER PROCESSING")]
    ev += [data(_or_chunk({"role": "assistant", "content": p, "reasoning": None})) for p in TEXT_PIECES]
    ev += [data(_or_chunk({"role": "assistant", "content": ""}, "stop")),
           data(_or_chunk(None, choices=[], usage=_or_usage(16, 12))), DONE]
    _add("openrouter", "text", ev, Expect(content=TEXT, usage=(16, 12)), headers=hdr)

    ev = _or_thinking()
    ev += [data(_or_chunk({"role": "assistant", "content": p, "reasoning": None})) for p in ANSWER_PIECES]
    ev += [data(_or_chunk({"role": "assistant", "content": ""}, "stop")),
           data(_or_chunk(None, choices=[], usage=_or_usage(20, 55))), DONE]
    _add("openrouter", "reasoning", ev, Expect(content=ANSWER, thinking=THINK, usage=(20, 55)), headers=hdr)

    deltas = _oa_tool_deltas(0, "call_or_9fK2", ARGS_TOKYO_PIECES)
    ev = _or_thinking() + [data(_or_chunk({"role": "assistant", "content": "", **d})) for d in deltas]
    finish = data(_or_chunk({"role": "assistant", "content": ""}, "tool_calls"))
    ev += [finish, finish, data(_or_chunk(None, choices=[], usage=_or_usage(110, 60))), DONE]
    _add("openrouter", "tool_call", ev,
         Expect(thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_TOKYO, "call_or_9fK2"),),
                finish_reason="tool_calls", usage=(110, 60)), headers=hdr)

    deltas = _oa_tool_deltas(0, "call_or_P", ARGS_PARIS_PIECES) + _oa_tool_deltas(1, "call_or_T", ARGS_TOKYO_PIECES)
    ev = _or_thinking() + [data(_or_chunk({"role": "assistant", "content": "", **d})) for d in deltas]
    ev += [finish, data(_or_chunk(None, choices=[], usage=_or_usage(110, 80))), DONE]
    _add("openrouter", "parallel_tool_calls", ev, Expect(
        thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_PARIS, "call_or_P"), Call(TOOL_NAME, ARGS_TOKYO, "call_or_T")),
        finish_reason="tool_calls", usage=(110, 80)), headers=hdr)

    ev = [comment("OPENROUTER PROCESSING")]
    ev += [data(_or_chunk({"role": "assistant", "content": p})) for p in TEXT_PIECES[:2]]
    ev += [data({"id": "gen-1761000000-Rk2bQ9sY4xWm", "object": "chat.completion.chunk", "created": 1761000000,
                 "model": "qwen/qwen3-235b-a22b", "provider": "DeepInfra",
                 "error": {"code": "server_error", "message": "Provider disconnected unexpectedly"},
                 "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]})]
    _add("openrouter", "error", ev, Expect(error="Provider disconnected unexpectedly"), headers=hdr)


# ===================================================================================== ollama
# Sources: "OpenAI compatibility" (https://github.com/ollama/ollama/blob/main/docs/openai.md);
# recorded chunks (g0t4/ask-openai.nvim lua/ask-openai/backends/ollama/notes/sses.md):
# "system_fingerprint": "fp_ollama", every delta repeats role and content, tool calls come whole
# in one delta with an index and a "call_xxxxxxxx" id, parallel calls one chunk each (index 0,
# 1), then a finishing chunk. Thinking models stream delta.reasoning. usage: the include_usage
# chunk with empty choices. An error inside the stream: middleware/openai.go BaseWriter.writeError
# encodes {"error": {"message", "type": "api_error", "param": null, "code": null}} straight into
# the event-stream body: a bare JSON line, no "data:" prefix, no [DONE] after it.

_family("ollama", "https://github.com/ollama/ollama/blob/main/docs/openai.md ; ollama middleware/openai.go")


def _ol_chunk(delta: dict | None, finish: str | None = None, *, choices=None, usage=None) -> dict:
    chunk = {"id": "chatcmpl-838", "object": "chat.completion.chunk", "created": 1744438886, "model": "qwen3:8b",
             "system_fingerprint": "fp_ollama",
             "choices": choices if choices is not None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _ol_usage(p: int, c: int) -> dict:
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _ol_thinking() -> list[str]:
    return [data(_ol_chunk({"role": "assistant", "content": "", "reasoning": p})) for p in THINK_PIECES]


def _ollama() -> None:
    ev = [data(_ol_chunk({"role": "assistant", "content": p})) for p in TEXT_PIECES]
    ev += [data(_ol_chunk({"role": "assistant", "content": ""}, "stop")),
           data(_ol_chunk(None, choices=[], usage=_ol_usage(26, 12))), DONE]
    _add("ollama", "text", ev, Expect(content=TEXT, usage=(26, 12)))

    ev = _ol_thinking() + [data(_ol_chunk({"role": "assistant", "content": p})) for p in ANSWER_PIECES]
    ev += [data(_ol_chunk({"role": "assistant", "content": ""}, "stop")),
           data(_ol_chunk(None, choices=[], usage=_ol_usage(30, 52))), DONE]
    _add("ollama", "reasoning", ev, Expect(content=ANSWER, thinking=THINK, usage=(30, 52)))

    call = {"id": "call_hk81qg8b", "index": 0, "type": "function",
            "function": {"name": TOOL_NAME, "arguments": ARGS_TOKYO_COMPACT}}
    ev = _ol_thinking() + [data(_ol_chunk({"role": "assistant", "content": "", "tool_calls": [call]}))]
    ev += [data(_ol_chunk({"role": "assistant", "content": ""}, "tool_calls")),
           data(_ol_chunk(None, choices=[], usage=_ol_usage(150, 40))), DONE]
    _add("ollama", "tool_call", ev,
         Expect(thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_TOKYO_COMPACT, "call_hk81qg8b"),),
                finish_reason="tool_calls", usage=(150, 40)))

    c1 = {"id": "call_wteop8bt", "index": 0, "type": "function",
          "function": {"name": TOOL_NAME, "arguments": ARGS_PARIS_COMPACT}}
    c2 = {"id": "call_rk2xye1l", "index": 1, "type": "function",
          "function": {"name": TOOL_NAME, "arguments": ARGS_TOKYO_COMPACT}}
    ev = _ol_thinking() + [data(_ol_chunk({"role": "assistant", "content": "", "tool_calls": [c]})) for c in (c1, c2)]
    ev += [data(_ol_chunk({"role": "assistant", "content": ""}, "tool_calls")),
           data(_ol_chunk(None, choices=[], usage=_ol_usage(150, 60))), DONE]
    _add("ollama", "parallel_tool_calls", ev, Expect(
        thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_PARIS_COMPACT, "call_wteop8bt"),
                                    Call(TOOL_NAME, ARGS_TOKYO_COMPACT, "call_rk2xye1l")),
        finish_reason="tool_calls", usage=(150, 60)))

    ev = [data(_ol_chunk({"role": "assistant", "content": p})) for p in TEXT_PIECES[:2]]
    err = {"error": {"message": "an error was encountered while running the model: unexpected EOF", "type": "api_error",
                     "param": None, "code": None}}
    ev += [json.dumps(err, ensure_ascii=False, separators=(",", ":")) + "\n"]  # Go's json.Encoder: compact, one newline
    _add("ollama", "error", ev, Expect(error="an error was encountered while running the model"))


# ======================================================================================= vllm
# Sources: "Reasoning Outputs" (https://docs.vllm.ai/en/latest/features/reasoning_outputs.html)
# and examples/online_serving/openai_chat_completion_with_reasoning_streaming.py: thinking in
# delta.reasoning_content (newer releases name it delta.reasoning: "check content and reasoning
# exist"); "Tool Calling" (https://docs.vllm.ai/en/latest/features/tool_calling.html): the first
# tool delta carries id, type and name (no arguments), later ones argument pieces. Deltas hold
# only the fields set (exclude_unset); the finishing choice adds "stop_reason"; the
# include_usage chunk has empty choices. In-stream errors:
# vllm/entrypoints/openai/serving_engine.py create_streaming_error_response: json.dumps of
# {"error": {"message", "type", "param", "code"}} as a data event.

_family("vllm",
        "https://docs.vllm.ai/en/latest/features/reasoning_outputs.html ; https://docs.vllm.ai/en/latest/features/tool_calling.html")


def _vl_chunk(delta: dict | None, finish: str | None = None, *, choices=None, usage=None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = None
    chunk = {"id": "chatcmpl-9c1e6b2f0d7a4f3b8e5c", "object": "chat.completion.chunk", "created": 1755000000,
             "model": "Qwen/Qwen3-8B", "choices": choices if choices is not None else [choice]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def _vl_usage(p: int, c: int) -> dict:
    return {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c, "prompt_tokens_details": None}


def _vl_tool(index: int, call_id: str, pieces) -> list[dict]:
    head = {"tool_calls": [{"id": call_id, "type": "function", "index": index, "function": {"name": TOOL_NAME}}]}
    return [head] + [{"tool_calls": [{"index": index, "function": {"arguments": p}}]} for p in pieces]


def _vllm() -> None:
    first = data(_vl_chunk({"role": "assistant", "content": ""}))
    ev = [first] + [data(_vl_chunk({"content": p})) for p in TEXT_PIECES]
    ev += [data(_vl_chunk({"content": ""}, "stop")), data(_vl_chunk(None, choices=[], usage=_vl_usage(21, 12))), DONE]
    _add("vllm", "text", ev, Expect(content=TEXT, usage=(21, 12)))

    ev = [first] + [data(_vl_chunk({"reasoning_content": p})) for p in THINK_PIECES]
    ev += [data(_vl_chunk({"content": p})) for p in ANSWER_PIECES]
    ev += [data(_vl_chunk({"content": ""}, "stop")), data(_vl_chunk(None, choices=[], usage=_vl_usage(22, 58))), DONE]
    _add("vllm", "reasoning", ev, Expect(content=ANSWER, thinking=THINK, usage=(22, 58)))

    think = [data(_vl_chunk({"reasoning": p})) for p in THINK_PIECES]  # the newer field name
    ev = [first] + think + [data(_vl_chunk(d)) for d in _vl_tool(0, "chatcmpl-tool-7f3e9b2a", ARGS_TOKYO_PIECES)]
    ev += [data(_vl_chunk({"content": ""}, "tool_calls")), data(_vl_chunk(None, choices=[], usage=_vl_usage(130, 66))),
           DONE]
    _add("vllm", "tool_call", ev,
         Expect(thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_TOKYO, "chatcmpl-tool-7f3e9b2a"),),
                finish_reason="tool_calls", usage=(130, 66)))

    deltas = _vl_tool(0, "chatcmpl-tool-aaa1", ARGS_PARIS_PIECES) + _vl_tool(1, "chatcmpl-tool-bbb2", ARGS_TOKYO_PIECES)
    ev = [first] + think + [data(_vl_chunk(d)) for d in deltas]
    ev += [data(_vl_chunk({"content": ""}, "tool_calls")), data(_vl_chunk(None, choices=[], usage=_vl_usage(130, 90))),
           DONE]
    _add("vllm", "parallel_tool_calls", ev, Expect(
        thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_PARIS, "chatcmpl-tool-aaa1"),
                                    Call(TOOL_NAME, ARGS_TOKYO, "chatcmpl-tool-bbb2")),
        finish_reason="tool_calls", usage=(130, 90)))

    ev = [first] + [data(_vl_chunk({"content": p})) for p in TEXT_PIECES[:2]]
    ev += [data({"error": {"message": "The decoder prompt (length 40961) is longer than the maximum model length "
                                      "of 40960.",
                           "type": "BadRequestError", "param": None, "code": 400}}, spaced=True)]
    _add("vllm", "error", ev, Expect(error="is longer than the maximum model length"))


# =================================================================================== llamacpp
# Sources: llama.cpp tools/server/README.md (OpenAI-compatible /v1/chat/completions; with
# --reasoning-format deepseek the thinking streams in delta.reasoning_content); recorded chunks
# (g0t4/ask-openai.nvim lua/ask-openai/rewrites/harmony/NOTES.md): the first delta
# {"role": "assistant", "content": null}, "system_fingerprint": "b6097-9515c613", and usage with
# "timings" on the finishing chunk. Errors inside a stream: tools/server/server.cpp sends them as
# server_sent_event(sink, "error", error_data), i.e. a bare "error: {...}" SSE field (not data),
# followed by "data: [DONE]".

# llama.cpp's server reads `reasoning_content` of input assistant messages (common/chat.cpp,
# common_chat_msgs_parse_oaicompat) and hands it to templates that render earlier thinking of
# tool-calling turns (gpt-oss, Qwen3): sending it back on a turn that called tools is right here too
_family("llamacpp",
        "https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md ; tools/server/server.cpp",
        echo_reasoning="reasoning_content")


def _lc_chunk(delta: dict, finish: str | None = None, *, usage=None) -> dict:
    chunk = {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], "created": 1754524122,
             "id": "chatcmpl-yPk7z9nC22CofOlh100qQdHVEDMNYCb1", "model": "gpt-oss-20b",
             "system_fingerprint": "b6097-9515c613", "object": "chat.completion.chunk"}
    if usage is not None:
        chunk["usage"] = {"completion_tokens": usage[1], "prompt_tokens": usage[0], "total_tokens": sum(usage)}
        chunk["timings"] = {"prompt_n": usage[0], "prompt_ms": 203.378, "prompt_per_token_ms": 0.187,
                            "prompt_per_second": 5334.89,
                            "predicted_n": usage[1], "predicted_ms": 933.63, "predicted_per_token_ms": 3.78,
                            "predicted_per_second": 264.56}
    return chunk


def _llamacpp() -> None:
    first = data(_lc_chunk({"role": "assistant", "content": None}))
    ev = [first] + [data(_lc_chunk({"content": p})) for p in TEXT_PIECES]
    ev += [data(_lc_chunk({}, "stop", usage=(1085, 12))), DONE]
    _add("llamacpp", "text", ev, Expect(content=TEXT, usage=(1085, 12)))

    think = [data(_lc_chunk({"reasoning_content": p})) for p in THINK_PIECES]
    ev = [first] + think + [data(_lc_chunk({"content": p})) for p in ANSWER_PIECES]
    ev += [data(_lc_chunk({}, "stop", usage=(40, 64))), DONE]
    _add("llamacpp", "reasoning", ev, Expect(content=ANSWER, thinking=THINK, usage=(40, 64)))

    deltas = _oa_tool_deltas(0, "4Xkz0mQ1pL8eR2tY6uI3oP9aS5dF7gH", ARGS_TOKYO_PIECES)
    ev = [first] + think + [data(_lc_chunk(d)) for d in deltas]
    ev += [data(_lc_chunk({}, "tool_calls", usage=(300, 70))), DONE]
    _add("llamacpp", "tool_call", ev,
         Expect(thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_TOKYO, "4Xkz0mQ1pL8eR2tY6uI3oP9aS5dF7gH"),),
                finish_reason="tool_calls", usage=(300, 70)))

    deltas = _oa_tool_deltas(0, "aaaaPARIS", ARGS_PARIS_PIECES) + _oa_tool_deltas(1, "bbbbTOKYO", ARGS_TOKYO_PIECES)
    ev = [first] + think + [data(_lc_chunk(d)) for d in deltas]
    ev += [data(_lc_chunk({}, "tool_calls", usage=(300, 95))), DONE]
    _add("llamacpp", "parallel_tool_calls", ev, Expect(
        thinking=THINK, tool_calls=(Call(TOOL_NAME, ARGS_PARIS, "aaaaPARIS"), Call(TOOL_NAME, ARGS_TOKYO, "bbbbTOKYO")),
        finish_reason="tool_calls", usage=(300, 95)))

    ev = [first] + [data(_lc_chunk({"content": p})) for p in TEXT_PIECES[:2]]
    err = {"code": 500, "message": "Failed to decode: the KV cache is full ☕", "type": "server_error"}
    ev += ["error: " + json.dumps(err, ensure_ascii=False) + "\n\n", DONE]
    _add("llamacpp", "error", ev, Expect(error="the KV cache is full"))


# =================================================================================== nofinish
# A server that never sends finish_reason (as Snowflake Cortex's chat completions stream):
# chunks carry deltas only; the stream ends with "data: [DONE]" or just ends (a clean end of the
# body, no [DONE]). The reply is complete all the same: finish_reason is then inferred.

_family("nofinish", "Snowflake Cortex REST API style: no finish_reason in any chunk")


def _nf_chunk(delta: dict, usage=None) -> dict:
    chunk: dict = {"id": "4f6b1c0e-nofinish", "model": "claude-4-sonnet", "choices": [{"index": 0, "delta": delta}]}
    if usage is not None:
        chunk["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return chunk


def _nofinish() -> None:
    ev = [data(_nf_chunk({"content": p})) for p in TEXT_PIECES[:-1]]
    ev += [data(_nf_chunk({"content": TEXT_PIECES[-1]}, usage=(17, 12))), DONE]
    _add("nofinish", "text", ev, Expect(content=TEXT, finish_reason="stop", usage=(17, 12)))

    # ends with the last argument piece: no finish_reason, no [DONE]
    ev = [data(_nf_chunk(d)) for d in _oa_tool_deltas(0, "toolu_01NoFinishA", ARGS_TOKYO_PIECES)]
    _add("nofinish", "tool_call", ev,
         Expect(tool_calls=(Call(TOOL_NAME, ARGS_TOKYO, "toolu_01NoFinishA"),), finish_reason="tool_calls"))

    deltas = _oa_tool_deltas(0, "toolu_01P", ARGS_PARIS_PIECES) + _oa_tool_deltas(1, "toolu_02T", ARGS_TOKYO_PIECES)
    ev = [data(_nf_chunk(d)) for d in deltas] + [DONE]
    _add("nofinish", "parallel_tool_calls", ev, Expect(
        tool_calls=(Call(TOOL_NAME, ARGS_PARIS, "toolu_01P"), Call(TOOL_NAME, ARGS_TOKYO, "toolu_02T")),
        finish_reason="tool_calls"))

    ev = [data(_nf_chunk({"content": p})) for p in TEXT_PIECES[:2]]
    ev += [data({"error": {"message": "Request failed: warehouse is suspended ☕", "code": "390114"}})]
    _add("nofinish", "error", ev, Expect(error="warehouse is suspended"))


for _build in (_openai, _azure, _gemini, _mistral, _deepseek, _groq, _openrouter, _ollama, _vllm, _llamacpp, _nofinish):
    _build()

assert set(FAMILIES) == {s.family for s in STREAMS.values()}
for _s in STREAMS.values():  # every stream is real UTF-8 with something beyond ASCII in it
    assert any(ord(ch) > 127 for ch in _s.text), _s.id
