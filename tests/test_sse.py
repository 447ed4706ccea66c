"""The SSE decoder against the WHATWG specification, under any chunking, and against openai's own decoder."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from openai._streaming import SSEDecoder as OpenAIDecoder  # an independent implementation, as an oracle

from unity_nb.models._sse import SSEDecoder

text = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n\x00"), max_size=20)
field_value = text.filter(lambda s: not s.startswith(" "))  # one leading space is dropped by the spec
event = st.fixed_dictionaries({
    "data": st.lists(field_value, min_size=1, max_size=3),
    "event": st.one_of(st.none(), st.sampled_from(["message", "error", "ping", "delta"])),
    "id": st.one_of(st.none(), st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True)),
    "comments": st.lists(text, max_size=2),
})


def encode(events, endings, split_points, *, final_blank=True) -> list[bytes]:
    lines: list[str] = []
    for ev in events:
        lines += [":" + c for c in ev["comments"]]
        if ev["event"]:
            lines.append("event: " + ev["event"])
        if ev["id"]:
            lines.append("id:" + ev["id"])
        lines += ["data: " + d for d in ev["data"]]
        lines.append("")
    if not final_blank:
        lines.pop()
    raw = b"".join(line.encode() + endings[i % len(endings)] for i, line in enumerate(lines))
    if not final_blank:
        raw = raw[: -len(endings[(len(lines) - 1) % len(endings)])]  # EOF right after the last data line
    cuts = sorted({p % (len(raw) + 1) for p in split_points})
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]


def decode(chunks: list[bytes]):
    d = SSEDecoder()
    out = [e for c in chunks for e in d.feed(c)] + d.end()
    return [(e.event, e.data.decode(), e.id) for e in out]


def expected(events):
    out, last_id = [], ""
    for ev in events:
        last_id = ev["id"] or last_id
        out.append((ev["event"] or "message", "\n".join(ev["data"]), last_id))
    return out


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(event, max_size=5),
    # LF and CRLF mixed, or CR alone (a CR ending before an empty LF line would be one CRLF)
    endings=st.one_of(st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=1, max_size=4), st.just([b"\r"])),
    split_points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
    final_blank=st.booleans(),
)
def test_any_chunking_and_line_endings_give_the_events_the_spec_defines(events, endings, split_points, final_blank):
    assert decode(encode(events, endings, split_points, final_blank=final_blank or not events)) == expected(events)


@settings(max_examples=150, deadline=None)
@given(events=st.lists(event, max_size=5),
       split_points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_agrees_with_openais_decoder(events, split_points):
    chunks = encode(events, [b"\n"], split_points)
    theirs = [(e.event or "message", e.data, e.id or "") for e in OpenAIDecoder().iter_bytes(iter(chunks))]
    assert decode(chunks) == theirs


def test_a_utf8_character_cut_between_chunks_is_whole():
    raw = 'data: {"t": "café ☕ 日本"}\n\n'.encode()
    for i in range(1, len(raw)):
        assert [json.loads(d) for _e, d, _i in decode([raw[:i], raw[i:]])] == [{"t": "café ☕ 日本"}]


def test_one_byte_at_a_time_with_crlf_split_between_chunks():
    raw = b"data: a\r\ndata: b\r\n\r\ndata: c\r\r"
    assert decode([raw[i : i + 1] for i in range(len(raw))]) == [("message", "a\nb", ""), ("message", "c", "")]


def test_spec_details():
    # a BOM is dropped; a field with no colon has an empty value; "data:" with nothing is an empty line of data;
    # unknown fields are ignored; retry takes digits only; an event with no data is not dispatched
    raw = b"\xef\xbb\xbfdata\ndata:\n\nevent: x\n\nfoo: bar\nretry: 12a\nretry: 300\ndata:z\n\n"
    d = SSEDecoder()
    events = d.feed(raw) + d.end()
    assert [(e.event, e.data) for e in events] == [("message", b"\n"), ("message", b"z")]
    assert events[1].retry == 300
    assert d.lines == 10


def test_comment_lines_count_as_signs_of_life_but_are_no_events():
    d = SSEDecoder()
    assert d.feed(b": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n") == []
    assert d.lines == 4
    assert d.feed(b"data: {}") == [] and d.lines == 4  # a line only counts once it is whole


def test_lines_that_may_carry_an_error_outside_the_format_are_kept_for_the_reader():
    d = SSEDecoder()
    events = d.feed(b'data: {"a": 1}\n\n{"error": {"message": "bare"}}\nerror: {"message": "field"}\nfoo: bar\n')
    assert [e.data for e in events] == [b'{"a": 1}']
    assert d.stray == [b'{"error": {"message": "bare"}}', b'error: {"message": "field"}']
