"""``%unity`` and ``%%unity``: start operations in the background and steer them by name."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.display import display
from traitlets import Bool, Enum, Float, Integer, Unicode, observe

from .._errors import HandleStateError, ModelConfigError, UserError
from ..batch import OPERATORS
from ..loop import VERBS, LoopHandle, start_ask
from ..models import set_default_model
from ._approvals import always_call
from ._args import HELP, SETTINGS, SUBCOMMANDS, Command, check_companions, check_setting, overview, parse, short_usage
from ._commands import usage_hint
from ._magics_model import NO_MODEL, model_command
from ._magics_tasks import resume_from_store, show_transcript, task_command, tasks_table
from ._shown import Widgets
from ._target import assigned_name

__all__ = ("UnityMagics",)

log = logging.getLogger("unity_nb.magics")

_VERB_METHODS = frozenset({"resume", "stop", "ask"})
"""The steering verbs these magics handle with a method of their own (``_resume``, ...); the others by ``_verb``."""


@magics_class
class UnityMagics(Magics):
    """The ``%unity`` magics. Settings: ``%config UnityMagics.default_model = "gpt-4.1-mini"``."""

    default_model = Unicode(
        "", help="Model name used when none was set with %unity model (else $UNITY_NB_MODEL).",
    ).tag(config=True)
    base_url = Unicode(
        "", help="OpenAI-compatible server for the default model (else $OPENAI_BASE_URL).",
    ).tag(config=True)
    max_steps = Integer(30, help="Default max_steps of an operation.").tag(config=True)
    max_updates_per_second = Float(
        10.0, help="Widget refresh rate while a handle streams (coalesced).",
    ).tag(config=True)
    show_widgets = Bool(True, help="Display a live widget for each operation started.").tag(config=True)
    approval = Unicode("never", help="Default approval mode of %unity act: never, first or always.").tag(config=True)
    code_timeout = Float(
        60.0, help="Seconds a plan may compute without awaiting before it is interrupted (0: never).",
    ).tag(config=True)
    store_path = Unicode(
        help="SQLite file recording every loop's events (else $UNITY_NB_STORE, else .unity_nb/state.db); "
        "'off' disables.",
    ).tag(config=True)
    context_window = Integer(
        0, help="Default --context-window of %unity act: the model's window in tokens (0: no compression).",
    ).tag(config=True)
    compress_at = Float(0.8, help="Default --compress-at: the share of the window that starts compression.").tag(
        config=True
    )
    keep_last = Integer(8, help="Default --keep-last: messages kept verbatim when compressing.").tag(config=True)
    time_awareness = Bool(False, help="Default --time-awareness: note the clock after tool results.").tag(
        config=True
    )
    max_parallel_tools = Integer(8, help="Default --max-parallel-tools: tool calls run at once.").tag(config=True)
    managers = Bool(
        False, help="Default --managers: plans reach the managers (knowledge, data, functions, ...) as primitives.",
    ).tag(config=True)
    task_parent_context = Enum(
        ("never", "always", "model"), "never",
        help="Whether a child task sees its parent's conversation: never, always, or model (spawn_task decides).",
    ).tag(config=True)
    task_summaries = Enum(
        ("truncate", "model"), "truncate", help="Each ended task turn's summary: truncate, or model (written by it).",
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell, **kwargs)
        self.handles: dict[str, LoopHandle] = {}
        """Every operation started here, by name (live and finished)."""
        self.shown = Widgets(shell, ask=self.ask_about)
        """The widgets shown here (see :class:`Widgets`)."""
        self.widgets: dict[str, Any] = self.shown.by_name
        """The newest widget of each operation name."""
        self.steering: set[asyncio.Future] = set()
        """Steering calls the magics scheduled that have not ended yet (each one's outcome is reported)."""
        self.model: Any = None
        self._made_model = False
        self._count = 0
        self._line: str | None = None  # the %unity line running now
        self._store: Any = None
        self._registry: Any = None
        self._tasks_manager: Any = None

    @property
    def user_ns(self) -> dict:
        return self.shell.user_ns if self.shell is not None else {}

    @property
    def store(self) -> Any:
        """The store recording the default bus's events (opened on first use; ``None`` when off)."""
        if self._store is None:
            from ..events import default_bus
            from ..store import Store, default_store_path

            path = self.store_path or default_store_path()
            if path == "off":
                return None
            try:
                self._store = Store(path)
            except UserError as err:
                off = "(set %config UnityMagics.store_path = 'off' to run without a store)"
                raise UsageError(f"{err}\n{off}") from None
            self._store.attach(default_bus())
            self._store.add_problem_listener(self._store_problem)
        return self._store

    @observe("store_path")
    def _store_path_changed(self, change: Any) -> None:
        """``%config UnityMagics.store_path = ...`` after loading (which opened one): the store named records from now
        on, none for 'off'. An instance unloaded (%reload_ext: %config reaches every one made) opens none."""
        loaded = self.shell is not None and self.shell.magics_manager.registry.get("UnityMagics") is self
        if loaded and change["new"] != change["old"] and (self._store is not None or change["old"] == "off"):
            if self._store is not None:
                self._store.close()
            self._store = self._registry = self._tasks_manager = None
            self.store  # noqa: B018 - record every loop from now on, as on loading

    def needed_store(self, what: str) -> Any:
        """The store, or a UsageError saying it is off and ``what`` (why it is needed)."""
        store = self.store
        if store is None:
            raise UsageError(f"the store is off (%config UnityMagics.store_path = 'off'), and {what}")
        return store

    @property
    def tasks_manager(self) -> Any:
        """The durable tasks of the store (``%unity tasks``, ``%unity task``, ``primitives.tasks``)."""
        if self._tasks_manager is None:
            from ..managers import TasksManager

            self._tasks_manager = TasksManager(
                store=self.needed_store("durable tasks live in it"), namespace=self.user_ns,
                actor_options={"code_timeout": self.code_timeout or None},
            )
        self._tasks_manager.parent_context = self.task_parent_context  # %config may change them at any time
        self._tasks_manager.summaries = self.task_summaries
        self._tasks_manager.actor_options["code_timeout"] = self.code_timeout or None
        return self._tasks_manager

    @property
    def registry(self) -> Any:
        """The managers ``%unity act --managers`` gives the actor, over this kernel's store and namespace."""
        if self._registry is None:
            from .. import managers as m

            store = self.needed_store("--managers keep their state in it")
            self._registry = m.Registry([
                m.KnowledgeManager(store=store), m.DataManager(self.user_ns), m.FunctionsManager(),
                m.GuidanceManager(store=store), m.TranscriptsManager(store=store), self.tasks_manager,
            ])
        return self._registry

    def _store_problem(self, message: str | None) -> None:
        """Show why events wait to be stored (a full disk, ...) in the live operations' widgets; clear it after."""
        for widget in list(self.widgets.values()):
            if message is not None and not widget.handle.done():
                widget.notice = message
            elif message is None and widget.notice.startswith("store: "):
                widget.notice = ""

    def set_model(self, model: Any, *, made: bool) -> None:
        """Use ``model`` from now on; a model these magics made earlier has its connections closed."""
        old, self.model = self.model, model
        set_default_model(model)
        if self._made_model and old is not None and old is not model:
            old.close_now()
        self._made_model = made

    def close(self) -> None:
        self.shown.retire_all()  # %unload_ext: each closed once its operation is done
        if self.model is not None:
            set_default_model(None)
        if self._made_model and self.model is not None:
            self.model.close_now()  # %unload_ext: its connections go with it (a running loop makes a new pool)
        if self._store is not None:
            self._store.close()
            self._store = None
        self._registry = self._tasks_manager = None

    # -- entry ----------------------------------------------------------------------------

    @line_cell_magic
    @no_var_expand  # what the person typed: `{title}` is a template, `$x` text, not the notebook's variables
    def unity(self, line: str, cell: str | None = None) -> Any:
        cmd = parse(line, cell)
        check_companions(cmd)  # (a resume reads its stored line with parse alone: what it ran, it runs again)
        self._line = line if cell is None else None  # (a line magic may be assigned: its target names the operation)
        try:
            # a declared subcommand, or a steering verb (VERBS) with a method of its own here, else any verb
            if cmd.sub in SUBCOMMANDS or cmd.sub in _VERB_METHODS:
                run = getattr(self, f"_{cmd.sub}")
            else:
                run = self._operator if cmd.sub in OPERATORS else self._verb
            return run(cmd)
        except UserError as err:
            raise UsageError(f"{err}\n{usage_hint(cmd.sub)}") from None
        except UsageError as err:  # its line and where the help is, never the subcommand's whole usage under it
            raise UsageError(short_usage(str(err), cmd.sub)) from None
        finally:
            self._line = None

    unity.__doc__ = "Start and steer steerable LLM operations.\n\n" + overview()

    # -- subcommands ----------------------------------------------------------------------

    def _help(self, cmd: Command) -> None:
        if cmd.name:
            print(HELP[cmd.name])
        else:
            print("%unity: start and steer steerable LLM operations.\n\n" + overview())

    def _model(self, cmd: Command) -> Any:
        return model_command(self, cmd)

    def current_model(self) -> Any:
        """The configured model; a UsageError saying how to configure one if there is none."""
        if self.model is None:
            name = self.default_model or os.environ.get("UNITY_NB_MODEL")
            if not name:
                raise UsageError(NO_MODEL)
            from ..models import OpenAIModel

            try:
                self.set_model(OpenAIModel(name, base_url=self.base_url or None), made=True)
            except ModelConfigError as err:
                raise UsageError(f"{err}\n\n{NO_MODEL}") from None
        return self.model

    def _new_name(self, name: str | None, sub: str = "act") -> tuple[str, LoopHandle | None, str]:
        """A name for a new operation, the finished operation it replaces (if any), and what to say of the name; a
        live operation's name is refused with a free one suggested. Without one, the variable the line is assigned
        to (``labels = %unity map ...``: ``labels``; ``labels-2`` while a live ``labels`` runs, said), else ``hN``."""
        if name is None and self._line is not None:
            assigned = assigned_name(self._line)
            old = self.handles.get(assigned or "")
            if assigned is not None and (old is None or old.done()):
                return assigned, old, ""
            if assigned is not None:
                n = 2
                while f"{assigned}-{n}" in self.handles:
                    n += 1
                free = f"{assigned}-{n}"
                return free, None, (f"The operation named {assigned!r} still runs, so this one is {free!r}: steer "
                                    f"it as {free} (%unity stop {free}); %unity stop {assigned} stops the earlier one.")
        if name is None:
            self._count += 1
            while f"h{self._count}" in self.handles:
                self._count += 1
            return f"h{self._count}", None, ""
        old = self.handles.get(name)
        if old is not None and not old.done():
            n = 2
            while f"{name}-{n}" in self.handles:
                n += 1
            raise UsageError(
                f"{name} is still {old.status.value}: stop it first (%unity stop {name}) or pick another name, "
                f"e.g. {name}-{n}\n\n{HELP[sub]}"
            )
        return name, old, ""

    def loop_options(self, options: dict) -> dict:
        """start_loop's options from ``%unity act`` options, the traitlets giving the defaults."""
        out: dict = {
            "max_steps": options.get("max_steps", self.max_steps), "multi": options.get("multi", False),
            "time_awareness": options.get("time_awareness", self.time_awareness),
        }
        for name in SETTINGS:
            if name not in options and (name != "context_window" or self.context_window):
                check_setting(name, getattr(self, name))
        out["max_parallel_tools"] = options.get("max_parallel_tools", self.max_parallel_tools)
        window = options.get("context_window", self.context_window)
        if window:
            out.update(context_window=window, compress_at=options.get("compress_at", self.compress_at),
                       keep_last=options.get("keep_last", self.keep_last))
        elif "compress_at" in options or "keep_last" in options:
            raise UsageError(
                "--compress-at and --keep-last tune compression, which needs --context-window TOKENS "
                f"(or %config UnityMagics.context_window = 32000)\n\n{HELP['act']}"
            )
        return out

    def actor(self, model: Any, options: dict) -> Any:
        """The actor of one ``%unity act``: the notebook's namespace (and the managers with ``--managers``)."""
        actor_options = {
            "namespace": self.user_ns, "approval": options.get("approval", self.approval),
            "code_timeout": options.get("code_timeout", self.code_timeout) or None,
        }
        from ..actor import Actor
        managers = bool(options.get("managers", self.managers))
        actor = self.registry.actor(model, **actor_options) if managers else Actor(model, **actor_options)
        actor.recorded["managers"] = managers  # with its start: %unity resume makes it again as it was
        return actor

    def start(
        self, name: str | None, launch: Callable[[str], LoopHandle], *, sub: str = "act", notice: str = "",
    ) -> LoopHandle:
        """Start an operation in the background under a free name (``launch(name)`` starts it) and show
        its widget, whose notice says ``notice`` (and which earlier operation of that name it replaces)."""
        self.current_model()
        self.store  # noqa: B018 - record this operation from its first event
        name, old, renamed = self._new_name(name, sub)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                f"%unity {sub} needs the kernel's running event loop: use it in a Jupyter kernel (ipykernel >= 5.5.6)"
            ) from None
        from . import _output

        _output.install()  # again: something (say %%capture) may have swapped the streams since
        _output.install_display(self.shell)
        handle = launch(name)
        self.handles[name] = handle
        if old is not None:
            notice = f"{notice} " if notice else ""
            notice += f"This {name!r} replaced an earlier operation of that name ({old.status.value})."
        if renamed:  # its variable's name was taken: the name it has is said, where it is seen (else printed)
            notice = f"{renamed} {notice}" if notice else renamed
            if not self.show_widgets:
                print(renamed)
        note = getattr(getattr(handle, "spending", None), "note", None)
        if note:  # it would clearly exceed its budget: said once, before it gets there (the widget's, else printed)
            notice = f"{notice} {note}" if notice else note
            if not self.show_widgets:
                print(note)
        self._show_widget(handle, name, notice=notice)
        return handle

    _told_approval = False
    """Whether this kernel was told, at its first ``--approval never`` act, that plans run unasked."""

    def _act(self, cmd: Command) -> LoopHandle:
        options = self.loop_options(cmd.options)
        actor = self.actor(self.current_model(), cmd.options)
        notice = ""
        tell = cmd.options.get("approval", self.approval) == "never" and not UnityMagics._told_approval
        if tell:
            notice = ("The model's plans run in this kernel, on your variables, without asking (--approval never). "
                      "To approve each plan first: %unity act --approval first ..., or for every operation "
                      "%config UnityMagics.approval = \"first\".")
        handle = self.start(cmd.options.get("name"), lambda name: actor.act(cmd.text, name=name, **options),
                            notice=notice)
        if tell:  # once per kernel, once an act has started and said it (an act refused at its line said nothing)
            UnityMagics._told_approval = True
            if not self.show_widgets:
                print(notice)
        return handle

    def _map(self, cmd: Command, *, done: dict | None = None, name: str | None = None, notice: str = "",
             batches: list | None = None) -> Any:
        from .._registry import registered_tools
        from ..batch import map_rows

        try:
            items = eval(cmd.name or "", self.user_ns)
        except Exception as err:  # noqa: BLE001 - said back as a usage error
            problem = f"cannot evaluate the items {cmd.name!r}: {type(err).__name__}: {err}"
            raise UsageError(f"{problem}\n\n{HELP['map']}") from None
        o = cmd.options
        tools = [t for t in registered_tools() if not t.ref_only]
        options: dict[str, Any] = {
            "concurrency": o.get("concurrency", 8), "max_steps": o.get("max_steps", self.max_steps), "tools": tools,
            "columns": o.get("columns"), "rate": o.get("rate"), "tool_timeout": o.get("tool_timeout"),
            "expected_output_tokens": o.get("expected_output_tokens"),
        }
        if o.get("via") == "batch":  # one request a row through the provider's Batch API: no tools
            options.update(via="batch", tools=[], batch_poll=o.get("batch_poll"), batches=batches)
        if o.get("estimate"):  # runs nothing: what it would cost (against its --budget), printed
            from ._magics_ops import estimated

            print(estimated(map_rows(items, cmd.text, model=self.current_model(), estimate=True, **options),
                            o.get("budget")))
            return None
        options["budget"] = o.get("budget")
        options["cache"] = False if o.get("no_cache") else (self.store or False)
        if o.get("backend") == "ray":  # the rows on a Ray cluster
            options.update(backend="ray", ray_address=o.get("ray_address"), ray_workers=o.get("ray_workers"))
        return self.start(
            name or o.get("name"),
            lambda key: map_rows(items, cmd.text, model=self.current_model(), name=key, done=done, label=cmd.line,
                                 **options),
            sub="map", notice=notice,
        )

    def _operator(self, cmd: Command) -> Any:
        """``%unity filter|extract|topk|join|agg`` (any operator of the registry): ``_magics_ops``."""
        from ._magics_ops import start_operator

        return start_operator(self, cmd)

    def _show_widget(self, handle: LoopHandle, key: str | None = None, *, notice: str = "") -> None:
        if self.show_widgets:
            self.shown.show(handle, key, notice=notice, max_hz=self.max_updates_per_second)

    def display_handle(self, handle: LoopHandle) -> None:
        """How a handle displays in this kernel (registered by the extension): its live widget. A handle
        whose widget this cell already shows (``%unity act ...`` as the cell's last line) shows nothing
        more, so no ``Out[]`` text saying "running" stays under a widget that says "finished"."""
        if self.shown.shown_here(handle):
            return
        if not self.show_widgets:
            display({"text/plain": repr(handle)}, raw=True)
            return
        self.shown.display(handle, max_hz=self.max_updates_per_second)

    def _list(self, cmd: Command) -> Any:
        import pandas as pd

        rows = [
            {
                "name": n, "status": h.status.value, "steps": h.steps, "tool_calls": h.tool_calls,
                "tokens_in": h.usage.input_tokens, "tokens_out": h.usage.output_tokens,
                "tokens_estimated": h.usage.estimated, "elapsed_s": round(h.state.elapsed, 1), "task": h.task[:60],
            }
            for n, h in self.handles.items()
        ]
        columns = ["name", "status", "steps", "tool_calls", "tokens_in", "tokens_out", "tokens_estimated", "elapsed_s",
                   "task"]
        return pd.DataFrame(rows, columns=columns)

    def _history(self, cmd: Command) -> Any:
        store = self.store
        if store is None:
            raise UsageError(
                f"the store is off (UnityMagics.store_path = 'off'): no history is kept\n\n{HELP['history']}"
            )
        return store.history(limit=cmd.options.get("limit"))

    def _show(self, cmd: Command) -> Any:
        from ._batch_view import batch_table

        rows = batch_table(self, cmd.name or "")  # a batch: its rows and answers
        return rows if rows is not None else show_transcript(self, cmd.name or "")

    def _tasks(self, cmd: Command) -> Any:
        return tasks_table(self)

    def _task(self, cmd: Command) -> Any:
        return task_command(self, cmd)

    def _find(self, cmd: Command) -> LoopHandle:
        handle = self.handles.get(cmd.name or "")
        if handle is None:
            known = ", ".join(self.handles) or "none yet"
            raise UsageError(f"no operation named {cmd.name!r} (known: {known})\n\n{HELP[cmd.sub]}")
        return handle

    def _live(self, cmd: Command) -> LoopHandle:
        handle = self._find(cmd)
        if handle.done():
            raise UsageError(f"cannot {cmd.sub} {handle.name!r}: it is {handle.status.value}\n\n{HELP[cmd.sub]}")
        return handle

    def _steer(self, cmd: Command, call: Coroutine[Any, Any, Any]) -> asyncio.Future:
        """Run a steering call in the background. It is referenced until it ends (``self.steering``), and
        its failure is reported in the log and the operation's widget, never left unobserved (the operation
        may end between this line and the call: that is said, not raised)."""
        task = asyncio.ensure_future(call)
        self.steering.add(task)

        def report(done: asyncio.Future) -> None:
            self.steering.discard(done)
            if done.cancelled():
                problem: BaseException | None = asyncio.CancelledError("the steering call was cancelled")
            else:
                problem = done.exception()
            if problem is None:
                return
            message = f"%unity {cmd.sub} {cmd.name}: {problem or type(problem).__name__}"
            if isinstance(problem, HandleStateError | asyncio.CancelledError):
                log.warning("%s", message)
            else:
                log.error("%s", message, exc_info=problem)
            widget = self.widgets.get(cmd.name or "")
            if widget is not None:
                widget.steering_failed(message)

        task.add_done_callback(report)
        return task

    def _verb(self, cmd: Command) -> None:
        """A steering verb of the loop's table (``VERBS``) on operation NAME; its message is the rest of the line."""
        handle = self._live(cmd)
        if cmd.sub == "pause" and all(x.status.value == "paused" for x in handle.tree if not x.done()):
            print(f"{handle.name} is paused already, and all under it: nothing to pause "
                  f"(%unity resume {handle.name} goes on)")
            return
        method = getattr(handle, cmd.sub)
        self._steer(cmd, method(cmd.text) if VERBS[cmd.sub].message != "none" else method())

    def _resume(self, cmd: Command) -> Any:
        if cmd.name not in self.handles:
            return resume_from_store(self, cmd)
        handle = self._live(cmd)
        budget = cmd.options.get("budget")
        if budget is not None:
            if not hasattr(handle, "set_budget"):
                raise UsageError(f"--budget is for a batch (%unity map), which {handle.name!r} is not\n\n"
                                 f"{HELP['resume']}")
            try:
                handle.set_budget(budget)
            except UserError as err:
                raise UsageError(str(err)) from None
        from ..batch import MapHandle

        if isinstance(handle, MapHandle) and handle.spending.reached:  # refused at the line, not later in the log
            raise UsageError(f"cannot resume {handle.name!r}: it {handle.spending.message()}")
        if budget is None and not any(x.status.value == "paused" for x in handle.tree):
            print(f"{handle.name} is {handle.status.value} and nothing under it is paused: nothing to resume")
            return None
        self._steer(cmd, handle.resume())
        return None

    def _stop(self, cmd: Command) -> None:
        handle = self._find(cmd)
        if handle.done():
            print(f"{handle.name} had already {handle.status.value}: nothing to stop")
        else:
            self._steer(cmd, handle.stop(cmd.text or "stopped with %unity stop"))

    def _submit(self, cmd: Command) -> Any:
        handle = self._live(cmd)
        if not handle.run.config.multi:
            raise UsageError(
                f"{handle.name!r} serves one request: start it with `%unity act --multi ...` to submit more "
                f"(or use %unity interject {handle.name} ...)\n\n{HELP[cmd.sub]}"
            )
        return handle.requests.submit(cmd.text)

    def _waiting_plan(self, cmd: Command) -> Any:
        handle = self._live(cmd)
        if not handle.inbox.approvals:
            raise UsageError(f"{handle.name!r} has no plan or tool call waiting for approval\n\n{HELP[cmd.sub]}")
        return handle

    def _approve(self, cmd: Command) -> None:
        handle = self._waiting_plan(cmd)
        if cmd.options.get("always"):
            self._steer(cmd, handle.inbox.approve(always_call(handle, cmd.text), always=True))
        elif cmd.text:
            raise UsageError(f"a tool's name goes after --always: %unity approve {handle.name} --always "
                             f"{cmd.text.split()[0]}\n\n{HELP['approve']}")
        else:
            self._steer(cmd, handle.inbox.approve())

    def _skip(self, cmd: Command) -> None:
        self._steer(cmd, self._waiting_plan(cmd).inbox.skip(reason=cmd.text or None))

    def _answer(self, cmd: Command) -> None:
        handle = self._live(cmd)
        pending = handle.inbox.questions
        call = cmd.options.get("call")
        waiting = "; ".join(f"--call {p['call_id']} ({p['loop']}): {p['question']}" for p in pending)
        if call is not None:
            if all(p["call_id"] != call for p in pending):
                raise UsageError(
                    f"{handle.name!r} has no question with call id {call!r}; waiting: {waiting or 'none'}"
                    f"\n\n{HELP['answer']}"
                )
        elif not pending:
            raise UsageError(f"{handle.name!r} has no question waiting for an answer\n\n{HELP['answer']}")
        elif len(pending) > 1:
            raise UsageError(
                f"{handle.name!r} has {len(pending)} questions waiting: say which with "
                f"%unity answer {handle.name} --call ID TEXT. Waiting: {waiting}\n\n{HELP['answer']}"
            )
        else:
            call = pending[0]["call_id"]
        self._steer(cmd, handle.inbox.answer(call, cmd.text))

    def _ask(self, cmd: Command) -> LoopHandle:
        handle = self.ask_about(self._find(cmd), cmd.text)
        self._show_widget(handle)
        return handle

    def ask_about(self, target: LoopHandle, question: str) -> LoopHandle:
        """An Ask about ``target`` (``%unity ask``, and the Ask button of a widget shown here): an operation like the
        others, in ``%unity list`` with its state and stopped by name (a model call that hangs too), named
        ``ask-NAME`` (``ask-NAME-2``, ... while an earlier one of that name runs)."""
        name = base = f"ask-{target.name}"
        n = 2
        while name in self.handles and not self.handles[name].done():
            name, n = f"{base}-{n}", n + 1
        handle = self.handles[name] = start_ask(target, question, name=name)
        return handle
