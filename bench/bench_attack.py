"""Attack benchmark (not a test): the figures of what was tried against unity_nb, and what got through.

Three parts, each a count and a list of what was seen:

  1. Secret channels. A secret whose value holds a double quote and a backslash
     (``pa"ss\\w0rd-Q7x!``, so its repr and JSON forms differ from it) is pushed through every
     channel a value can leave by: printed whole, in pieces, as a repr, as JSON, as a plan's last
     value, as a variable's description, in an error, a tool's result and print, a reference
     tool's stored value, tool arguments and plan code written by the model, a thread's output
     after its plan ended, streamed reply deltas, a clarification answer, a notification. After
     each run every place a person, a model or the store can see is scanned for the value in any
     of its forms (as is, repr body, JSON body, and those escaped once more): the requests sent
     to the model, the transcript
     (contents, arguments, results, printed output), the events, the store's files and
     ``Store.transcript()``, what reached the process's real stdout, and the ``next_*`` queues.
     ``leaked`` must be 0 outside the documented transforms (README, Secrets: a value reversed or
     base64-encoded by a plan), which are tried too and listed apart.
  2. Model faults. ScriptedModel scripts that raise, return garbage, call unknown tools or send
     bad JSON, and the loopback fake server (tests/fake_openai.py) answering 500, 429 with
     Retry-After, a dropped stream, an error in the stream, an HTTP 200 with an error body, and a
     stream that ends without a finish_reason, and a 401. "Survived": the run ends (an answer or
     an error) within its timeout and a fresh loop afterwards still answers; the table says which
     error came out (a script's own exception comes out as it is, not as a ModelError).
  3. Bad API inputs. start_loop with max_steps='x', nan, inf, tools=fn (not a list), bus='x',
     tool_policy=42, a model whose complete is not async; and steering from another thread.
     "Clearly refused": a UserError or TypeError raised by start_loop itself whose message names
     the argument (for steering from another thread: handed to the loop's thread and in its
     transcript, or an error that says so, naming the thread or the event loop).

Run: .venv/bin/python bench/bench_attack.py   (about 10 s; no network but 127.0.0.1)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import math
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import unity_nb as u
from unity_nb import _output

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from fake_openai import FakeOpenAIServer, Reply  # noqa: E402

SECRET = 'pa"ss\\w0rd-Q7x!'
NAME = "ATTACK_TOKEN"
FORMS = {
    "as is": SECRET,
    "repr": repr(SECRET)[1:-1],
    "JSON": json.dumps(SECRET)[1:-1],
    "JSON of its repr": json.dumps(repr(SECRET)[1:-1])[1:-1],
    "repr of its JSON": repr(json.dumps(SECRET)[1:-1])[1:-1],
}
TIMEOUT = 20.0


# ------------------------------------------------------------------------------------- helpers


def strings(obj: Any) -> list[str]:
    """Every string inside ``obj`` (dicts, lists, dataclass-like objects, pydantic models)."""
    out: list[str] = []
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list | tuple | set):
            stack.extend(x)
        elif hasattr(x, "model_dump"):
            stack.append(x.model_dump())
    return out


def transcript_strings(h: Any) -> list[str]:
    out = []
    for handle in h.tree:
        for m in handle.transcript:
            out += [m.content or "", m.thinking or ""]
            for c in m.tool_calls:
                out += [c.name, c.arguments, c.result or "", c.output]
                out += strings(c.displays)
    return out


def found(texts: list[str]) -> list[str]:
    """The forms of the value found in any of ``texts``."""
    return [form for form, value in FORMS.items() if any(value in t for t in texts)]


class Real:
    """What reaches the process's real stdout/stderr (under the routing) while a scenario runs."""

    def __init__(self) -> None:
        self.buf = io.StringIO()

    @contextlib.contextmanager
    def capture(self):
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = self.buf  # the routing wraps these: unrouted writes land here
        _output.install()
        try:
            yield self
        finally:
            _output.uninstall()
            sys.stdout, sys.stderr = saved


def read_store(store_dir: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in store_dir.glob("s.db*"))


async def scan(
    h: Any, model: Any, store: u.Store, store_dir: Path, real: Real, extra: list[str]
) -> dict[str, list[str]]:
    """Where each form of the value was found, by place."""
    requests = getattr(model, "requests", [])
    places = {
        "requests to the model": [s for r in requests for s in strings(r.messages) + strings(r.tools)],
        "transcript": transcript_strings(h),
        "events": [e.model_dump_json() for handle in h.tree for e in handle.events] + strings(list(h.events)),
        "Store.transcript()": [
            s
            for m in store.transcript(h.id)
            for s in [m.content or ""] + [x for c in m.tool_calls for x in (c.arguments, c.result or "", c.output)]
        ],
        "store files": [await asyncio.to_thread(read_store, store_dir)],
        "real stdout/stderr": [real.buf.getvalue()],
        "queues and answers": extra,
    }
    return {where: f for where, texts in places.items() if (f := found(texts))}


