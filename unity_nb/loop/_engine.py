"""The cycle one loop's task drives::

    checkpoint (pause, requests, steering, compression) -> model turn -> tool calls -> repeat

until an answer, which passes evaluations and post-processors (:meth:`Engine.finalize`) before it
is final. The last of ``max_steps`` turns offers no tools, so an answer comes; a model that calls
a tool there anyway has the text it wrote beside the call taken as its answer (marked by a notification),
or, having written none, is told so and asked once more. A reply with nothing in it is not an answer: the
model is asked once more, and a second empty reply fails the run.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import events as ev
from .._errors import Stopped, UnityError
from ..models import retry_hook, wait_hook, weak_hook
from ._answers import call_hook, cited_numbers, evaluate, hook_name
from ._context import enter_loop, leave_loop
from ._face import Loop
from ._records import Message
from ._signals import from_signal
from ._status import Status
from ._typed import read_output

if TYPE_CHECKING:
    from ._requests import RequestHandle
    from ._run import Run
    from ._runner import ToolRunner
    from ._source import ToolSource
    from ._turn import Turn

__all__ = ("Driver", "Engine")


def _wait_hook(run: Run) -> Callable[[float, str], None]:
    """What a model's waits report to (``wait_hook``): the loop's run, held weakly (see ``models.weak_hook``)."""
    ref = weakref.ref(run)

    def hook(seconds: float, reason: str) -> None:
        alive = ref()
        if alive is not None:
            alive.emit(ev.ModelWait, seconds=seconds, reason=reason)

    return hook


class Driver:
    """Drives one loop's task from its start to its end (:meth:`run`); what happens in between is
    :meth:`drive`. It is given the loop's :class:`Run` and, held weakly, the :class:`Loop` it drives.

    :class:`Engine` drives model turns. A batch's engine is a plain driver over a run that has no
    turn of its own: its rows are the loops that call the model (``unity_nb.batch``)."""

    __slots__ = ("__weakref__", "_run", "_source")

    batch = False
    """Its loop's children are a batch's rows (the store lists a batch as one line)."""

    def __init__(self, run: Run, source: Loop) -> None:
        self._run = run
        self._source = weakref.ref(source)

    @property
    def source(self) -> Loop:
        """The loop this engine drives (held weakly: the loop holds its engine)."""
        source = self._source()
        if source is None:  # only reachable through an engine kept after its loop was dropped
            raise ReferenceError("this engine's loop is gone")
        return source

    def on_retry(self) -> Callable[[int, str, float], None] | None:
        """What the model's retries report to (``retry_hook``): the turn's, for a loop that calls a model."""
        return None

    def refusal(self, verb: str) -> str | None:
        """Why the steering ``verb`` is refused now (``None``: it is not). The handle's verb asks before it acts,
        on the loop's own thread: a batch at its budget refuses ``resume``."""
        return None

    async def steered(self, verb: str, message: str | None) -> None:
        """What this engine adds to the steering ``verb`` once the loop has applied it, on the loop's own thread:
        a batch hands an interjection to its running rows and keeps it for the rows not started yet."""

    async def drive(self) -> str:
        """From the first step to the answer's text."""
        raise NotImplementedError

    async def run(self) -> None:
        """The loop's task: drive, then end the handle with what happened."""
        h, source = self._run, self.source  # the task's frame keeps its loop alive while it runs, as before
        loop_token: contextvars.Token | None = enter_loop(source)
        retry_token = retry_hook.set(weak_hook(self.on_retry()))
        wait_token = wait_hook.set(_wait_hook(h))
        try:
            answer = await self.drive()
        except asyncio.CancelledError as err:
            if h.state.stop_reason is not None:
                h.end(Status.STOPPED, error=Stopped(h.state.stop_reason))
            else:  # cancelled from outside: not a stop of ours
                h.end(Status.STOPPED, error=err)
            return
        except Exception as err:  # noqa: BLE001 - the run failed: result() raises it
            h.end(Status.FAILED, error=err)
            return
        except (SystemExit, KeyboardInterrupt) as err:  # raised by code the run calls (a hook, a policy): handed
            if from_signal(err):  # on, it ends the event loop, not only this run; a signal's is the program's
                raise
            failed = UnityError(
                f"{type(err).__name__}({err}) was raised in the run (by a hook, a policy or a tool source it calls): "
                "it cannot end or interrupt the program, so the run failed"
            )
            failed.__cause__ = err
            h.end(Status.FAILED, error=failed)
            return
        except GeneratorExit:  # its event loop was closed under it: closed by the collector, not in its context
            loop_token = None
            raise
        finally:  # the task's context keeps no reference to the handle: no cycle through it
            if loop_token is not None:
                retry_hook.reset(retry_token)
                wait_hook.reset(wait_token)
                leave_loop(loop_token)
        h.end(Status.FINISHED, answer=answer)


