"""The ``%unity`` subcommands that work from the store: durable tasks (``%unity tasks``, ``%unity task
new|run|message|show``), continuing an operation a dead kernel left interrupted (``%unity resume``), and
a loop's transcript from memory or the store (``%unity show``)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from .._errors import UserError
from ..loop import LoopHandle, Message
from ..models import format_dollars
from ._args import HELP, Command
from ._host import missing_names

if TYPE_CHECKING:
    from ._host import Host as UnityMagics

__all__ = ("tasks_table", "task_command", "resume_from_store", "wire_history", "render_history", "show_transcript")

_TASK_COLUMNS = ["id", "name", "status", "parent", "description", "result"]
_SHOW_COLUMNS = ["role", "kind", "content", "tool_calls"]


def show_transcript(magics: UnityMagics, name: str) -> Any:
    """``%unity show NAME``: the transcript of a loop in memory (an operation, or a loop under one, such as a
    running row ``labels[3]``), else of the newest loop of that name, id or uid the store recorded. A variable
    holding a handle names it too: after ``labels = %unity map ...`` (named ``h2``), ``labels[3]`` is ``h2[3]``."""
    import pandas as pd

    alias = _handle_alias(magics, name)
    transcript = None
    for wanted in (name, alias):
        transcript = _in_memory(magics, wanted) if wanted is not None else None
        if transcript is not None:
            break
    if transcript is None:
        store = magics.store
        if store is None:
            known = ", ".join(magics.handles) or "none yet"
            raise UsageError(f"no operation named {name!r} (known: {known}), and the store is off\n\n{HELP['show']}")
        try:
            transcript = store.transcript(store.find(name)["uid"])  # a UserError names what is known
        except UserError:
            if alias is None:
                raise
            transcript = store.transcript(store.find(alias)["uid"])
    rows = [
        {"role": m.role, "kind": m.kind, "content": m.content or "",
         "tool_calls": "\n".join(f"{c.name}({c.arguments}) -> {c.result if c.result is not None else '(no result)'}"
                                 for c in m.tool_calls)}
        for m in transcript
    ]
    return pd.DataFrame(rows, columns=_SHOW_COLUMNS)


_VARIABLE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[.*\])?$")


def _handle_alias(magics: UnityMagics, name: str) -> str | None:
    """The loop name that ``name`` means when it starts with a notebook variable holding a handle, else None."""
    m = _VARIABLE.match(name)
    shell = getattr(magics, "shell", None)
    if m is None or shell is None:
        return None
    value = shell.user_ns.get(m[1])
    if not isinstance(value, LoopHandle) or value.name == m[1]:
        return None
    return value.name + (m[2] or "")


def _in_memory(magics: UnityMagics, name: str) -> Any:
    for top in magics.handles.values():
        found = next((h for h in top.tree if h.name == name or h.id == name), None)
        if found is not None:
            return found.transcript
    return None


def tasks_table(magics: UnityMagics) -> Any:
    """``%unity tasks``: one row per durable task, in order."""
    import pandas as pd

    rows = [
        {"id": t.id, "name": t.name, "status": t.status, "parent": t.parent_id,
         "description": t.description[:80], "result": (t.result or "")[:80]}
        for t in magics.tasks_manager.list()
    ]
    return pd.DataFrame(rows, columns=_TASK_COLUMNS)


def _find_task(magics: UnityMagics, ref: str) -> Any:
    tasks = magics.tasks_manager.list()
    for t in tasks:
        if t.id == ref:
            return t
    named = [t for t in tasks if t.name == ref]
    if len(named) == 1:
        return named[0]
    if named:
        ids = ", ".join(t.id for t in named)
        raise UsageError(f"{len(named)} tasks are named {ref!r}: say which by its id ({ids})\n\n{HELP['task']}")
    known = ", ".join(f"{t.id} ({t.name})" for t in tasks) or "none yet: %unity task new NAME DESCRIPTION"
    raise UsageError(f"there is no task {ref!r}; tasks: {known}\n\n{HELP['task']}")


def task_command(magics: UnityMagics, cmd: Command) -> Any:
    """``%unity task new|run|message|show``."""
    tm = magics.tasks_manager
    if cmd.action == "new":
        parent = _find_task(magics, cmd.options["parent"]) if "parent" in cmd.options else None
        if parent is None and cmd.options.get("parent_context"):
            raise UsageError(f"--parent-context is for a child task: give its --parent\n\n{HELP['task']}")
        task = tm.create(cmd.name or "", cmd.text, parent=parent.id if parent is not None else None,
                         parent_context=True if cmd.options.get("parent_context") else None)
        under = f", a child of {parent.name!r}" if parent is not None else ""
        print(f"task {task.name!r} created{under}: {task.id} (run it with %unity task run {task.id})")
        return None
    task = _find_task(magics, cmd.name or "")
    if cmd.action == "show":
        return _turns(magics, task)
    live = tm.handle(task.id)
    if cmd.action == "message":
        tm.send(task.id, cmd.text)
        if live is not None:
            print(f"delivered into the running turn of task {task.name!r} ({task.id})")
            return None
        if tm.get(task.id).status == "running":  # in another kernel sharing the store: that one delivers it
            print(f"queued for task {task.name!r} ({task.id}), which runs in another kernel sharing the store: "
                  "that kernel delivers it into the running turn (or starts a new turn with it)")
            return None
        return _run(magics, task, "a new turn with your message")
    if live is not None:  # run: it runs already
        print(f"task {task.name!r} is already running: steer it with %unity pause {task.id}, ...")
        return live
    what = {"new": "its first turn", "interrupted": "resuming the turn a dead kernel cut short"}.get(
        task.status, "a new turn"
    )
    return _run(magics, task, what)


def _run(magics: UnityMagics, task: Any, what: str) -> LoopHandle:
    tm = magics.tasks_manager
    notice = f"task {task.name!r} ({task.id}): {what}; steer it as {task.id}."
    # the kernel's approval, as every operation started here (its plans wait where %unity approve reaches them)
    handle = magics.start(task.id, lambda _key: tm.execute(task.id, approval=magics.approval), sub="task",
                          notice=notice)
    if not magics.show_widgets:  # (its widget says it otherwise)
        print(notice)
    return handle


def _turns(magics: UnityMagics, task: Any) -> Any:
    import pandas as pd

    print(f"task {task.name!r} ({task.id}): {task.status}\n{task.description}")
    rows = []
    for t in magics.tasks_manager.turns(task.id):
        last = next((m.get("content") for m in reversed(t["messages"]) if m.get("role") == "assistant"), None)
        rows.append({
            "turn": t["turn"], "started": pd.to_datetime(t["started"], unit="s").floor("s"),
            "ended": pd.to_datetime(t["ended"], unit="s").floor("s") if t["ended"] else None,
            "messages": len(t["messages"]), "summary": t["summary"], "last_reply": (last or "")[:200],
        })
    return pd.DataFrame(rows, columns=["turn", "started", "ended", "messages", "summary", "last_reply"])


# -- continuing an interrupted operation from the store -----------------------------------------

_SKIPPED = ("system", "context", "clarification", "notification", "steering", "error")


def wire_history(transcript: list[Message]) -> list[dict]:
    """A transcript rebuilt by the store as wire messages (questions and steering left out: they
    sit between a call and its result), repaired so every tool call has exactly one result."""
    from ..managers import repair_history

    out: list[dict] = []
    for m in transcript:
        if m.kind in _SKIPPED:
            continue
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""})
        elif m.role == "assistant":
            msg: dict = {"role": "assistant", "content": m.content or ""}
            if m.tool_calls:
                msg["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]
            out.append(msg)
        elif m.role == "user":
            out.append({"role": "user", "content": m.content or ""})
    return repair_history(out)


def render_history(messages: list[dict]) -> str:
    """The conversation as text for the new run's system prompt."""
    lines = []
    for m in messages:
        if m["role"] == "tool":
            lines.append(f"[result of call {m['tool_call_id']}]\n{m['content']}")
        elif m["role"] == "assistant":
            text = f"[assistant]\n{m['content']}" if m["content"] else "[assistant]"
            for c in m.get("tool_calls") or ():
                args = c["function"]["arguments"]
                try:
                    args = json.dumps(json.loads(args), ensure_ascii=False, indent=1)
                except (TypeError, ValueError):
                    pass
                text += f"\n-> call {c['id']}: {c['function']['name']}({args})"
            lines.append(text)
        else:
            lines.append(f"[{m['role']}]\n{m['content']}")
    return "\n\n".join(lines)