# ------------------------------------------------------------------------------ 1. secret channels


def plan_script(*codes: str, answer: str = "done") -> Callable:
    def script(messages: list[dict], tools: list[dict]) -> Any:
        done = sum(1 for m in messages if m["role"] == "tool")
        if done < len(codes):
            return u.call_tool("execute_code", code=codes[done], intent="attack")
        return answer

    return script


def plan(*codes: str) -> Callable[[dict], Awaitable[tuple[Any, Any, list[str]]]]:
    async def run(ctx: dict) -> tuple[Any, Any, list[str]]:
        model = u.ScriptedModel(plan_script(*codes))
        h = u.act("attack", model=model, namespace=dict(ctx.get("ns", {})), bus=ctx["bus"])
        await asyncio.wait_for(h.result(), TIMEOUT)
        return h, model, []

    return run


def echo_tool(secret: str) -> str:
    """Echo the text given."""
    return f"echo: {secret}"


def token_tool() -> str:
    """Return the token."""
    return "token: " + u.get_secret(NAME)


def printing_tool() -> str:
    """Print the token one character a write."""
    for ch in u.get_secret(NAME):
        sys.stdout.write(ch)
    sys.stdout.write("\n")
    return "printed"


def object_tool() -> dict:
    """Return a dict holding the token (stored in a variable by the actor)."""
    return {"token": u.get_secret(NAME)}


def tool_loop(script: Callable, tools: list, *, actor: bool = False) -> Callable:
    async def run(ctx: dict) -> tuple[Any, Any, list[str]]:
        model = u.ScriptedModel(script)
        h: Any
        if actor:
            h = u.act("attack", model=model, namespace={}, tools=tools, bus=ctx["bus"])
        else:
            h = u.start_loop("attack", model=model, tools=tools, bus=ctx["bus"])
        await asyncio.wait_for(h.result(), TIMEOUT)
        return h, model, []

    return run


def first_call(call: Any) -> Callable:
    return lambda m, t: call if not any(x["role"] == "tool" for x in m) else "done"


async def after_plan_thread(ctx: dict) -> tuple[Any, Any, list[str]]:
    go = threading.Event()
    ns: dict[str, Any] = {"go": go}
    code = (
        "import threading\n"
        "def later():\n"
        "    go.wait(20)\n"
        "    print('late', get_secret('ATTACK_TOKEN'))\n"
        "t = threading.Thread(target=later, daemon=True)\n"
        "t.start()"
    )
    model = u.ScriptedModel(plan_script(code))
    h = u.act("attack", model=model, namespace=ns, bus=ctx["bus"])
    await asyncio.wait_for(h.result(), TIMEOUT)
    go.set()
    await asyncio.to_thread(ns["t"].join, TIMEOUT)
    with contextlib.suppress(Exception):  # the late output is published on the loop: let it land
        await h.wait_for("tool_output", lambda e: "late" in getattr(e, "text", ""), timeout=5)
    return h, model, []


async def streamed(ctx: dict) -> tuple[Any, Any, list[str]]:
    reply = f"the token is {SECRET} and in JSON {json.dumps(SECRET)}"
    model = u.ScriptedModel([reply], chunk=1)
    h = u.start_loop("say it", model=model, bus=ctx["bus"])
    seen: list[str] = []
    h.run.add_listener(lambda _s, _e: seen.append(h.state.streaming_text))
    answer = await asyncio.wait_for(h.result(), TIMEOUT)
    return h, model, [*seen, str(answer)]


async def clarification(ctx: dict) -> tuple[Any, Any, list[str]]:
    async def login(ctx_: u.ToolContext) -> str:
        """Log in, asking the person for the token."""
        token = await ctx_.clarify("Which token?")
        return "logged in" if SECRET in token else "wrong token"

    model = u.ScriptedModel(first_call(u.call_tool("login")))
    h = u.start_loop("log in", model=model, tools=[login], bus=ctx["bus"])
    q = await asyncio.wait_for(h.inbox.next_question(), TIMEOUT)
    await h.inbox.answer(q["call_id"], f"use {SECRET}")
    answer = await asyncio.wait_for(h.result(), TIMEOUT)
    return h, model, [str(answer), json.dumps(q)]