class Engine(Driver):
    """Drives one loop from its first model call to its end. It is given the loop's :class:`Run`, turn, tool runner
    and :class:`ToolSource` (its work before each step) and, held weakly, the :class:`Loop` hooks and policies see
    (a batch's engine drives its rows through it)."""

    __slots__ = ("_runner", "_tools", "_turn", "corrections", "typed_retries")

    def __init__(self, run: Run, turn: Turn, runner: ToolRunner, tools: ToolSource, source: Loop) -> None:
        super().__init__(run, source)
        self._tools = tools
        self._turn = turn
        self._runner = runner
        self.corrections = 0
        """Times an evaluation sent the model back (a single-request loop's count)."""
        self.typed_retries = 0
        """Times an answer that was not the ``output`` type was sent back (once, then the run fails)."""

    def on_retry(self) -> Callable[[int, str, float], None] | None:
        return self._turn.on_retry

    async def checkpoint(self) -> bool:
        """Before each model call: honour pause, wait for requests (persistent multi-request
        loops), deliver steering, compress. True when a multi-request loop is done."""
        h = self._run
        while True:
            if h.gate.paused:  # an open gate is passed without a coroutine of its own (a step of every row)
                await h.gate.wait()
            if not h.config.multi or h.open_requests() or h.conversation.pending:
                break
            if not h.config.persist:
                return True
            await h.wait_for_request()
        self._tools.before_step()
        h.conversation.deliver()
        if h.config.context_window:  # else nothing is ever compressed
            await self._turn.maybe_compress()
        return False

    async def drive(self) -> str:
        h = self._run
        conv, turn, cfg = h.conversation, self._turn, h.config
        strays = empties = 0
        while True:
            if await self.checkpoint():  # a multi-request loop with nothing left to do
                return self._multi_answer()
            last = turn.last_step()
            budget = turn.budget_start

            def still_last(last: bool = last, budget: int = budget) -> bool:
                """This was the last step, and no request submitted meanwhile restarted the budget."""
                return last and turn.budget_start == budget

            offers = turn.offer()
            offered = [t for tools, _choice in offers for t in tools]
            reply = await turn.call_all(offers, conv.last_user)
            if reply is None:  # interrupted by an interjection: re-issue with it
                continue
            if h.gate.paused:  # a reply that lands while paused is processed on resume
                await h.gate.wait()
            turn.count += 1
            if reply.tool_calls and not offered:  # a stray call where no tools were offered
                names = [c.name for c in reply.tool_calls]
                reply.tool_calls = []
                why = f"its last step (max_steps={cfg.max_steps})" if last else "a step"
                if (reply.content or "").strip() and not h.config.multi:
                    # text beside the calls is the answer (UniqueAI's last step always ends with one): marked
                    self._runner.notify(
                        None,
                        f"the model called {', '.join(names)} at {why} where no tools were offered; "
                        "the calls did not run, and the text it wrote with them is its answer",
                    )
                else:
                    if strays:
                        raise UnityError(
                            f"the model called {names} at {why} where no tools were offered, instead of "
                            "answering, and again when asked once more: no answer to give, after "
                            f"{h.state.tool_calls} tool calls in {h.state.steps} model calls (their results are in "
                            "the transcript)"
                        )
                    strays += 1
                    conv.record(Message("assistant", reply.content or f"[called {', '.join(names)}]", kind="text"))
                    if reply.content:
                        conv.add({"role": "assistant", "content": reply.content})
                    conv.note(
                        f"[no tools are available at this step, so {', '.join(names)} did not run: "
                        "answer now with what you have]"
                    )
                    continue
            # an answer written before the latest interjection is not final: the model sees it next
            final = not reply.tool_calls and not conv.interjected
            if final and not (reply.content or "").strip():  # a reply that says nothing is not an answer
                said = f"finish_reason={reply.finish_reason!r}"
                if empties:
                    raise UnityError(f"the model answered nothing ({said}), and again when asked once more")
                empties += 1
                self._runner.notify(None, f"the model's reply was empty ({said}); it was asked once more")
                conv.note("[your reply was empty: answer now, in words]")
                continue
            if final and h.config.multi and len(h.open_requests()) > 1:
                final = False
                if not still_last():  # at the last step they fail below
                    open_ids = ", ".join(r.request_id for r in h.open_requests())
                    conv.note(
                        f"[{len(h.open_requests())} requests are still open: {open_ids}. "
                        "Complete each with final_answer(request_id, answer).]"
                    )
            entry, wire_msg, records = conv.add_reply(reply, final=final)
            if reply.tool_calls:
                self.think(reply.content or reply.thinking, [c.name for c in reply.tool_calls])
            if final:
                # corrections are counted per answer: in a multi-request loop, per request it completes
                open_now = h.open_requests()
                answering: Engine | RequestHandle = open_now[0] if h.config.multi and open_now else self
                heard = conv.heard
                if cfg.output is None and not cfg.evaluations and not cfg.postprocessors:
                    ok, text = True, reply.content or ""  # nothing to check or change (finalize's own answer)
                else:
                    ok, text = await self.finalize(reply.content or "", answering)
                if not ok:  # an evaluation sent the model back with its feedback
                    entry.kind = "text"
                    conv.note(text)
                    continue
                if conv.heard != heard:  # a person spoke while the answer was checked: the model hears it first
                    entry.kind = "text"
                    continue
                if text != (reply.content or ""):
                    entry.kind = "text"
                    conv.record(Message("assistant", text, kind="answer"))
                h.state.references = self.cited(text)
                if not h.config.multi:
                    return text
                open_now = h.open_requests()
                if open_now:
                    open_now[0]._finish(text)
                if still_last():
                    self.fail_open(f"the loop reached max_steps={cfg.max_steps} before answering it")
                continue
            if not reply.tool_calls:
                if h.config.multi and still_last():  # a plain reply at the last step
                    self.fail_open(f"the loop reached max_steps={cfg.max_steps} before answering it")
                continue
            await self._runner.run(records, wire_msg, offered)  # a call of a tool not offered does not run
            done = self._ended_by_tool()
            if done is not None:
                return done
            if h.config.multi and still_last():
                self.fail_open(f"the loop reached max_steps={cfg.max_steps} before answering it")

    def think(self, content: str | None, calls: list[str]) -> None:
        """A short progress line: what the model said it was doing, or which tools it called."""
        h = self._run
        line = (content or "").strip().split("\n", 1)[0]
        line = line if len(line) <= 160 else line[:157] + "..."
        text = line or f"calling {', '.join(dict.fromkeys(calls))}"
        lines = h.state.thinking
        if lines and lines[-1] == text:
            text = lines[-1]  # the same line again ("calling step"): one string kept, not one a step
        lines.append(text)
        h.emit(ev.ThinkingStep, text=text)

    def _ended_by_tool(self) -> str | None:
        """A tool handed control to a child or finished the loop with a value: the loop's answer text."""
        h, runner = self._run, self._runner
        if runner.handoff is not None:
            child = runner.handoff
            h.state.result_object = child
            text = f"[control handed to {child.name!r}, which goes on by itself]"
        elif h.state.finishing is not None:
            value, text = h.state.finishing
            typed = h.config.output
            if typed is not None:  # a value a plan or tool ended the loop with: typed as asked, or the run fails
                try:
                    value = read_output(typed, value)
                except ValueError as err:
                    raise UnityError(f"the loop ended with a value that is not a {typed.__name__}: {err}") from None
            h.state.result_object = value
        else:
            return None
        h.conversation.record(Message("assistant", text, kind="answer"))
        return text

    # -- answers ---------------------------------------------------------------------------

    def cited(self, text: str) -> list:
        if not self._run.state.all_references:  # nothing to cite (a loop whose tools returned no reference)
            return []
        by_number = {r.number: r for r in self._run.state.all_references}
        return [by_number[n] for n in cited_numbers(text) if n in by_number]

    async def finalize(self, answer: str, answering: Engine | RequestHandle) -> tuple[bool, str]:
        """Evaluations, then post-processors. ``(False, feedback)`` sends the model back (at most
        ``max_corrections`` times per loop or request answering: the loop, or one request); else ``(True, answer)``."""
        h, cfg = self._run, self._run.config
        if cfg.output is not None and not cfg.multi:
            try:
                h.state.result_object = read_output(cfg.output, answer)
            except ValueError as err:
                if self.typed_retries:
                    name = cfg.output.__name__
                    raise UnityError(f"the answer is not a {name}, also when asked again: {err}") from None
                self.typed_retries += 1
                note = (f"[your answer is not a valid {cfg.output.__name__} ({err}). Answer again with one JSON "
                        "object matching the schema, and nothing else.]")
                # the check of the answer's type, as an evaluation: its event carries the note (the store's entry)
                h.emit(ev.EvaluationRun, name=f"output is a {cfg.output.__name__}", passed=False, feedback=str(err),
                       sent_back=True, note=note)
                h.conversation.record(Message("user", note, kind="evaluation"))
                return False, note
        verdicts = [await evaluate(fn, answer, self.source) for fn in cfg.evaluations]
        h.state.evaluation_results.extend(verdicts)
        failed = [v for v in verdicts if not v.passed]
        send_back = bool(failed) and answering.corrections < cfg.max_corrections
        note = ""
        if send_back:
            problems = "; ".join(f"{v.name}: {v.feedback}" for v in failed)
            note = f"[your answer did not pass evaluation ({problems}). Correct it and answer again.]"
        for verdict in verdicts:
            h.emit(
                ev.EvaluationRun,
                name=verdict.name,
                passed=verdict.passed,
                feedback=verdict.feedback,
                attempt=answering.corrections + 1,
                sent_back=send_back and not verdict.passed,
                note=note if failed and verdict is failed[-1] else "",  # the transcript entry, once (stored)
            )
        if send_back:
            answering.corrections += 1
            h.conversation.record(Message("user", note, kind="evaluation"))
            return False, note
        for fn in cfg.postprocessors:
            try:
                value = await call_hook(fn, answer, self.source)
            except Exception as err:  # noqa: BLE001 - the answer stands; the failure is recorded
                self._runner.notify(None, f"post-processor {hook_name(fn)} failed: {type(err).__name__}: {err}")
                continue
            if isinstance(value, str):
                answer = value
        return True, answer

    def _multi_answer(self) -> str:
        h = self._run
        answers = {r.request_id: r.answer for r in h.requests if r.status is Status.FINISHED}
        h.state.result_object = answers
        return f"completed requests: {', '.join(answers) or 'none'}"

    def fail_open(self, why: str) -> None:
        for r in self._run.open_requests():
            r._end(Status.FAILED, UnityError(f"request {r.request_id}: {why}"))
