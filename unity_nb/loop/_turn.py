"""One model turn: which tools are offered, their schemas, the call itself (streamed, interruptible),
prompt-caching hints, and compressing the wire when it nears the context window."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from .. import events as ev
from .._errors import UnityError, UserError
from .._event_checks import maker
from .._secrets import ScrubStream, scrub
from ..models import ModelRequest, Reply, checked_usage, rate_limit_of
from ._policies import SUMMARY_PROMPT, SUMMARY_TAG, render_for_summary, split_for_compression
from ._policy import Offer, Step, offer_through
from ._records import Message
from ._signals import from_signal
from ._text import TextBuffer
from ._tools import Tool, as_tool

if TYPE_CHECKING:
    from ._face import Loop
    from ._options import LoopOptions
    from ._routing import Router
    from ._run import Run
    from ._source import ToolSource

__all__ = ("Turn", "own_tools")



def own_tools(cfg: LoopOptions, kind: str, final_answer: Tool | None) -> dict[str, Tool]:
    """A loop's own tools by name, checked (``final_answer``: a multi-request loop's)."""
    tools: dict[str, Tool] = {}
    for t in map(as_tool, cfg.tools):
        if kind != "actor" and t.ref_only:
            raise UserError(
                f"tool {t.name!r} takes {', '.join(t.ref_only)} as an object no JSON can carry: offer it "
                "through the actor (unity_nb.act or unity_nb.Actor), which passes variables by reference"
            )
        if t.name in tools:
            raise UserError(f"two tools are named {t.name!r}; tool names must be unique")
        tools[t.name] = t
    if final_answer is not None:
        if "final_answer" in tools:
            raise UserError("a multi-request loop brings its own final_answer tool; rename yours")
        tools["final_answer"] = final_answer
    for n in cfg.first_step_tools:
        if n not in tools:
            raise UserError(f"first_step_tools names {n!r}, which is not among the tools: {sorted(tools)}")
    return tools


_NOTHING = TextBuffer()
"""A turn's buffers while nothing streams (never appended to: the first piece makes its own)."""
_NO_SCRUB = ScrubStream()
_model_requested = maker(ev.ModelRequested)  # a model call's events, made without the class call's cost
_model_delta = maker(ev.ModelDelta)
_model_response = maker(ev.ModelResponse)


class _Sink:
    """What a model streams into: answer text by calling it, reasoning through ``.thinking``."""

    __slots__ = ("_text", "thinking")

    def __init__(self, text: Callable[[str], None], thinking: Callable[[str], None]) -> None:
        self._text = text
        self.thinking = thinking

    def __call__(self, text: str) -> None:
        self._text(text)