async def notification(ctx: dict) -> tuple[Any, Any, list[str]]:
    def progress(ctx_: u.ToolContext) -> str:
        """Report progress."""
        ctx_.notify(f"using {u.get_secret(NAME)} now, repr {u.get_secret(NAME)!r}")
        return "ok"

    model = u.ScriptedModel(first_call(u.call_tool("progress")))
    h = u.start_loop("progress", model=model, tools=[progress], bus=ctx["bus"])
    note = await asyncio.wait_for(h.inbox.next_notification(), TIMEOUT)
    await asyncio.wait_for(h.result(), TIMEOUT)
    return h, model, [json.dumps(note, default=str), str(note.get("text"))]


CHANNELS: dict[str, Callable] = {
    "plan prints it whole": plan("print(get_secret('ATTACK_TOKEN'))"),
    "plan prints it one character a write": plan("print(*get_secret('ATTACK_TOKEN'), sep='')"),
    "plan prints it in halves": plan(
        "import sys\nt = get_secret('ATTACK_TOKEN')\nsys.stdout.write(t[:5])\nsys.stdout.write(t[5:] + '\\n')"
    ),
    "plan prints its repr": plan("print(repr(get_secret('ATTACK_TOKEN')))"),
    "plan prints it as JSON": plan("import json\nprint(json.dumps({'token': get_secret('ATTACK_TOKEN')}))"),
    "plan's last expression": plan("get_secret('ATTACK_TOKEN')"),
    "plan's last expression in a list": plan("[get_secret('ATTACK_TOKEN')]"),
    "plan stores it (variable description)": plan("tok = get_secret('ATTACK_TOKEN')\ncreds = {'t': tok}"),
    "plan prints to stderr": plan("import sys\nprint(get_secret('ATTACK_TOKEN'), file=sys.stderr)"),
    "plan raises with it": plan("raise ValueError('bad ' + repr(get_secret('ATTACK_TOKEN')))"),
    "a variable holds it before the run": lambda ctx: plan("x = 1")({**ctx, "ns": {"pw": SECRET}}),
    "tool returns it": tool_loop(first_call(u.call_tool("token_tool")), [token_tool]),
    "tool prints it in pieces": tool_loop(first_call(u.call_tool("printing_tool")), [printing_tool]),
    "reference tool's value stored in a variable": tool_loop(
        first_call(u.call_tool("object_tool")), [object_tool], actor=True
    ),
    "tool echoes a <<secret:>> argument": tool_loop(
        first_call(u.call_tool("echo_tool", secret=f"<<secret:{NAME}>>")), [echo_tool]
    ),
    "tool args written by the model": tool_loop(first_call(u.call_tool("echo_tool", secret=SECRET)), [echo_tool]),
    "plan code written by the model": plan(f"x = {SECRET!r}\nprint('ok')"),
    "thread output after its plan ended": after_plan_thread,
    "streamed reply deltas": streamed,
    "clarification answer": clarification,
    "notification": notification,
}
DOCUMENTED = {  # README, Secrets: transformed values cannot be caught
    "plan prints it reversed": plan("print(get_secret('ATTACK_TOKEN')[::-1])"),
    "plan prints it base64-encoded": plan(
        "import base64\nprint(base64.b64encode(get_secret('ATTACK_TOKEN').encode()).decode())"
    ),
}
TRANSFORMED = {
    "plan prints it reversed": SECRET[::-1],
    "plan prints it base64-encoded": base64.b64encode(SECRET.encode()).decode(),
}


async def secret_channels() -> tuple[list[tuple[str, dict]], list[tuple[str, bool]]]:
    u.set_secret(NAME, SECRET, description="attack benchmark")
    results: list[tuple[str, dict]] = []
    documented: list[tuple[str, bool]] = []
    try:
        for label, run in {**CHANNELS, **DOCUMENTED}.items():
            with tempfile.TemporaryDirectory() as tmp:
                bus = u.EventBus()
                store = u.Store(Path(tmp) / "s.db")
                store.attach(bus)
                real = Real()
                try:
                    with real.capture():
                        h, model, extra = await run({"bus": bus})
                    where = await scan(h, model, store, Path(tmp), real, extra)
                    if label in DOCUMENTED:
                        shown = transcript_strings(h) + [real.buf.getvalue()]
                        documented.append((label, any(TRANSFORMED[label] in s for s in shown)))
                except Exception as err:
                    where = {"the run failed": [f"{type(err).__name__}: {err}"]}
                finally:
                    store.close()
            if label not in DOCUMENTED:
                results.append((label, where))
    finally:
        u.forget_secret(NAME)
    return results, documented