_RESUMED = (
    "This operation was interrupted when its kernel stopped, and now continues in a new kernel [resumed from run "
    "{uid}]. The messages before the last one are its conversation so far, rebuilt from the store (a tool call "
    "without a recorded result is marked as interrupted); the last message gives its task again. Continue where "
    "it left off: do not redo what succeeded. Variables its plans created may be gone (this is a new kernel): "
    "check before relying on them."
)
_RESUMED_FROM = re.compile(r"\[resumed from run ([0-9A-Za-z_-]+)\]")


def _resumed_history(store: Any, uid: str, depth: int = 0) -> list[dict]:
    """The wire messages of run ``uid``, after those of the runs it resumed (a run resumed twice keeps all)."""
    transcript = store.transcript(uid)
    earlier: list[dict] = []
    for m in transcript:  # the note a resumed run starts with (a notification: the store keeps it)
        found = _RESUMED_FROM.search(m.content or "") if m.kind == "notification" else None
        if found is not None and depth < 20:
            try:
                earlier = _resumed_history(store, found[1], depth + 1)
            except UserError:  # that run is gone from the store: this one's messages alone
                earlier = []
            break
    return earlier + wire_history(transcript)


def _refuse_task(store: Any, name: str, sql: str, params: tuple, *, turn: bool) -> None:
    """A UsageError if ``name`` is a durable task, or its turn's loop (``sql`` finds it): resumed as an act, the turn
    ran outside its task, which never heard of it (and ``%unity task run`` ran it once more)."""
    found = store.query(sql, params)
    if found:
        task = found[-1]
        raise UsageError(
            f"{name!r} is {'a turn of ' if turn else ''}task {task['name']!r} ({task['id']}): a task "
            f"resumes with %unity task run {task['id']} (a turn a dead kernel cut short continues there, its "
            f"conversation kept)\n\n{HELP['resume']}"
        )


