"""``%unity`` and ``%%unity``: start operations in the background and steer them by name."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display
from traitlets import Bool, Float, Integer, Unicode

from .._errors import HandleStateError, ModelConfigError, UserError
from ..loop import LoopHandle
from ..models import set_default_model
from ._args import HELP, Command, parse

__all__ = ("UnityMagics",)

log = logging.getLogger("unity_nb.magics")

_NO_MODEL = (
    "no model is configured: run `%unity model gpt-4.1-mini` (with OPENAI_API_KEY set in the environment), "
    "`%unity model NAME --base-url http://localhost:11434/v1` for a local OpenAI-compatible server "
    "(or set OPENAI_BASE_URL), or `%unity model --var my_model` for a Model object in a variable"
)


@magics_class
class UnityMagics(Magics):
    """The ``%unity`` magics. Settings: ``%config UnityMagics.default_model = "gpt-4.1-mini"``."""

    default_model = Unicode("", help="Model name used when none was set with %unity model (else $UNITY_NB_MODEL).").tag(config=True)
    base_url = Unicode("", help="OpenAI-compatible server for the default model (else $OPENAI_BASE_URL).").tag(config=True)
    max_steps = Integer(30, help="Default max_steps of an operation.").tag(config=True)
    max_updates_per_second = Float(10.0, help="Widget refresh rate while a handle streams (coalesced).").tag(config=True)
    show_widgets = Bool(True, help="Display a live widget for each operation started.").tag(config=True)
    approval = Unicode("never", help="Default approval mode of %unity act: never, first or always.").tag(config=True)
    code_timeout = Float(60.0, help="Seconds a plan may compute without awaiting before it is interrupted.").tag(config=True)
    store_path = Unicode(
        help="SQLite file recording every loop's events (else $UNITY_NB_STORE, else .unity_nb/state.db); 'off' disables.",
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell, **kwargs)
        self.handles: dict[str, LoopHandle] = {}
        """Every operation started here, by name (live and finished)."""
        self.widgets: dict[str, Any] = {}
        self.model: Any = None
        self._made_model = False
        self._count = 0
        self._store: Any = None

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
                raise UsageError(f"{err}\n(set %config UnityMagics.store_path = 'off' to run without a store)") from None
            self._store.attach(default_bus())
            self._store.add_problem_listener(self._store_problem)
        return self._store

    def _store_problem(self, message: str | None) -> None:
        """Show why events wait to be stored (a full disk, ...) in the live operations' widgets; clear it after."""
        for widget in list(self.widgets.values()):
            if message is not None and not widget.handle.done():
                widget.notice = message
            elif message is None and widget.notice.startswith("store: "):
                widget.notice = ""

    def _set_model(self, model: Any, *, made: bool) -> None:
        """Use ``model`` from now on; a model these magics made earlier has its connections closed."""
        old, self.model = self.model, model
        set_default_model(model)
        if self._made_model and old is not None and old is not model:
            old.close_now()
        self._made_model = made

    def close(self) -> None:
        if self.model is not None:
            set_default_model(None)
        if self._made_model and self.model is not None:
            self.model.close_now()  # %unload_ext: its connections go with it (a running loop makes a new pool)
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- entry ----------------------------------------------------------------------------

    @line_cell_magic
    def unity(self, line: str, cell: str | None = None) -> Any:
        cmd = parse(line, cell)
        try:
            return getattr(self, f"_{cmd.sub}")(cmd)
        except UserError as err:
            raise UsageError(f"{err}\n\n{HELP[cmd.sub]}") from None

    unity.__doc__ = "Start and steer steerable LLM operations.\n\n" + "\n".join(HELP.values())

    # -- subcommands ----------------------------------------------------------------------

    def _help(self, cmd: Command) -> None:
        if cmd.name:
            print(HELP[cmd.name])
        else:
            print("%unity: start and steer steerable LLM operations.\n\n" + "\n".join(HELP.values()))

    def _model(self, cmd: Command) -> Any:
        from ..models import OpenAIModel

        var = cmd.options.get("var")
        if var:
            obj = self.shell.user_ns.get(var)
            if obj is None or not callable(getattr(obj, "complete", None)):
                raise UsageError(f"`{var}` is not a model (it needs an async `complete` method)\n\n{HELP['model']}")
            self._set_model(obj, made=False)
        elif cmd.name:
            try:
                self._set_model(OpenAIModel(cmd.name, base_url=cmd.options.get("base_url") or self.base_url or None), made=True)
            except ModelConfigError as err:
                raise UsageError(f"{err}\n\n{HELP['model']}") from None
        elif cmd.options.get("base_url"):
            raise UsageError(f"--base-url needs a model name\n\n{HELP['model']}")
        print(self._describe_model())
        return None

    def _describe_model(self) -> str:
        model = self.model
        if model is None:
            name = self.default_model or os.environ.get("UNITY_NB_MODEL")
            return f"model: {name} (default, not yet used)" if name else f"model: none. {_NO_MODEL}"
        base = getattr(getattr(model, "client", None), "base_url", None)
        return f"model: {model.name}" + (f" at {base}" if base else "")

    def current_model(self) -> Any:
        """The configured model; a UsageError saying how to configure one if there is none."""
        if self.model is None:
            name = self.default_model or os.environ.get("UNITY_NB_MODEL")
            if not name:
                raise UsageError(_NO_MODEL)
            from ..models import OpenAIModel

            try:
                self._set_model(OpenAIModel(name, base_url=self.base_url or None), made=True)
            except ModelConfigError as err:
                raise UsageError(f"{err}\n\n{_NO_MODEL}") from None
        return self.model

    def _act(self, cmd: Command) -> LoopHandle:
        model = self.current_model()
        self.store  # noqa: B018 - record this operation from its first event
        name = cmd.options.get("name")
        if name is None:
            self._count += 1
            while f"h{self._count}" in self.handles:
                self._count += 1
            name = f"h{self._count}"
        elif name in self.handles and not self.handles[name].done():
            raise UsageError(f"an operation named {name!r} is still {self.handles[name].status.value}; choose another --name\n\n{HELP['act']}")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError("%unity act needs the kernel's running event loop: use it in Jupyter (ipykernel >= 7.4)") from None
        from ..actor import Actor
        from . import _output

        _output.install()  # again: something (say %%capture) may have swapped the streams since
        _output.install_display(self.shell)
        actor = Actor(
            model, namespace=self.shell.user_ns, approval=cmd.options.get("approval", self.approval),
            code_timeout=cmd.options.get("code_timeout", self.code_timeout) or None,
        )
        handle = actor.act(
            cmd.text, name=name, max_steps=cmd.options.get("max_steps", self.max_steps), multi=cmd.options.get("multi", False),
        )
        self.handles[name] = handle
        self._show(handle)
        return handle

    def _show(self, handle: LoopHandle) -> None:
        if not self.show_widgets:
            return
        from ._widget import HandleWidget

        widget = HandleWidget(handle, max_hz=self.max_updates_per_second)
        self.widgets[handle.name] = widget
        shown = display(widget, display_id=True)
        if shown is not None:
            # once the operation ends, refresh the output so a saved notebook keeps the final snapshot
            handle.add_listener(
                lambda src, e: src is handle and e.kind in ("loop_finished", "loop_failed") and shown.update(widget)
            )

    def _list(self, cmd: Command) -> Any:
        import pandas as pd

        rows = [
            {
                "name": n, "status": h.status.value, "steps": h.steps, "tool_calls": h.tool_calls,
                "tokens_in": h.usage.input_tokens, "tokens_out": h.usage.output_tokens,
                "elapsed_s": round(h.elapsed, 1), "task": h.task[:60],
            }
            for n, h in self.handles.items()
        ]
        return pd.DataFrame(rows, columns=["name", "status", "steps", "tool_calls", "tokens_in", "tokens_out", "elapsed_s", "task"])

    def _history(self, cmd: Command) -> Any:
        store = self.store
        if store is None:
            raise UsageError(f"the store is off (UnityMagics.store_path = 'off'): no history is kept\n\n{HELP['history']}")
        return store.history(limit=cmd.options.get("limit"))

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

    def _steer(self, cmd: Command, call: Coroutine[Any, Any, Any]) -> None:
        """Run a steering call in the background; its failure is reported, never left unobserved
        (the operation may end between this line and the call: that is said, not raised)."""

        def report(task: asyncio.Future) -> None:
            if task.cancelled():
                return
            err = task.exception()
            if isinstance(err, HandleStateError):
                log.warning("%%unity %s %s: %s", cmd.sub, cmd.name, err)
            elif err is not None:
                log.error("%%unity %s %s failed", cmd.sub, cmd.name, exc_info=err)

        asyncio.ensure_future(call).add_done_callback(report)

    def _pause(self, cmd: Command) -> None:
        self._steer(cmd, self._live(cmd).pause())

    def _resume(self, cmd: Command) -> None:
        self._steer(cmd, self._live(cmd).resume())

    def _interject(self, cmd: Command) -> None:
        self._steer(cmd, self._live(cmd).interject(cmd.text))

    def _stop(self, cmd: Command) -> None:
        handle = self._find(cmd)
        if not handle.done():
            self._steer(cmd, handle.stop(cmd.text or "stopped with %unity stop"))

    def _submit(self, cmd: Command) -> Any:
        handle = self._live(cmd)
        if not handle.multi:
            raise UsageError(
                f"{handle.name!r} serves one request: start it with `%unity act --multi ...` to submit more "
                f"(or use %unity interject {handle.name} ...)\n\n{HELP[cmd.sub]}"
            )
        return handle.submit(cmd.text)

    def _waiting_plan(self, cmd: Command) -> Any:
        handle = self._live(cmd)
        if not getattr(handle, "pending_approvals", None):
            raise UsageError(f"{handle.name!r} has no plan waiting for approval\n\n{HELP[cmd.sub]}")
        return handle

    def _approve(self, cmd: Command) -> None:
        self._steer(cmd, self._waiting_plan(cmd).approve())

    def _skip(self, cmd: Command) -> None:
        self._steer(cmd, self._waiting_plan(cmd).skip(reason=cmd.text or None))

    def _ask(self, cmd: Command) -> LoopHandle:
        handle = self._find(cmd).start_ask(cmd.text)
        self._show(handle)
        return handle