class Turn:
    """The model side of a loop: what each step offers and how the model is called.

    It is given the loop's :class:`Run` (options, state, conversation, model, events, the request
    book), the loop's own tools, its :class:`ToolSource` (which tools a step offers and which a call
    names: the actor's computes them), its router (where notes bubble up from) and, held weakly, the
    :class:`Loop` policies see."""

    __slots__ = (
        "__weakref__",
        "_call_ids",
        "_interrupted",
        "_last_tokens",
        "_offered",
        "_router",
        "_schema_cache",
        "_sent",
        "_source",
        "_streamed",
        "_summary_failed_at",
        "_task",
        "_text_scrub",
        "_thinking_scrub",
        "budget_start",
        "count",
        "dynamic",
        "run",
        "text",
        "thinking",
        "tool_source",
        "tools",
    )

    def __init__(self, run: Run, tools: dict[str, Tool], tool_source: ToolSource, router: Router, source: Loop) -> None:
        self.run = run
        self.tool_source = tool_source
        self._router = router
        self._source = weakref.ref(source)
        self.tools = tools
        """The loop's own tools by name (a multi-request loop's ``final_answer`` among them)."""
        self.count = 0
        """Model turns completed (a reply processed)."""
        self.budget_start = 0
        """The turn ``max_steps`` counts from (a new request of a multi-request loop restarts it)."""
        self.dynamic: dict[str, Tool] = {}
        self._schema_cache: dict[str, dict] = {}
        self._call_ids: set[str] = set()
        """Every tool call id this loop's model used (a repeated or empty one is renamed: :meth:`unique_ids`)."""
        self._offered: tuple[str, ...] = ()
        self._sent: tuple[list[dict] | None, int] = (None, 0)
        """The wire list the last request was made from, and its length then."""
        """The names offered at the last step, kept so that an unchanged offer shares one tuple."""
        self._task: asyncio.Task | None = None
        self._interrupted = False
        self._summary_failed_at = -1
        self._last_tokens = 0
        self._streamed = False
        self.text = self.thinking = _NOTHING  # made as the first piece of a call streams in (:meth:`_open`)
        self._text_scrub = self._thinking_scrub = _NO_SCRUB

    @property
    def source(self) -> Loop:
        """The loop whose tools this turn offers (held weakly: the loop holds its turn)."""
        source = self._source()
        if source is None:  # only reachable through a turn kept after its loop was dropped
            raise ReferenceError("this turn's loop is gone")
        return source

    # -- offered tools -----------------------------------------------------------------------

    def last_step(self) -> bool:
        return self.count - self.budget_start >= self.run.config.max_steps - 1

    def offer(self) -> list[Offer]:
        """The tools this step offers and the tool choice: one call, or one per forced first-step tool."""
        h, cfg = self.run, self.run.config
        if self.last_step():  # the last step offers no tools, so an answer comes
            if cfg.multi and len(h.open_requests()) > 1:
                return [([self.tools["final_answer"]], "required")]
            return [([], "none")]
        tools = self.tool_source.available()
        if cfg.multi and "final_answer" not in {t.name for t in tools}:
            tools.append(self.tools["final_answer"])
        if not cfg.chain:
            return [(tools, "auto")]
        state = h.state
        step = Step(self.count, tools, state.called_tools, state.started_at, self.source)
        offers = offer_through(cfg.chain, step)
        self.dynamic = step.dynamic
        return offers

    def lookup(self, name: str) -> Tool | None:
        """The tool a call names: a dynamic tool of this step, the loop's own, or final_answer."""
        found = self.dynamic.get(name) or self.tool_source.named(name)
        if found is None and self.run.config.multi and name == "final_answer":
            found = self.tools["final_answer"]
        return found

    def extra_properties(self, tool: Tool) -> dict | None:
        """Parameters the loop adds to a tool's schema (and takes out of its arguments)."""
        cfg = self.run.config
        extra: dict[str, dict] = {}
        if cfg.parent_context == "model":
            extra["include_parent_context"] = {
                "type": "boolean",
                "description": "true: a sub-operation this tool starts sees this conversation as context",
            }
        if cfg.multi and tool.name != "final_answer" and "request_id" not in tool.params.model_fields:
            extra["request_id"] = {"type": "string", "description": "the id of the request this call serves (e.g. r2)"}
        return extra or None

    def schemas(self, tools: Sequence[Tool]) -> list[dict]:
        cache = self._schema_cache
        out = []
        for t in tools:
            if self.tools.get(t.name) is not t:  # a steering or dynamic tool made for this step: not cached
                out.append(t.schema(extra_properties=self.extra_properties(t)))
                continue
            s = cache.get(t.name)
            if s is None:
                s = cache[t.name] = t.schema(extra_properties=self.extra_properties(t))
            out.append(s)
        return out

    def cache_hints(self, request: ModelRequest) -> ModelRequest:
        """Prompt-caching hints: OpenAI's ``prompt_cache_key`` (one per loop tree, so its requests
        share a cache), or Anthropic-style ``cache_control`` breakpoints on the system prompt and
        the newest message (for OpenAI-compatible gateways that pass them on)."""
        if self.run.config.prompt_cache in (True, "openai"):
            root = self.run
            while root.parent is not None:
                root = root.parent.run
            return ModelRequest(
                request.messages,
                request.tools,
                request.tool_choice,
                {**request.options, "prompt_cache_key": f"unity_nb-{root.id}"},
                request.continues,
                request.once,
            )
        messages = list(request.messages)
        marks = [0] if messages and messages[0].get("role") == "system" else []  # the system prompt opens the wire
        if messages and messages[-1].get("role") in ("user", "system") and len(messages) - 1 not in marks:
            marks.append(len(messages) - 1)
        for i in marks:
            m = messages[i]
            if isinstance(m.get("content"), str):
                content = [{"type": "text", "text": m["content"], "cache_control": {"type": "ephemeral"}}]
                messages[i] = {**m, "content": content}
        return ModelRequest(messages, request.tools, request.tool_choice, request.options,  # marked: new dicts
                            once=request.once)

    # -- streaming ---------------------------------------------------------------------------

    def reset_streaming(self) -> None:
        """Nothing is in flight (a step resets before and after its call): what streamed is dropped, and the
        buffers are made again only when something streams (a call that streams nothing makes none)."""
        if self._streamed:
            self._streamed = False
            self.text = self.thinking = _NOTHING
            self._text_scrub = self._thinking_scrub = _NO_SCRUB
            self.run.state.streams = None  # h.state.streaming_text reads ""

    def _open(self, thinking: bool) -> None:
        # pieces joined when read (appending to a str is quadratic), scrubbed as they accumulate; the text's and the
        # reasoning's buffers each made as the first piece of it streams in (most calls stream no reasoning)
        self._streamed = True
        if thinking:
            self.thinking, self._thinking_scrub = TextBuffer(), ScrubStream()
        else:
            self.text, self._text_scrub = TextBuffer(), ScrubStream()
        self.run.state.streams = (self.text, self.thinking)  # what h.state.streaming_text reads

    def _on_delta(self, text: str) -> None:
        if self._text_scrub is _NO_SCRUB:
            self._open(False)
        text = self._text_scrub.feed(text)
        if text:
            self.text.append(text)
            run = self.run
            run.publish(_model_delta(loop_id=run.id, lineage=run.lineage, step=run.state.steps, text=text))

    def _on_thinking(self, text: str) -> None:
        if self._thinking_scrub is _NO_SCRUB:
            self._open(True)
        text = self._thinking_scrub.feed(text)
        if text:
            self.thinking.append(text)
            self.run.emit(ev.ModelDelta, step=self.run.state.steps, text=text, thinking=True)

    def _flush_streaming(self, *, cut: bool = False) -> None:
        """The model call ended: publish what the scrubbers held back (an unfinished start of a value). ``cut``:
        it was cut off (a stop, an interjection), so what they hold could be part of a value: it is dropped."""
        if not self._streamed:  # nothing streamed in: nothing held back
            return
        for scrubber, buffer, thinking in (
            (self._text_scrub, self.text, False),
            (self._thinking_scrub, self.thinking, True),
        ):
            if scrubber is _NO_SCRUB:  # nothing of it streamed in
                continue
            if cut:
                scrubber.drop()
                continue
            text = scrubber.flush()
            if text:
                buffer.append(text)
                self.run.emit(ev.ModelDelta, step=self.run.state.steps, text=text, thinking=thinking)

    def on_retry(self, attempt: int, error: str, delay: float) -> None:
        limit = rate_limit_of(self.run.model)
        if limit is not None and ("429" in error or "rate limit" in error.lower()):
            limit.cooldown(delay)  # every loop calling this model waits, not only this one
        self.reset_streaming()
        self.run.emit(ev.ModelRetry, attempt=attempt, error=scrub(error), delay=delay)

    # -- the call ----------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Cancel the model call in flight (an interjection arrived); :meth:`call` returns ``None``.

        The call runs in the loop's own task (a task of its own per call cost a task per step): the task is
        cancelled once, and :meth:`call` takes that one cancellation back (``uncancel``) as it returns ``None``;
        a stop that comes too is a second one, and stays."""
        task = self._task
        if task is not None and not task.done() and not self._interrupted:
            self._interrupted = True
            task.cancel()

    async def call(
        self,
        messages: list[dict],
        tools: Sequence[Tool],
        choice: str | dict,
        last_user: str | None = None,
        continues: int = 0,
    ) -> Reply | None:
        """One model call; ``None`` when an interjection interrupted it (the caller re-issues).
        ``continues``: how many of ``messages`` are the previous request's, unchanged (:class:`ModelRequest`)."""
        h = self.run
        if h.state.stop_reason is not None:  # a stop was asked (it stops the children first): no new call starts
            raise asyncio.CancelledError
        h.state.steps += 1
        step = h.state.steps
        request = ModelRequest(  # by position, in the order of its fields (no keyword dict packed per call)
            messages,  # messages
            self.schemas(tools),  # tools
            choice if tools else "none",  # tool_choice
            h.config.options,  # options
            continues,  # continues
            step == 1 and not tools,  # once: a first call offering no tools, its answer expected to end the loop
        )
        if h.config.prompt_cache:
            request = self.cache_hints(request)
        names = tuple(t.name for t in tools) if tools else ()
        if names == self._offered:
            names = self._offered  # a step's event keeps the last step's tuple when the offer is the same
        self._offered = names
        h.publish(_model_requested(
            loop_id=h.id,
            lineage=h.lineage,
            step=step,
            messages=len(messages),
            tools=names,
            tool_choice=choice if isinstance(choice, str) else "function",
            last_user=last_user,
        ))
        limit = None if getattr(h.model, "limits_itself", False) else rate_limit_of(h.model)
        if limit is not None:
            await limit.acquire(self._last_tokens)  # shared by every loop calling this model
        self.reset_streaming()
        self._interrupted = False
        me = self._task = asyncio.current_task()
        try:
            reply = await h.model.complete(request, _Sink(self._on_delta, self._on_thinking))
            if h.state.stop_reason is not None:  # a stop whose cancellation the model swallowed: its reply not acted on
                raise asyncio.CancelledError
        except asyncio.CancelledError:
            # stopped, or interrupted by an interjection: what streamed so far is kept, marked as cut off
            # (the transcript and, through the event, the store), as a chat interface keeps a stopped reply;
            # an end held back as the possible start of a secret value is dropped, never shown
            self._flush_streaming(cut=True)
            partial = self.text.text or None
            h.emit(ev.ModelResponse, step=step, content=partial, interrupted=True)
            if partial:
                h.conversation.record(Message("assistant", partial, kind="interrupted"))
            if h.state.stop_reason is None and self._interrupted and me is not None and not me.uncancel():
                # only the interrupt cancelled it
                self._interrupted = False
                return None
            raise
        except (SystemExit, KeyboardInterrupt) as err:  # the model's own: it would end the event loop, not this run
            if from_signal(err):  # a person's Ctrl-C, a signal handler's exit: the program's
                raise
            raise self._model_exit(err) from err
        finally:
            self._task = None
        if self._interrupted and me is not None:  # the model swallowed the interrupt's cancellation: taken back
            self._interrupted = False
            me.uncancel()
        self._flush_streaming()
        reply.usage, problem = checked_usage(reply.usage)  # never negative, never text: spending counts it as is
        if problem is not None:
            reply.warnings = [*getattr(reply, "warnings", ()), problem]
        h.state.usage += reply.usage
        self._last_tokens = reply.usage.input_tokens + reply.usage.output_tokens
        reply.content = scrub(reply.content)
        reply.thinking = scrub(getattr(reply, "thinking", None))
        reply.refusal = scrub(getattr(reply, "refusal", None))
        for c in reply.tool_calls:  # a value the model wrote is shown as its reference (the tool gets the value)
            c.arguments = scrub(c.arguments)
        self.unique_ids(reply)
        h.publish(_model_response(
            loop_id=h.id,
            lineage=h.lineage,
            step=step,
            content=reply.content,
            tool_calls=tuple({"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls)
            if reply.tool_calls else (),
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            estimated=reply.usage.estimated,
            thinking=reply.thinking,
            refusal=reply.refusal,
            truncated=bool(getattr(reply, "truncated", False)),
            warnings=tuple(scrub(w) for w in warned) if (warned := getattr(reply, "warnings", ())) else (),
            response_model=getattr(reply, "model", None) or None,
            response_id=getattr(reply, "id", None),
            finish_reason=getattr(reply, "finish_reason", None),
        ))
        if reply.refusal and not reply.content:  # a refusal is what the model said: shown and kept as such
            reply.content = f"[refused] {reply.refusal}"
        self.reset_streaming()
        return reply

    def _model_exit(self, err: SystemExit | KeyboardInterrupt) -> UnityError:
        """What the run fails with when the model's ``complete()`` raised ``err`` itself (not from a signal: that
        one is the program's, and goes on up): handed on, asyncio re-raises it from the loop's task and it ends the
        event loop (the program, the kernel's loop), not only this run."""
        model = getattr(self.run.model, "name", None) or type(self.run.model).__name__
        return UnityError(
            f"the model {model!r} raised {type(err).__name__}({err}) in complete(): a model cannot end or "
            "interrupt the program, so the run failed"
        )

    def unique_ids(self, reply: Reply) -> None:
        """Give each of ``reply``'s tool calls an id no other call of this loop has: a model (a custom one, a
        script, a server) may repeat one or send none, and an id names one call everywhere (its result, its
        approval, its question, its child). A repeated id gets a suffix (``dup`` -> ``dup_2``), on the wire too."""
        seen = self._call_ids
        for c in reply.tool_calls:
            if not c.id or c.id in seen:
                base, n = c.id or "call", 2
                while f"{base}_{n}" in seen:
                    n += 1
                c.id = f"{base}_{n}"
            seen.add(c.id)

    def _messages(self) -> tuple[list[dict], int]:
        """The wire to send, and how many of its messages the previous request sent: the wire only grows
        by appending, and compression puts a new list in its place."""
        wire = self.run.conversation.wire
        sent, n = self._sent
        self._sent = (wire, len(wire))
        return list(wire), (n if sent is wire else 0)

    def call_all(self, offers: list[Offer], last_user: str | None) -> Awaitable[Reply | None]:
        """The step's call (awaited); forced first-step tools make one call each, merged into one reply. One call
        is :meth:`call` itself, no coroutine around it: every time the loop's task wakes while it waits for the
        model, each coroutine it awaits through is resumed once more."""
        if len(offers) == 1:
            tools, choice = offers[0]
            messages, continues = self._messages()
            return self.call(messages, tools, choice, last_user, continues)
        return self._call_each(offers, last_user)

    async def _call_each(self, offers: list[Offer], last_user: str | None) -> Reply | None:
        merged: Reply | None = None
        for tools, choice in offers:
            messages, continues = self._messages()
            reply = await self.call(messages, tools, choice, last_user, continues)
            if reply is None:
                return None
            if merged is None:
                merged = reply
                continue
            merged.tool_calls.extend(reply.tool_calls)
            merged.usage += reply.usage
            if reply.content:
                merged.content = f"{merged.content}\n{reply.content}" if merged.content else reply.content
        return merged

    # -- compression -------------------------------------------------------------------------

    async def maybe_compress(self) -> None:
        """Summarise the older part of the wire when it nears the context window."""
        h, cfg = self.run, self.run.config
        if not cfg.context_window:
            return
        wire = h.conversation.wire
        before = cfg.count_tokens(wire) if cfg.count_tokens else h.conversation.estimated_tokens()
        if before < cfg.compress_at * cfg.context_window:
            return
        head, middle, tail = split_for_compression(wire, cfg.keep_last)
        if not middle or (len(middle) == 1 and str(middle[0].get("content", "")).startswith(SUMMARY_TAG)):
            return  # nothing older than the kept turns to summarise
        if self._summary_failed_at == self.count:
            return
        request = ModelRequest(
            messages=[
                {"role": "system", "content": SUMMARY_PROMPT},
                {"role": "user", "content": render_for_summary(middle)},
            ],
            tools=[],
            tool_choice="none",
            options=cfg.options,
        )
        try:
            reply = await h.model.complete(request, None)
        except asyncio.CancelledError:
            raise
        except (SystemExit, KeyboardInterrupt) as err:  # as in a step's call (see _model_exit)
            if from_signal(err):
                raise
            raise self._model_exit(err) from err
        except Exception as err:  # noqa: BLE001 - go on uncompressed; the model may still cope
            self._summary_failed_at = self.count
            why = f"context compression failed ({type(err).__name__}: {err}); continuing uncompressed"
            self._router.notify(None, why)
            return
        h.state.usage += reply.usage
        summary = {"role": "user", "content": f"{SUMMARY_TAG}\n{reply.content or ''}"}
        h.conversation.replace([*head, summary, *tail])
        h.state.compressions += 1
        after = cfg.count_tokens(h.conversation.wire) if cfg.count_tokens else h.conversation.estimated_tokens()
        h.conversation.record(
            Message(
                "system",
                f"[context compressed: {len(middle)} earlier messages summarised for the model; "
                "the transcript keeps them]",
                kind="compression",
            )
        )
        h.emit(
            ev.ContextCompressed,
            messages_before=len(head) + len(middle) + len(tail),
            messages_after=len(h.conversation.wire),
            tokens_before=before,
            tokens_after=after,
            summarised=len(middle),
        )
