"""Starting a loop: :func:`start_loop`, from a coroutine or from a sync tool's worker thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
from typing import Any

from .._errors import UserError
from ._context import CallInfo, current_call
from ._handle import LoopHandle
from ._options import LoopOptions

__all__ = ("start_loop",)


def _made_on_loop_thread(call: CallInfo, task: str, options: dict[str, Any]) -> LoopHandle:
    """``start_loop`` called in a sync tool's worker thread: make the loop on the calling loop's thread,
    in the tool call's context (so it becomes the call's child), and wait for it."""
    done: concurrent.futures.Future[LoopHandle] = concurrent.futures.Future()

    def make() -> None:
        try:
            done.set_result(LoopHandle(task, **options))
        except BaseException as err:  # noqa: BLE001 - raised in the calling thread
            done.set_exception(err)

    call.loop.run.event_loop.call_soon_threadsafe(make, context=contextvars.copy_context())
    return done.result()


def start_loop(task: str, **options: Any) -> LoopHandle:
    """Start a steerable tool loop on the running event loop and return its handle at once.

    The options are :class:`LoopOptions`' fields, and where the loop goes in the tree: ``parent``
    (a handle) makes it that loop's child; ``detached=True`` keeps a loop started inside a tool from
    becoming the calling loop's child (a durable task's turn, say). ``tools`` are plain functions (sync ones run in
    a worker thread) with type hints and a docstring. The last of ``max_steps`` model calls offers
    no tools, so an answer always comes. ``first_step_tools`` forces each of those tools on the first
    step; ``tool_policy(step, tools) -> (mode, tools)`` chooses per step. Called inside a tool of
    another loop (a sync tool's thread included), the new loop becomes that loop's child (steering
    reaches it); ``parent_context`` says whether children of *this* loop see its conversation:
    ``"always"``, ``"never"``, or ``"model"`` (each tool gets an ``include_parent_context`` flag).

    Policies (see ``unity_nb.discovery_first``): ``tool_policy`` may also take the loop as a
    third argument; ``dynamic_tools(loop)`` adds tools computed from state at each step;
    ``time_awareness`` notes the wall-clock time after each batch of tool results;
    ``prompt_cache`` adds caching hints (``True``/``"openai"``: a ``prompt_cache_key``;
    ``"anthropic"``: ``cache_control`` breakpoints).

    ``multi=True`` serves several requests in one context: the task is the first,
    ``h.requests.submit(text)`` adds more (each a :class:`RequestHandle`), the model completes each with
    ``final_answer(request_id, answer)``; the loop ends when all are done (its result is
    ``{request_id: answer}``), or with ``persist=True`` waits for more until stopped.
    ``max_steps`` then counts from the latest request.

    ``context_window`` (tokens) turns on compression: when the next request would exceed
    ``compress_at`` of it (``count_tokens(messages)``, by default about four characters a
    token), the model summarises all but the head and the last ``keep_last`` messages; the
    transcript and events keep everything.

    Around the final answer: ``evaluations`` (``fn(answer, loop)`` returning an
    :class:`Evaluation`, ``True``/``None`` to pass, or feedback text to fail) send the model back
    at most ``max_corrections`` times; ``postprocessors`` (``fn(answer, loop) -> str``) transform
    it. A tool that returns ``unity_nb.handoff(handle)`` ends the loop with that handle as result.
    ``tool_timeout`` bounds each tool call (its expiry is an error result the model reads).
    """
    private = sorted(k for k in options if k.startswith("_"))
    if private:
        raise UserError(f"start_loop takes no private options ({', '.join(private)})")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        call = current_call()
        if call is not None and not call.loop.run.event_loop.is_closed():
            return _made_on_loop_thread(call, task, options)
    return LoopHandle(task, **options)


# start_loop's signature: the task, then LoopOptions' fields (one list, shown by help())
start_loop.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("task", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str")]
    + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in inspect.signature(LoopOptions).parameters.values()]
    + [
        inspect.Parameter("parent", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="LoopHandle | None"),
        inspect.Parameter("detached", inspect.Parameter.KEYWORD_ONLY, default=False, annotation="bool"),
    ],
    return_annotation="LoopHandle",
)
