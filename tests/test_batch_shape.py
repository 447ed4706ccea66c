"""The batch layer in the engine's shape (issue 33): a batch's verbs run on the batch's own loop, the handle is a
facade of at most 35 public names, every operator takes ``estimate=``, the store keeps every loop's kind (an old
store migrates), and an operator written outside the package is one file plus one registry entry."""

import asyncio
import re
import sqlite3
import textwrap
import threading

import pandas as pd
import pytest
from IPython.core.error import UsageError

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget

T = 10


def _answer(messages, tools):
    text = next(m["content"] for m in messages if m["role"] == "user")  # the row's task
    if "Decide for this row" in text:
        return u.call_tool("submit_answer", keep="a" in text.split("Decide")[0], reason="read it")
    return f"label of {text.split()[-1]}"


# -- a batch's verbs run on its own loop --------------------------------------------------------------


class _LoopThread:
    """An event loop running in a thread of its own (as a kernel's does), with a gate its model waits on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="batch-loop", daemon=True)
        self.thread.start()

    def call(self, fn):
        async def run():
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(T)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(T)


@pytest.mark.parametrize("kind", ["map", "filter", "loop"])
def test_an_interjection_from_another_thread_s_event_loop_is_published_on_the_operation_s_own_thread(kind):
    home = _LoopThread()
    gate = threading.Event()
    try:
        async def wait_then_answer(messages, tools):
            await asyncio.get_running_loop().run_in_executor(None, gate.wait, T)
            return _answer(messages, tools)

        model = u.ScriptedModel(wait_then_answer)

        def start():
            if kind == "map":
                return u.map(["a", "b", "c"], "Label {value}", model=model, concurrency=1)
            if kind == "filter":
                return u.filter(pd.Series(["a", "b", "c"]), "Is {value} good?", model=model, concurrency=1)
            return u.start_loop("Label a", model=model)

        h = home.call(start)
        seen: list[tuple[str, str]] = []
        h.run.add_listener(lambda _h, e: seen.append((e.kind, threading.current_thread().name)))

        async def from_here():  # the main thread's own event loop, as a second kernel thread or a script has
            await h.interject("answer in French")

        asyncio.run(from_here())
        gate.set()
        asyncio.run_coroutine_threadsafe(h.result(), home.loop).result(T)
        steering = [name for k, name in seen if k == "steering"]
        assert steering and set(steering) == {"batch-loop"}, seen
        if kind != "loop":  # the rows not started yet were told too
            told = [r for r in h.transcript if r.kind == "interjection"]
            assert told and h.progress["done"] == 3
    finally:
        gate.set()
        home.close()


def test_a_resume_refused_at_the_budget_is_refused_from_another_thread_too():
    home = _LoopThread()
    try:
        u.set_price("scripted:priced-shape", input=1_000_000.0, output=1_000_000.0)
        model = u.ScriptedModel(lambda m, t: "x", name="priced-shape")
        h = home.call(lambda: u.map(["a", "b", "c"], "Label {value}", model=model, concurrency=1, budget=0.5))
        asyncio.run_coroutine_threadsafe(h.wait_for("budget_reached", timeout=T), home.loop).result(T)

        async def from_here():
            await h.resume()

        with pytest.raises(u.UserError, match="paused at its budget"):
            asyncio.run(from_here())
        home.call(lambda: h.set_budget(None))
        asyncio.run(from_here())
        assert asyncio.run_coroutine_threadsafe(h.result(), home.loop).result(T).tolist() == ["x", "x", "x"]
    finally:
        home.close()


# -- the facade ---------------------------------------------------------------------------------------

MAP_NAMES = {
    # the loop handle's 29
    "ask", "children", "cost", "dataframe", "done", "events", "id", "inbox", "interject", "kind", "messages",
    "model", "name", "parent", "pause", "requests", "result", "resume", "run", "state", "status", "steps", "stop",
    "task", "tool_calls", "transcript", "tree", "usage", "wait_for",
    # what a batch adds
    "failures", "progress", "results", "rows", "set_budget", "spending",
}


def test_the_map_handle_is_a_facade_of_at_most_35_names():
    names = {n for n in dir(u.MapHandle) if not n.startswith("_")}
    assert names == MAP_NAMES and len(names) <= 35
    for internal in ("next_row", "settle", "run_row", "check_budget", "budget_message", "started_rows", "fatal"):
        assert not hasattr(u.MapHandle, internal)


async def test_rows_and_spending_say_what_the_batch_holds(bus):
    u.set_price("scripted:shape-priced", input=1.0, output=2.0)
    h = u.map(["a", "b"], "Label {value}", model=u.ScriptedModel(_answer, name="shape-priced"), bus=bus, budget=5)
    assert (await asyncio.wait_for(h.result(), T)).tolist() == ["label of a", "label of b"]
    assert h.rows.counts == {"finished": 2, "running": 0, "queued": 0, "failed": 0, "stopped": 0, "not_started": 0}
    assert h.rows.started == 2 and h.rows.total == 2 and h.rows.kept == 0
    assert h.spending.budget == 5 and not h.spending.reached and h.spending.cost() == h.cost > 0
    assert "budget $5.00" in repr(h.spending) and "2 of 2 rows ended" in repr(h.rows)


# -- estimate= for every operator ---------------------------------------------------------------------

ITEMS = pd.Series([f"item {i} about apples and pears" for i in range(40)], name="text")
FRUIT = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "kiwi", "lemon", "mango"]
LEFT = pd.DataFrame({"text": [f"a pie of {f}" for f in FRUIT]})
RIGHT = pd.DataFrame({"w": [f"{f} jam" for f in FRUIT]})


@pytest.mark.parametrize("call", [
    lambda m: u.filter(ITEMS, "Is {text} about apples?", model=m, estimate=True),
    lambda m: u.extract(ITEMS, "From {text}", columns="fruit", model=m, estimate=True),
    lambda m: u.topk(ITEMS, 3, "Which is most about apples?", model=m, estimate=True),
    lambda m: u.join(LEFT, RIGHT, "On {left.text} and {right.w}: same?", model=m, estimate=True),
    lambda m: u.agg(ITEMS, "Summarise {text}", chunk_chars=300, model=m, estimate=True),
])
def test_every_operator_estimates_and_runs_nothing(call):
    calls = []
    u.set_price("scripted:estimated", input=1.0, output=2.0)
    est = call(u.ScriptedModel(lambda m, t: calls.append(1) or "x", name="estimated"))
    assert isinstance(est, u.Estimate) and est.rows > 0 and est.dollars and est.dollars > 0 and calls == []
    assert "nothing was run" in str(est)


def test_topk_and_agg_project_from_their_phases():
    m = u.ScriptedModel(lambda m, t: "x", name="estimated")
    top = u.topk(ITEMS, 3, "Which?", model=m, estimate=True, max_comparisons=100)
    # 40 scores, then the comparisons its plan makes on rows like these (simulated), within its bound
    compared = top.rows - 40
    assert 0 < compared <= 100 and f"then about {compared} comparisons" in str(top) and "at most 100" in str(top)
    summary = u.agg(ITEMS, "Summarise {text}", chunk_chars=300, model=m, estimate=True)
    one = u.agg(ITEMS.iloc[:2], "Summarise {text}", model=m, estimate=True)
    assert one.rows == 1 and summary.rows > 2 and "combining level" in str(summary)


def test_the_magics_estimate_every_operator(stored_shell, capsys):
    ip = stored_shell
    ip.user_ns.update(m=u.ScriptedModel(lambda m, t: "x"), items=ITEMS, left=LEFT, right=RIGHT)
    ip.run_line_magic("unity", "model --var m")
    for line in ("filter items --estimate Is {text} good?", "extract items --columns a --estimate From {text}",
                 "topk items 3 --estimate Which?", "join left right --estimate On {left.text} and {right.w}?",
                 "agg items --estimate Summarise {text}"):
        assert ip.run_line_magic("unity", line) is None
        assert "nothing was run" in capsys.readouterr().out, line


def test_an_estimate_with_a_budget_says_whether_the_run_would_fit_it(stored_shell, capsys):
    ip = stored_shell
    u.set_price("scripted:estimated-47", input=10.0, output=10.0)  # 40 rows: a few cents
    ip.user_ns.update(m=u.ScriptedModel(lambda m, t: "x", name="estimated-47"), items=ITEMS,
                      free=u.ScriptedModel(lambda m, t: "x", name="unpriced-47"))
    ip.run_line_magic("unity", "model --var m")
    for sub in ("map items", "filter items"):
        assert ip.run_line_magic("unity", f"{sub} --estimate --budget 5 Is {{text}} good?") is None
        assert "Within its budget of $5.00" in capsys.readouterr().out, sub
        ip.run_line_magic("unity", f"{sub} --estimate --budget 0.01 Is {{text}} good?")
        out = capsys.readouterr().out
        assert "Over its budget of $0.010: run as is, it would pause at its budget" in out, sub
        assert re.search(r"a budget above \$0\.\d+ covers the whole estimate", out), sub
    ip.run_line_magic("unity", "model --var free")
    capsys.readouterr()
    ip.run_line_magic("unity", "map items --estimate --budget 5 Label {text}")
    assert "budget of $5.00 cannot be checked: no price for 'scripted:unpriced-47'" in capsys.readouterr().out
    ip.run_line_magic("unity", "map items --estimate Label {text}")  # no budget: nothing said of one
    assert "budget" not in capsys.readouterr().out


def test_an_operator_s_estimate_with_a_budget_says_whether_it_fits_in_python_too():
    """u.map / u.filter / u.topk / u.join / u.agg(..., estimate=True, budget=...): the budget is not dropped."""
    u.set_price("scripted:estimated-48", input=10.0, output=10.0)
    m = u.ScriptedModel(lambda m, t: "x", name="estimated-48")
    items = pd.Series([f"text {i}" for i in range(40)], name="text")
    made = {
        "map": lambda b: u.map(items, "Is {text} good?", model=m, estimate=True, budget=b),
        "filter": lambda b: u.filter(items, "Is {text} good?", model=m, estimate=True, budget=b),
        "topk": lambda b: u.topk(items, 3, "Which is best?", model=m, estimate=True, budget=b),
        "join": lambda b: u.join(items[:5], items[5:10], "Do {left.text} and {right.text} match?", model=m,
                                 estimate=True, budget=b),
        "agg": lambda b: u.agg(items, "Summarise", model=m, estimate=True, budget=b),
    }
    for name, make in made.items():
        assert "Within its budget of $5.00" in str(make(5.0)), name
        assert "Over its budget of $0.0010" in str(make(0.001)), name
        assert "budget" not in str(make(None)), name


# -- the kind of every loop in the store ----------------------------------------------------------------


async def test_the_store_keeps_every_loop_s_kind(tmp_path):
    store = u.Store(tmp_path / "s.db")
    bus = u.EventBus()
    store.attach(bus)
    m = u.ScriptedModel(_answer)
    lab = u.map(["a"], "Label {value}", model=m, bus=bus, name="lab")
    keep = u.filter(pd.Series(["a", "b"]), "Is {value} good?", model=m, bus=bus, name="keep")
    loop = u.start_loop("Say hi", model=m, bus=bus, name="plain")
    for h in (lab, keep, loop):
        await asyncio.wait_for(h.result(), T)
    store.flush()
    kinds = {r["name"]: (r["kind"], r["batch"]) for r in store.loops()}
    assert kinds["lab"] == ("map", 1) and kinds["keep"] == ("filter", 1) and kinds["plain"] == ("loop", 0)
    assert kinds["lab[0]"] == ("loop", 0)
    assert store.history()["kind"].tolist()[:3] == ["map", "filter", "loop"]
    store.close()


def test_a_store_written_before_kinds_migrates(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    from unity_nb._store_schema import MIGRATIONS

    for step in MIGRATIONS[:3]:
        db.executescript(step)
    db.execute("PRAGMA user_version = 3")
    old = [("1", "[map] items Label {value}", "lab"), ("2", "[map:filter] papers Is {abstract} good?", "keep"),
           ("3", "[topk] items 2 Which?", "best"), ("4", "[map:topk score] Which?", "best.score"),
           ("5", "Say hi", "actor-ab12"), ("6", "[agg] groups --by g Sum", "summary"), ("7", "Say hi", "loop-1")]
    for uid, task, name in old:
        db.execute("INSERT INTO loops (uid, name, task, status, started) VALUES (?, ?, ?, 'finished', 0)",
                   (uid, name, task))
    db.commit()
    db.close()
    store = u.Store(path)
    rows = {r["name"]: (r["kind"], r["batch"], r["task"]) for r in store.loops()}
    assert store.version == 4
    assert rows["lab"] == ("map", 1, "items Label {value}")
    assert rows["keep"] == ("filter", 1, "papers Is {abstract} good?")
    assert rows["best"] == ("topk", 0, "items 2 Which?") and rows["best.score"][:2] == ("map", 1)
    assert rows["summary"] == ("agg", 0, "groups --by g Sum") and rows["actor-ab12"][0] == "actor"
    assert rows["loop-1"] == ("loop", 0, "Say hi")
    store.close()


# -- an operator written outside the package: one file, one registry entry ------------------------------

OPERATOR_FILE = textwrap.dedent(
    '''
    """An operator written outside unity_nb: one file, one registry entry."""
    import unity_nb as u


    def sentiment(items, task, *, estimate=False, **options):
        return u.map(items, task + " Answer positive, negative or neutral.", kind="sentiment", estimate=estimate,
                     **options)


    u.register_operator(u.Operator("sentiment", sentiment, "The sentiment of every row of ITEMS, in a word."))
    '''
)


@pytest.fixture
def sentiment_module(tmp_path, monkeypatch):
    (tmp_path / "sentiment_op.py").write_text(OPERATOR_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import sentiment_op

    importlib.reload(sentiment_op)
    yield sentiment_op
    u.unregister_operator("sentiment")


async def test_an_operator_in_one_file_is_in_the_magics_their_help_estimate_and_the_widget(
        sentiment_module, stored_shell, capsys):
    ip = stored_shell
    ip.user_ns.update(m=u.ScriptedModel(lambda m, t: "positive"), reviews=pd.Series(["good", "bad"], name="text"))
    ip.run_line_magic("unity", "model --var m")
    ip.run_line_magic("unity", "help")
    assert "%unity sentiment ITEMS" in capsys.readouterr().out
    ip.run_line_magic("unity", "help sentiment")
    helped = capsys.readouterr().out
    assert "The sentiment of every row of ITEMS" in helped and "--estimate" in helped and "--budget" in helped
    assert ip.run_line_magic("unity", "sentiment reviews --estimate How does {text} sound?") is None
    assert "Estimate for 2 rows" in capsys.readouterr().out
    h = ip.run_line_magic("unity", "sentiment reviews --name moods How does {text} sound?")
    assert h.kind == "sentiment" and h.name == "moods"
    assert (await asyncio.wait_for(h.result(), T)).tolist() == ["positive", "positive"]
    node = HandleWidget(h).nodes[0]
    assert node["kind"] == "sentiment" and node["progress"]["done"] == 2 and node["progress"]["total"] == 2
    store = ip.magics_manager.registry["UnityMagics"].store
    store.flush()
    assert store.find("moods")["kind"] == "sentiment"
    with pytest.raises(UsageError, match="needs the items"):
        ip.run_line_magic("unity", "sentiment")


# -- the same operator killed in a real kernel and resumed in a new one -----------------------------------

KERNEL_MODEL = textwrap.dedent(
    """
    import asyncio, sys, pandas as pd, unity_nb as u
    sys.path.insert(0, {folder!r})

    seen = []

    async def answer(messages, tools):
        text = next(m["content"] for m in messages if m["role"] == "user")
        seen.append(text)
        if DIE and "review 3" in text:
            await asyncio.Event().wait()  # the kernel dies while this row runs
        return "positive"

    m = u.ScriptedModel(answer)
    %unity model --var m
    reviews = pd.Series([f"review {{i}}" for i in range(6)], name="text")
    """
)


def test_an_operator_in_one_file_is_killed_and_resumed_in_a_real_kernel(tmp_path):
    from _kernel import Kernel

    (tmp_path / "sentiment_op.py").write_text(OPERATOR_FILE)
    store = str(tmp_path / "state.db")
    first = Kernel(env={"UNITY_NB_STORE": store})
    try:
        first.run("%load_ext unity_nb")
        first.run("DIE = True\n" + KERNEL_MODEL.format(folder=str(tmp_path)))
        first.run("import sentiment_op\n"
                  "moods = %unity sentiment reviews --concurrency 1 --name moods How does {text} sound?\n"
                  "await moods.wait_for('row_finished', lambda e: e.position == 2, timeout=20)")
    finally:
        first.kill()
    second = Kernel(env={"UNITY_NB_STORE": store})
    try:
        second.run("%load_ext unity_nb")
        second.run("DIE = False\n" + KERNEL_MODEL.format(folder=str(tmp_path)))
        second.run("history = %unity history")
        listed = second.value("history[['name', 'kind', 'status']].values.tolist()")
        assert ["moods", "sentiment", "interrupted"] in listed
        refused = second.run("try:\n    %unity resume moods\nexcept Exception as e:\n    print(type(e).__name__, e)")
        assert "UsageError" in refused and "no operator 'sentiment': register it" in refused
        out = second.run("import sentiment_op\nmoods = %unity resume moods")
        assert "resumed from the store: 'moods' (sentiment)" in out and "Kept 3 row(s)" in out
        assert second.value("(await moods).tolist()") == ["positive"] * 6
        assert second.value("sorted(int(t.split('review ')[1].split()[0]) for t in seen)") == [3, 4, 5]
        assert second.value("moods.kind") == "sentiment"
    finally:
        second.kill()


def test_an_operator_named_as_a_subcommand_or_a_verb_is_refused_saying_why(stored_shell):
    """An operator named ``list`` or ``stop`` could never be reached: ``%unity list`` runs the subcommand, ``%unity
    stop`` the verb. It was registered without a word and left out of the magics' operators; it is refused, saying
    what the name is. One registered before the magics took its name is said to be out of reach."""
    def op(items, task, *, estimate=False, **options):
        return u.map(items, task, estimate=estimate, **options)

    with pytest.raises(ValueError, match="'list' is a %unity subcommand: an operator by that name could never be "
                                         "reached from %unity"):
        u.register_operator(u.Operator("list", op, "Lists."))
    with pytest.raises(ValueError, match="'stop' is a steering verb"):
        u.register_operator(u.Operator("stop", op, "Stops."))
    assert "list" not in u.batch.OPERATORS and "stop" not in u.batch.OPERATORS
    u.register_operator(u.Operator("tidy_rows", op, "Tidies."))
    try:
        with pytest.warns(UserWarning, match="the operator 'tidy_rows' cannot be reached from %unity"):
            u.batch.reserve_operator_names(["tidy_rows"], "a subcommand of another extension")
    finally:
        u.unregister_operator("tidy_rows")
