"""Text benchmark (not a test): is the cost of a long streamed reply or of long printed output linear?

Each case runs at a small and a ten times larger size in the same process; linear cost gives a
ratio near 10x, quadratic cost near 100x (target: within 15x).

  A. A streamed reply: a ScriptedModel answers with N characters streamed in pieces of
     ``--chunk`` characters (each piece a delta: the handle's ``state.streaming_text`` grows and a
     ``ModelDelta`` is published).
  B. A tool printing N characters in lines of 100 (two writes per ``print``), routed to its
     call record (``rec.output``) and published as ``ToolOutput`` events.
  C. A plan (``u.act``) printing N characters the same way.

Run: .venv/bin/python bench/bench_text.py [--secret]   (about 10 s on 2 cores)
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import time

import unity_nb as u
from unity_nb import _output
from unity_nb.loop._text import OUTPUT_LIMIT

LINE = "x" * 99  # print adds the newline: 100 characters a line


def tool_messages(messages: list[dict]) -> list[dict]:
    return [m for m in messages if m.get("role") == "tool"]


async def streamed_reply(size: int, chunk: int) -> float:
    model = u.ScriptedModel(["y" * size], chunk=chunk)
    t0 = time.perf_counter()
    answer = await u.start_loop("answer at length", model=model, bus=u.EventBus())
    elapsed = time.perf_counter() - t0
    assert len(answer) == size
    return elapsed


async def printing_tool(size: int) -> float:
    def noisy() -> str:
        """Print a lot."""
        for _ in range(size // 100):
            print(LINE)
        return "printed"

    script = lambda m, t: u.call_tool("noisy") if not tool_messages(m) else "done"
    t0 = time.perf_counter()
    h = u.start_loop("print", model=u.ScriptedModel(script), tools=[noisy], bus=u.EventBus())
    assert await h == "done"
    elapsed = time.perf_counter() - t0
    (rec,) = [c for m in h.transcript for c in m.tool_calls]
    assert len(rec.output) >= min(size, OUTPUT_LIMIT)
    return elapsed


async def printing_plan(size: int) -> float:
    code = f"for _ in range({size // 100}):\n    print({LINE!r})"
    script = lambda m, t: u.call_tool("execute_code", code=code, intent="print") if not tool_messages(m) else "done"
    t0 = time.perf_counter()
    h = u.act("print", model=u.ScriptedModel(script), namespace={}, bus=u.EventBus())
    assert await h == "done"
    return time.perf_counter() - t0


async def best(make, repeat: int) -> float:
    return min([await make() for _ in range(repeat)])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=300_000, help="characters of the small case")
    parser.add_argument("--factor", type=int, default=10, help="the large case is this many times the small one")
    parser.add_argument("--chunk", type=int, default=64, help="characters per streamed delta")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (the fastest counts)")
    parser.add_argument("--secret", action="store_true", help="with a secret set (so every piece is scrubbed)")
    args = parser.parse_args()
    _output.install()  # route prints made inside tools, as the notebook layer does
    if args.secret:
        u.set_secret("BENCH_TOKEN", "sk-bench-0123456789abcdef")
    small, large = args.small, args.small * args.factor
    print(
        f"python {platform.python_version()}, {args.repeat} runs per case (fastest), sizes {small:,} and {large:,} "
        f"characters, {'a secret set' if args.secret else 'no secret set'}"
    )
    print(f"| case | {small:,} chars (s) | {large:,} chars (s) | ratio (linear: {args.factor}x) |")
    print("| --- | --- | --- | --- |")
    cases = [
        (f"A. streamed reply, {args.chunk}-char deltas", lambda n: streamed_reply(n, args.chunk)),
        ("B. tool printing 100-char lines", printing_tool),
        ("C. plan printing 100-char lines", printing_plan),
    ]
    for label, case in cases:
        t_small = await best(lambda case=case: case(small), args.repeat)
        t_large = await best(lambda case=case: case(large), args.repeat)
        print(f"| {label} | {t_small:.3f} | {t_large:.3f} | {t_large / t_small:.1f}x |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