def _refuse_plain_loop(store: Any, row: dict) -> None:
    """A UsageError if ``row`` is a plain tool loop (``u.start_loop``, a manager's method), not an act: resumed as an
    act it ran plans in this kernel, which it never could, without the tools it had (functions the store does not
    keep). A loop of kind ``loop`` is an act when its start recorded an approval of plans or it offered plans (an act
    recorded before its kind was, named by ``--name``)."""
    if (row.get("kind") or "loop") != "loop" or row.get("batch"):
        return
    started = store.events(row["uid"], kind="loop_started")
    if any(e.approval is not None for e in started):
        return
    if any("execute_code" in e.tools for e in store.events(row["uid"], kind="model_request")):
        return
    name = row["name"]
    raise UsageError(
        f"{name!r} is a plain tool loop (u.start_loop, or a manager's method), not an act, and %unity resume continues "
        "an act or a batch: resumed as an act it would run plans, which it never could, without the tools it had "
        f"(Python functions: the store does not keep them). Start it again in this kernel as it was started "
        f"(u.start_loop with its tools); %unity show {name} shows its conversation so far\n\n{HELP['resume']}"
    )


def resume_from_store(magics: UnityMagics, cmd: Command) -> LoopHandle:
    """``%unity resume NAME`` for an operation this kernel does not have: the one a dead kernel left
    ``interrupted`` in the store continues as a new live operation of the same name."""
    name = cmd.name or ""
    known = ", ".join(magics.handles) or "none yet"
    store = magics.store
    if store is None:
        raise UsageError(f"no operation named {name!r} (known: {known}), and the store is off\n\n{HELP['resume']}")
    try:
        row = store.find(name)
    except UserError:
        _refuse_task(store, name, "SELECT id, name FROM tasks WHERE id = ? OR name = ?", (name, name), turn=False)
        raise UsageError(
            f"no operation named {name!r} in this kernel (known: {known}) or in the store (see %unity history)"
            f"\n\n{HELP['resume']}"
        ) from None
    _refuse_task(store, name, "SELECT id, name FROM tasks WHERE loop_uid = ?", (row["uid"],), turn=True)
    if row["status"] != "interrupted":
        older = [r for r in store.loops(name=row["name"], batch_rows=False) if r["status"] == "interrupted"]
        hint = (f" (an older operation of that name was left interrupted: %unity resume {older[-1]['uid']})"
                if older else "")
        raise UsageError(
            f"{name!r} is not an operation of this kernel, and in the store it is {row['status']}: only one a dead "
            f"kernel left interrupted continues from the store{hint}\n\n{HELP['resume']}"
        )
    if row["parent_uid"]:
        parent = store.find(row["parent_uid"])
        raise UsageError(
            f"{name!r} ran inside {parent['name']!r}: resume that one (%unity resume {parent['name']})"
            f"\n\n{HELP['resume']}"
        )
    if row.get("kind") == "ask":  # read-only, from a snapshot of its target: resumed as an act, it ran plans
        lineage = row["lineage"]
        target = lineage[-2].rpartition("(")[0] if len(lineage) >= 2 else "NAME"
        raise UsageError(
            f"{name!r} is an Ask (a question about {target!r}, answered from a snapshot of it in the kernel that "
            f"died), and an Ask is not resumed: ask again, %unity ask {target} QUESTION, once {target!r} is an "
            f"operation of this kernel (%unity resume {target} continues it if it was left interrupted)"
            f"\n\n{HELP['resume']}"
        )
    _refuse_plain_loop(store, row)
    from ..batch import OPERATORS
    from ._magics_ops import resume_operator
    from ._resume_needs import check_resumable

    kind = row.get("kind") or "loop"
    if cmd.options.get("budget") is not None and kind != "map" and kind not in OPERATORS and not row.get("batch"):
        raise UsageError(f"--budget is for a batch (%unity map, or an operator), which {name!r} is not (its kind: "
                         f"{kind}): leave out --budget\n\n{HELP['resume']}")  # resumed, it would be dropped unsaid
    check_resumable(magics, row, budget=cmd.options.get("budget"))  # everything missing, said at once
    if kind == "map":
        return resume_map(magics, row, budget=cmd.options.get("budget"))

    if kind in OPERATORS:  # %unity filter|extract|topk|join|agg, or an operator registered later
        return resume_operator(magics, row, budget=cmd.options.get("budget"))
    if row.get("batch"):
        raise UsageError(
            f"{name!r} is a {kind} operation, and this kernel has no operator {kind!r}: register it (run the cell or "
            f"import the module that calls u.register_operator), then %unity resume {name} again\n\n{HELP['resume']}"
        )
    history = _resumed_history(store, row["uid"])
    missing = sum(1 for m in history if m["role"] == "tool" and "no result was recorded" in str(m["content"]))
    model = magics.current_model()
    started = store.events(row["uid"], kind="loop_started")
    approval = started[0].approval if started else None  # None: recorded before it was (the kernel's default)
    kept = _started_with(started[0].settings if started else None)  # the options of its line (--max-steps, ...)
    options = magics.loop_options(kept)
    actor = magics.actor(model, {**kept, "approval": approval} if approval else kept)
    resumed = _RESUMED.format(uid=row["uid"])  # the conversation itself goes as messages (history=)
    actor.instructions = "\n\n".join(p for p in (actor.instructions, resumed) if p)
    task = row["task"] or "(no task recorded)"
    options["history"] = history
    notice = (
        f"resumed from the store: its interrupted run rebuilt ({len(history)} messages"
        + (f"; {missing} tool call(s) without a result marked as interrupted)." if missing else ").")
        + f" Plans: --approval {actor.approval}"
        + (" (as it was started)." if approval else " (this kernel's default).")
        + (" Its options as it was started." if kept else " Its options: this kernel's (none were recorded).")
        + (f" It ran with the model {row['model']!r} and continues with this kernel's, {now!r}."
           if row.get("model") and (now := getattr(model, "name", None)) and now != row["model"] else "")
    )
    uid = row["uid"]

    def launch(key: str) -> LoopHandle:
        from .. import events as ev

        handle = actor.act(task, name=key, **options)
        handle.run.emit(ev.Notification, call_id=None, text=f"[resumed from run {uid}] its conversation continues")
        return handle

    handle = magics.start(row["name"], launch, sub="resume", notice=notice)
    if not magics.show_widgets:  # (its widget says it otherwise)
        print(notice)
    return handle