# -------------------------------------------------------------------------------- 2. model faults


async def fresh_loop_answers() -> bool:
    h = u.start_loop("ping", model=u.ScriptedModel(["pong"]), bus=u.EventBus())
    return await asyncio.wait_for(h.result(), TIMEOUT) == "pong"


def raising(exc: BaseException) -> Callable:
    def script(messages: list[dict], tools: list[dict]) -> Any:
        raise exc

    return script


async def hanging(messages: list[dict], tools: list[dict]) -> Any:
    await asyncio.Event().wait()


SCRIPTED_FAULTS: dict[str, Any] = {
    "script raises RuntimeError": raising(RuntimeError("model exploded")),
    "script raises ModelError": raising(u.ModelError("provider said no")),
    "script raises KeyError": raising(KeyError("choices")),
    "script returns 42": lambda m, t: 42,
    "script returns None": lambda m, t: None,
    "calls an unknown tool": first_call(u.call_tool("no_such_tool", x=1)),
    "tool arguments are not JSON": first_call(u.ToolCall("echo_tool", "{not json")),
    "tool arguments are a JSON list": first_call(u.ToolCall("echo_tool", "[1, 2]")),
    "tool arguments miss a parameter": first_call(u.call_tool("echo_tool")),
    "calls tools forever (max_steps)": lambda m, t: u.call_tool("echo_tool", secret="again"),
}

SERVER_FAULTS: dict[str, list[Reply]] = {
    "HTTP 500, then an answer": [Reply(status=500, content="boom"), Reply(content="recovered")],
    "HTTP 429 with Retry-After, then an answer": [
        Reply(status=429, headers={"Retry-After": "0"}), Reply(content="ok"),
    ],
    "stream dropped after 1 chunk, then an answer": [
        Reply(content="a long answer", drop_after_chunks=1), Reply(content="ok"),
    ],
    "error event inside the stream": [Reply(content="partial answer", stream_error_after=1), Reply(content="ok")],
    "HTTP 401 (not retried)": [Reply(status=401, content="bad key")],
    "stream ends without finish_reason": [Reply(content="done", omit_finish=True)],
}


async def one_fault(make: Callable[[], Awaitable[Any]]) -> tuple[bool, str]:
    t = time.perf_counter()
    try:
        answer = await asyncio.wait_for(make(), TIMEOUT)
        outcome = f"answered {str(answer)[:40]!r}"
    except TimeoutError:
        return False, "hung (no end within the timeout)"
    except (u.UnityError, u.ModelError, u.Stopped) as err:
        outcome = f"{type(err).__name__}: {str(err)[:90]}"
    except Exception as err:
        outcome = f"ended with the script's own {type(err).__name__}: {str(err)[:80]}"
    ok = await fresh_loop_answers()
    return ok, outcome + f" ({time.perf_counter() - t:.2f} s)" + ("" if ok else "; a fresh loop then failed")


async def model_faults() -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    for label, script in SCRIPTED_FAULTS.items():
        async def make(script: Any = script) -> Any:
            model = u.ScriptedModel(script)
            return await u.start_loop("fault", model=model, tools=[echo_tool], max_steps=4, bus=u.EventBus())

        ok, what = await one_fault(make)
        out.append((label, ok, what))

    async def stop_a_hanging_model() -> Any:
        h = u.start_loop("hang", model=u.ScriptedModel(hanging), bus=u.EventBus())
        await h.wait_for("model_request", timeout=TIMEOUT)
        await h.stop("enough")
        return await h

    ok, what = await one_fault(stop_a_hanging_model)
    out.append(("model never answers; stop()", ok, what))

    async with FakeOpenAIServer(lambda body: Reply(content="fallback")) as srv:
        for label, replies in SERVER_FAULTS.items():
            async def from_server(replies: list[Reply] = replies) -> Any:
                srv.script(list(replies))
                model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x", max_retries=2)
                try:
                    return await u.start_loop("fault", model=model, bus=u.EventBus())
                finally:
                    await model.close()

            ok, what = await one_fault(from_server)
            out.append((f"fake server: {label}", ok, what))
    return out


# ----------------------------------------------------------------------------- 3. bad API inputs


class SyncComplete:
    name = "sync"

    def complete(self, request: Any, on_delta: Any = None) -> Any:
        return u.Reply(content="sync")