_KEPT = ("max_steps", "multi", "time_awareness", "max_parallel_tools", "context_window", "code_timeout", "managers")


def _started_with(settings: dict | None) -> dict:
    """The options an interrupted act was started with (``LoopStarted.settings``), as ``%unity act`` options:
    resumed, it runs with them, not this kernel's defaults. Empty: recorded before they were."""
    if not isinstance(settings, dict):
        return {}
    out = {k: settings[k] for k in _KEPT if k in settings}
    if out.get("context_window"):
        out.update({k: settings[k] for k in ("compress_at", "keep_last") if k in settings})
    if "code_timeout" in out and out["code_timeout"] is None:
        out["code_timeout"] = 0  # none: never, as --code-timeout 0 says
    return out


def resume_map(magics: UnityMagics, row: dict, *, budget: float | None = None) -> LoopHandle:
    """A batch a dead kernel left interrupted runs again from its ``%unity map`` line: that one run continues
    (a row it finished is kept if asked the same now: same position, label, task and model), and what died
    and what is kept is said in the widget and the cell's output."""
    from ..batch import finished_rows
    from ._resume_needs import stored_line

    cmd = stored_line(row)
    if budget is not None:  # %unity resume NAME --budget D: this run's cap, in place of its line's
        cmd.options["budget"] = budget
    name = row["name"]
    missing = missing_names(cmd.name or "", magics.user_ns)
    if missing:
        raise UsageError(
            f"{name!r} ran over the items `{cmd.name}`, and this kernel has no {', '.join(f'`{n}`' for n in missing)}: "
            f"re-create {'it' if len(missing) == 1 else 'them'} as it was (run the cells that made it), then "
            f"%unity resume {name} again. Rows it finished are kept only where they are asked the same.\n\n"
            f"{HELP['resume']}"
        )
    from ._magics_ops import carry_spent, spent_before_resume

    store = magics.store
    spent = spent_before_resume(store, row, cmd.options.get("budget"))  # refused while the cap is not lifted
    done = finished_rows(store, row["uid"])  # this run alone: it holds the rows it kept from the run before it
    died = store.query("SELECT COUNT(*) AS n FROM loops WHERE parent_uid = ? AND ended IS NULL", (row["uid"],))
    running = died[0]["n"] if died else 0
    from ..batch import provider_batches

    batches = provider_batches(store, row["uid"]) if cmd.options.get("via") == "batch" else None
    handle = magics._map(cmd, done=done, name=name, notice="resumed from the store", batches=batches)
    if spent:  # before its first row starts (the batch starts at the event loop's next turn)
        carry_spent(handle, spent, row["uid"])
    kept, aside = handle.rows.kept, handle.rows.set_aside
    total = handle.rows.total or 0
    notice = (
        f"resumed from the store: the kernel running {name!r} died with {len(done)} row(s) finished"
        + (f" and {running} running (they run again)" if running else "")
        + f"; kept {kept} row(s) finished before; {total - kept} to run."
        + (f" {aside} finished row(s) not kept: they are asked something else now (the items, the task or the "
           "model changed)." if aside else "")
        + (f" {format_dollars(spent)} spent before counts against its budget." if spent else "")
    )
    widget = magics.widgets.get(name)
    if widget is not None:
        widget.notice = notice
    print(notice)
    return handle