BAD_INPUTS: dict[str, tuple[str, dict]] = {
    "max_steps='x'": ("max_steps", {"max_steps": "x"}),
    "max_steps=nan": ("max_steps", {"max_steps": math.nan}),
    "max_steps=inf": ("max_steps", {"max_steps": math.inf}),
    "tools=fn (not a list)": ("tools", {"tools": echo_tool}),
    "bus='x'": ("bus", {"bus": "x"}),
    "tool_policy=42": ("tool_policy", {"tool_policy": 42}),
    "model whose complete is not async": ("model", {"model": SyncComplete()}),
}


async def bad_inputs() -> list[tuple[str, bool, str]]:
    out: list[tuple[str, bool, str]] = []
    for label, (arg, options) in BAD_INPUTS.items():
        kwargs = {"model": u.ScriptedModel(["fine"]), "bus": u.EventBus(), **options}
        try:
            h = u.start_loop("bad input", **kwargs)
        except (u.UserError, TypeError) as err:
            out.append((label, arg in str(err), f"{type(err).__name__} at start_loop: {str(err)[:100]}"))
            continue
        except Exception as err:
            out.append((label, False, f"{type(err).__name__} at start_loop: {str(err)[:100]}"))
            continue
        try:
            answer = await asyncio.wait_for(h.result(), TIMEOUT)
            seen = f"accepted; the run answered {str(answer)[:40]!r}"
        except Exception as err:
            seen = f"accepted; the run then failed: {type(err).__name__}: {str(err)[:80]}"
        out.append((label, False, seen))

    gate = asyncio.Event()

    async def slow(messages: list[dict], tools: list[dict]) -> str:
        await gate.wait()
        return "done"

    h = u.start_loop("steer me", model=u.ScriptedModel(slow), bus=u.EventBus())
    await h.wait_for("model_request", timeout=TIMEOUT)
    box: dict[str, Any] = {}

    def other_thread() -> None:
        try:
            asyncio.run(h.interject("from another thread"))
            box["seen"] = "accepted"
        except Exception as err:
            box["seen"] = f"{type(err).__name__}: {str(err)[:100]}"
            box["clear"] = isinstance(err, u.UserError | TypeError | RuntimeError) and (
                "thread" in str(err) or "event loop" in str(err)
            )

    worker = threading.Thread(target=other_thread)
    worker.start()
    await asyncio.to_thread(worker.join, TIMEOUT)
    gate.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(h.result(), TIMEOUT)
    if box.get("seen") == "accepted":  # handled if it reached the loop (handed to its thread), as the issue allows
        reached = any(m.kind == "interjection" and m.content == "from another thread" for m in h.transcript)
        box["clear"] = reached
        box["seen"] = "handed to the loop's thread: in its transcript" if reached else "accepted, but lost"
    out.append(("interject from another thread", bool(box.get("clear")), box.get("seen", "no answer")))
    return out


# ------------------------------------------------------------------------------------------ main


def where_text(where: dict[str, list[str]]) -> str:
    return "no" if not where else "; ".join(f"{k} ({', '.join(v)})" for k, v in where.items())


async def main() -> None:
    t0 = time.perf_counter()
    channels, documented = await secret_channels()
    faults = await model_faults()
    inputs = await bad_inputs()
    leaked = [(label, where) for label, where in channels if where]
    lines = [
        f"unity_nb attack benchmark, {time.strftime('%Y-%m-%d')}; command: .venv/bin/python bench/bench_attack.py",
        f"secret value {SECRET!r} ({len(SECRET)} characters; its repr and JSON forms differ from it)",
        "",
        f"1. secret channels tried: {len(channels)}, leaked: {len(leaked)}",
        "",
        "| channel | leaked where (form of the value) |",
        "| --- | --- |",
        *[f"| {label} | {where_text(where)} |" for label, where in channels],
        "",
        "documented as not caught (README, Secrets), tried apart and not counted: "
        + ", ".join(f"{label}: {'shown' if shown else 'not shown'}" for label, shown in documented),
        "",
        f"2. model faults injected: {len(faults)}, survived: {sum(ok for _l, ok, _w in faults)}",
        "",
        "| fault | survived | what happened |",
        "| --- | --- | --- |",
        *[f"| {label} | {'yes' if ok else 'NO'} | {what} |" for label, ok, what in faults],
        "",
        f"3. bad API inputs tried: {len(inputs)}, clearly refused: {sum(ok for _l, ok, _w in inputs)}",
        "",
        "| input | clearly refused | what happened |",
        "| --- | --- | --- |",
        *[f"| {label} | {'yes' if ok else 'NO'} | {what} |" for label, ok, what in inputs],
        "",
        f"wall time: {time.perf_counter() - t0:.1f} s",
    ]
    print("\n".join(line.replace("\n", " ") for line in lines))


if __name__ == "__main__":
    asyncio.run(main())
