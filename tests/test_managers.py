"""The managers (functions, knowledge, data, transcripts, guidance, memory) and the registry,
driven by ScriptedModel: every public method is a loop over the manager's own tools; tests
check the tool results, the state in the store, who the system prompt says is calling, and
that managers reach each other only through public methods. Synchronised on awaits and
events, never on sleeps."""

import asyncio
import json

import pandas as pd
import pytest
from conftest import tool_messages

import unity_nb as u
from unity_nb.managers import (
    DataManager,
    FunctionsManager,
    GuidanceManager,
    KnowledgeManager,
    Manager,
    ManagerSpec,
    MemoryManager,
    Registry,
    TranscriptsManager,
)
from unity_nb.store import Store

FROM_NOTEBOOK = "Who is calling: the person, from the notebook."


def steps(*calls, answer="done"):
    """A script making each call (a ToolCall, a list of them, or a function of the messages
    returning one) on successive turns, then answering (``answer`` may be a function of the
    messages)."""

    def script(messages, tools):
        turns = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
        if turns < len(calls):
            call = calls[turns]
            return call(messages) if callable(call) else call
        return answer(messages) if callable(answer) else answer

    return script


def results(model, request=-1):
    """The tool results in one of the model's requests (default: its last)."""
    return [m["content"] for m in tool_messages(model.requests[request].messages)]


def system(model, request=0):
    return model.requests[request].messages[0]["content"]


def offered(model, request=0):
    return sorted(t["function"]["name"] for t in model.requests[request].tools)


def last_result(messages):
    return tool_messages(messages)[-1]["content"]


async def until(predicate, timeout=10):
    """Yield to the event loop until ``predicate()`` holds (bounded; no timing)."""

    async def spin():
        while not predicate():  # noqa: ASYNC110 - sleep(0) only yields to the loop; no timing
            await asyncio.sleep(0)

    await asyncio.wait_for(spin(), timeout)


@pytest.fixture
def store():
    s = Store(":memory:")
    yield s
    s.close()


# ---------------------------------------------------------------------------- functions


@pytest.fixture
def registered():
    """A primitive, a tool, and a function that is both; unregistered afterwards."""

    @u.primitive
    def clean_sales(frame: pd.DataFrame, drop_negative: bool = True) -> pd.DataFrame:
        """Clean a sales table: drop duplicate rows and, optionally, negative amounts."""
        return frame

    @u.tool
    def fetch_rates(currency: str) -> dict:
        """Fetch today's exchange rates for a currency."""
        return {}

    def region_report(region: str) -> str:
        """Write a one-page report on a sales region."""
        return region

    u.primitive(region_report)
    u.tool(region_report)
    yield clean_sales, fetch_rates, region_report
    u.actor.unregister_primitive("clean_sales")
    u.actor.unregister_primitive("region_report")
    u.unregister_tool("fetch_rates")
    u.unregister_tool("region_report")


async def test_functions_search_finds_registered_functions_with_signatures(bus, registered):
    def forecast(history: list[float], months: int = 3) -> list[float]:
        """Forecast the next months of a series."""
        return history

    model = u.ScriptedModel(steps(
        u.call_tool("find_functions", query="clean sales table"),
        u.call_tool("describe", name="clean_sales"),
        u.call_tool("describe", name="clean_sale"),
        answer=lambda m: "use clean_sales",
    ))
    functions = FunctionsManager([forecast], model=model, bus=bus)
    h = functions.search("something that cleans a sales table")
    assert isinstance(h, u.LoopHandle) and h.name == "functions.search"
    assert await h == "use clean_sales"
    found, described, missing = results(model)
    found = json.loads(found)
    assert found[0]["name"] == "clean_sales" and found[0]["kinds"] == ["primitive"]
    (entry,) = json.loads(described)
    assert entry["signature"].startswith("(frame: pandas.DataFrame, drop_negative: bool = True)")
    assert entry["call"].startswith("await primitives.user.clean_sales(")
    assert "drop duplicate rows" in entry["doc"] and "def clean_sales" in entry["source"]
    assert "no registered function is named 'clean_sale'; did you mean ['clean_sales']" in missing
    prompt = system(model)
    assert prompt.startswith("You are the FunctionsManager: The person's registered notebook functions")
    assert "You are serving its method `search`: Find the registered functions that fit a need" in prompt
    assert FROM_NOTEBOOK in prompt
    assert offered(model) == ["describe", "find_functions", "list_functions"]


async def test_functions_ask_lists_everything_once_with_its_kinds(bus, registered):
    model = u.ScriptedModel(steps(u.call_tool("list_functions"), answer=lambda m: "seen"))
    functions = FunctionsManager({"forecast": lambda history: history}, model=model, bus=bus)
    assert await functions.ask("what can I call?") == "seen"
    listing = {e["name"]: e for e in json.loads(results(model)[0])}
    assert {"clean_sales", "fetch_rates", "region_report", "forecast"} <= set(listing)
    assert listing["region_report"]["kinds"] == ["primitive", "tool"]  # one function, registered twice
    assert listing["fetch_rates"]["kinds"] == ["tool"] and listing["forecast"]["kinds"] == ["function"]
    assert "You are serving its method `ask`" in system(model)
    catalog = {e["name"]: e for e in functions.catalog()}
    assert catalog["region_report"]["call"].startswith("await primitives.user.region_report(region: str)")


# ---------------------------------------------------------------------------- knowledge


def knowledge_rows(store, table):
    return store.query(f'SELECT * FROM "kn_{table}" ORDER BY id')


async def test_knowledge_update_creates_typed_tables_and_changes_rows(bus, store):
    model = u.ScriptedModel(steps(
        u.call_tool("create_table", name="regions", columns={"region": "text", "delta": "real", "units": "integer",
                                                             "flagged": "boolean"},
                    description="Quarterly sales change per region"),
        u.call_tool("add_rows", table="regions", rows=[
            {"region": "north", "delta": -12.5, "units": 40, "flagged": True},
            {"region": "south", "delta": 3, "units": 12, "flagged": False},
            {"region": "west", "delta": -1.0},
        ]),
        u.call_tool("add_column", table="regions", column="owner", type="text"),
        u.call_tool("update_rows", table="regions", where={"region": ["north", "west"]}, values={"owner": "Ana"}),
        u.call_tool("delete_rows", table="kn_regions", where={"region": "south"}),
        answer="recorded 3 regions, assigned Ana, removed south",
    ))
    knowledge = KnowledgeManager(store=store, model=model, bus=bus)
    answer = await knowledge.update("Record the regional sales changes")
    assert answer == "recorded 3 regions, assigned Ana, removed south"
    created, added, column, updated, deleted = results(model)
    assert "created table 'regions' (SQL name kn_regions)" in created
    assert json.loads(added) == {"added": 3, "ids": [1, 2, 3]}
    assert "added column 'owner' (text)" in column
    assert json.loads(updated) == {"updated": 2} and json.loads(deleted) == {"deleted": 1}
    (definition,) = store.query("SELECT * FROM knowledge_tables")
    assert definition["name"] == "regions" and definition["description"] == "Quarterly sales change per region"
    assert json.loads(definition["columns"]) == {"region": "text", "delta": "real", "units": "integer",
                                                 "flagged": "boolean", "owner": "text"}
    rows = knowledge_rows(store, "regions")
    assert [(r["id"], r["region"], r["delta"], r["units"], r["flagged"], r["owner"]) for r in rows] == [
        (1, "north", -12.5, 40, 1, "Ana"), (3, "west", -1.0, None, None, "Ana")]
    info = {r["name"]: r["type"] for r in store.query("SELECT name, type FROM pragma_table_info('kn_regions')")}
    assert info == {"id": "INTEGER", "region": "TEXT", "delta": "REAL", "units": "INTEGER", "flagged": "BOOLEAN",
                    "owner": "TEXT"}
    prompt = system(model)
    assert "You are serving its method `update`: Change the knowledge tables as instructed" in prompt
    assert FROM_NOTEBOOK in prompt and "There are no knowledge tables yet." in prompt
    assert offered(model) == ["add_column", "add_rows", "create_table", "delete_rows", "describe_table", "list_tables",
                              "query", "update_rows"]

    df = knowledge.dataframe("regions")
    assert list(df.columns) == ["region", "delta", "units", "flagged", "owner"] and df.index.name == "id"
    assert df.index.tolist() == [1, 3] and df.loc[1, "region"] == "north" and bool(df.loc[1, "flagged"]) is True
    assert str(df.dtypes["flagged"]) == "boolean" and str(df.dtypes["units"]) == "Int64" and pd.isna(df.loc[3, "units"])
    with pytest.raises(u.UserError, match="no knowledge table 'nope'"):
        knowledge.dataframe("nope")


async def test_knowledge_rejects_bad_names_types_and_values_and_injection_is_harmless(bus, store):
    evil = "x'); DROP TABLE knowledge_tables; --"
    model = u.ScriptedModel(steps(
        u.call_tool("create_table", name="facts; DROP TABLE loops", columns={"a": "text"}, description="d"),
        u.call_tool("create_table", name="facts", columns={'a" TEXT); DROP TABLE loops; --': "text"}, description="d"),
        u.call_tool("create_table", name="facts", columns={"a": "varchar"}, description="d"),
        u.call_tool("create_table", name="facts", columns={"id": "integer"}, description="d"),
        u.call_tool("create_table", name="facts", columns={"fact": "text", "n": "int"}, description="facts"),
        u.call_tool("add_rows", table="facts", rows=[{"fact": evil, "n": 1}]),
        u.call_tool("add_rows", table="facts", rows=[{"fact": 5}]),
        u.call_tool("add_rows", table="facts", rows=[{"n": "1; DROP TABLE kn_facts"}]),
        u.call_tool("add_rows", table="facts", rows=[{"nope": 1}]),
        u.call_tool("update_rows", table="facts", where={}, values={"n": 2}),
        u.call_tool("update_rows", table="facts", where={"fact": evil}, values={"n": 2}),
        u.call_tool("delete_rows", table="facts", where={"n = 2 OR 1": 1}),
        u.call_tool("add_rows", table="other", rows=[{"a": 1}]),
        answer="done",
    ))
    knowledge = KnowledgeManager(store=store, model=model, bus=bus)
    await knowledge.update("try everything")
    (bad_table, bad_column, bad_type, reserved, ok, injected, not_text, not_int, unknown, no_where, updated,
     bad_where, no_table) = results(model)
    assert "table name 'facts; DROP TABLE loops' is not allowed" in bad_table
    assert "column name" in bad_column and "is not allowed" in bad_column
    assert "has type 'varchar'; the types are: text, integer, real, boolean" in bad_type
    assert "'id' is added to every table automatically" in reserved
    assert "created table 'facts'" in ok
    assert json.loads(injected) == {"added": 1, "ids": [1]}
    assert "column 'fact' is text; 5 (int) is not a text value" in not_text
    assert "column 'n' is integer; '1; DROP TABLE kn_facts' (str) is not a integer value" in not_int
    assert "no column ['nope'] in 'facts'" in unknown
    assert "where must name at least one column" in no_where
    assert json.loads(updated) == {"updated": 1}
    assert "no column 'n = 2 OR 1'" in bad_where
    assert "there is no knowledge table 'other'; the tables are: ['facts']" in no_table
    # the evil text is stored as data, every table is still there
    assert knowledge_rows(store, "facts") == [{"id": 1, "fact": evil, "n": 2}]
    tables = {r["name"] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables >= {"loops", "knowledge_tables", "kn_facts"}


@pytest.mark.parametrize("where", ["memory", "file"])
async def test_knowledge_ask_runs_only_a_single_read_only_select(bus, where, tmp_path):
    # a file store: its own read-only connection
    store = Store(":memory:" if where == "memory" else tmp_path / "state.db")
    setup = u.ScriptedModel(steps(
        u.call_tool("create_table", name="sales", columns={"region": "text", "amount": "real"}, description="Sales"),
        u.call_tool("add_rows", table="sales",
                    rows=[{"region": "north", "amount": 10.0}, {"region": "south", "amount": 5.5}]),
    ))
    await KnowledgeManager(store=store, model=setup, bus=bus).update("set up")
    attempts = [
        "SELECT region, amount FROM kn_sales WHERE amount > 6;",
        "DELETE FROM kn_sales",
        "SELECT 1; DROP TABLE kn_sales",
        "WITH t AS (SELECT 1) DELETE FROM kn_sales",
        "WITH t AS (SELECT region FROM kn_sales) SELECT count(*) AS n FROM t",
        "SELECT * FROM loops",
        "SELECT name FROM sqlite_master",
        "PRAGMA table_info(kn_sales)",
        "ATTACH DATABASE 'x.db' AS x",
        "SELECT * FROM kn_sales WHERE region = 'x' UNION SELECT task, 1 FROM loops",
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c",
        "SELECT zeroblob(100000000)",
        "SELECT missing FROM kn_sales",
    ]
    model = u.ScriptedModel(steps(*[u.call_tool("query", sql=q) for q in attempts], answer="north sold 10.0"))
    knowledge = KnowledgeManager(store=store, model=model, bus=bus)
    knowledge.query_budget = 1000  # a million VM instructions: the endless query stops sooner
    assert await knowledge.ask("Which regions sold more than 6?") == "north sold 10.0"
    out = results(model)
    assert json.loads(out[0]) == {"columns": ["region", "amount"], "rows": [{"region": "north", "amount": 10.0}]}
    assert "only a single read-only SELECT" in out[1]
    assert "only a single SELECT statement is allowed" in out[2]
    assert "not allowed" in out[3]
    assert json.loads(out[4])["rows"] == [{"n": 2}]
    for text in (out[5], out[6], out[9]):
        assert "not allowed" in text and "may only read the knowledge tables" in text, text
    assert "only a single read-only SELECT" in out[7] and "only a single read-only SELECT" in out[8]
    assert "did too much work and was interrupted" in out[10]
    assert out[11].startswith("error: the query failed: ") and ("too big" in out[11] or "string or blob" in out[11])
    assert "no such column: missing" in out[12]
    assert len(knowledge_rows(store, "sales")) == 2  # nothing changed
    assert offered(model) == ["describe_table", "list_tables", "query"]  # ask cannot write
    prompt = system(model)
    assert "You are serving its method `ask`" in prompt
    assert "- kn_sales (id integer, region text, amount real): Sales" in prompt
    # the store keeps working normally after the guarded queries
    store.execute("INSERT INTO kn_sales (region, amount) VALUES (?, ?)", ("east", 1.0))
    assert len(knowledge_rows(store, "sales")) == 3
    assert knowledge._select("SELECT count(*) AS n FROM kn_sales")["rows"] == [{"n": 3}]  # and sees new rows at once
    assert not knowledge.running  # each query had a connection of its own, closed when it ended
    store.close()


async def sales_knowledge(bus, where, tmp_path, model=None):
    """A knowledge manager over a store (in memory or a file) holding a two-row ``kn_sales``."""
    store = Store(":memory:" if where == "memory" else tmp_path / "state.db")
    setup = u.ScriptedModel(steps(
        u.call_tool("create_table", name="sales", columns={"region": "text", "amount": "real"}, description="Sales"),
        u.call_tool("add_rows", table="sales", rows=[{"region": "north", "amount": 10.0},
                                                     {"region": "south", "amount": 5.5}]),
    ))
    await KnowledgeManager(store=store, model=setup, bus=bus).update("set up")
    return store, KnowledgeManager(store=store, model=model, bus=bus)


# the query: one LIKE call comparing a 999,000-character text with a 49,002-character
# pattern ran 41-48 s with the budget never firing (no progress handler runs inside a function)
PATHOLOGICAL = [
    "SELECT printf('%.*c', 999000, 'a') LIKE '%' || printf('%.*c', 49000, 'a') || 'b'",
    "SELECT printf('%.*c', 999000, 'a') GLOB '*' || printf('%.*c', 49000, 'a') || 'b'",
    "SELECT instr(printf('%.*c', 999999, 'a'), printf('%.*c', 499999, 'a') || 'b')",
    "SELECT length(replace(printf('%.*c', 999999, 'a'), printf('%.*c', 499999, 'a') || 'b', 'x'))",
    "SELECT length(trim(printf('%.*c', 999999, 'a'), printf('%.*c', 49999, 'b') || 'a'))",
]


@pytest.mark.parametrize("where", ["memory", "file"])
async def test_knowledge_work_inside_one_function_call_counts_against_the_budget(bus, where, tmp_path):
    store, knowledge = await sales_knowledge(bus, where, tmp_path)
    for sql in PATHOLOGICAL:
        with pytest.raises(u.ToolFailed, match="did too much work"):
            await asyncio.wait_for(asyncio.to_thread(knowledge._select, sql), 20)  # bounded; far sooner
    # the functions keep SQLite's own meaning (case-insensitive LIKE, ESCAPE, GLOB, instr, replace, trim)
    sql = ("SELECT region LIKE 'NOR%' AS l, region GLOB 'n*' AS g, instr(region, 'th') AS i, "
           "replace(region, 'th', 'TH') AS r, trim('xxaxx', 'x') AS t, 'a_b' LIKE 'a!_b' ESCAPE '!' AS e "
           "FROM kn_sales ORDER BY id")
    assert knowledge._select(sql)["rows"] == [{"l": 1, "g": 1, "i": 4, "r": "norTH", "t": "a", "e": 1},
                                              {"l": 0, "g": 0, "i": 4, "r": "souTH", "t": "a", "e": 1}]
    with pytest.raises(u.ToolFailed, match="ESCAPE expression must be a single character"):
        knowledge._select("SELECT 'a' LIKE 'a' ESCAPE 'xy'")
    assert not knowledge.running
    store.close()


@pytest.mark.parametrize("where", ["memory", "file"])
async def test_knowledge_stop_interrupts_a_running_query_and_holds_no_lock_after(bus, where, tmp_path):
    endless = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c"
    model = u.ScriptedModel(steps(u.call_tool("query", sql=endless)))
    store, knowledge = await sales_knowledge(bus, where, tmp_path, model)
    knowledge.query_budget = knowledge.query_seconds = float("inf")  # only the stop can end it
    h = knowledge.ask("count forever")
    await until(lambda: knowledge.running)
    await asyncio.wait_for(h.stop("enough"), 20)
    assert not knowledge.running  # the statement ended before stop() returned
    # nothing is held: the store records and reads, and the next query runs (each in a thread, bounded)
    counted = asyncio.to_thread(store.query, "SELECT count(*) AS n FROM kn_sales")
    assert await asyncio.wait_for(counted, 20) == [{"n": 2}]
    second = asyncio.to_thread(knowledge._select, "SELECT count(*) AS n FROM kn_sales")
    assert (await asyncio.wait_for(second, 20))["rows"] == [{"n": 2}]
    store.close()


async def test_knowledge_results_are_capped_in_rows_and_characters_and_the_model_is_told(bus, tmp_path):
    rows21 = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c LIMIT 21) "
    blobs = rows21 + "SELECT randomblob(999999) AS b FROM c"  # the query (101 rows) gave 351,536,258 characters
    texts = rows21 + "SELECT printf('%.*c', 999999, 'a') AS t FROM c"
    wide = "SELECT " + ", ".join(f"printf('%.*c', 5000, 'w') AS c{i}" for i in range(60))
    many = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c LIMIT 500) SELECT n FROM c"
    model = u.ScriptedModel(steps(*[u.call_tool("query", sql=q) for q in (blobs, texts, wide, many)], answer="seen"))
    store, knowledge = await sales_knowledge(bus, "file", tmp_path, model)
    assert await knowledge.ask("show me everything") == "seen"
    out = results(model)
    assert all(len(text) < 25_000 for text in out), [len(text) for text in out]  # was 351,536,258 characters
    b, t, w, m = (json.loads(text) for text in out)
    assert len(b["rows"]) == 21 and b["rows"][0] == {"b": "<blob of 999,999 bytes>"}
    assert "blobs are shown by size" in b["note"]
    assert 0 < len(t["rows"]) < 21 and t["rows"][0]["t"].endswith("… [997,999 more characters cut]")
    assert f"only the first {len(t['rows'])} rows are shown (a result is cut at about 20,000 characters)" in t["note"]
    assert "long values are cut" in t["note"]
    assert len(w["rows"]) == 1 and len(w["rows"][0]) == 60 and "long values are cut" in w["note"]
    assert len(m["rows"]) == 100 and "only the first 100 rows are shown" in m["note"]
    assert "at most 100 rows and about 20,000 characters" in model.requests[0].tools[-1]["function"]["description"]
    store.close()


def test_knowledge_needs_a_store():
    with pytest.raises(u.UserError, match="needs store="):
        KnowledgeManager(store=None)


# ---------------------------------------------------------------------------- data


@pytest.fixture
def namespace():
    return {
        "sales": pd.DataFrame({"region": ["north", "south", "west"], "delta": [-12.5, 3.0, None]}),
        "customers": pd.DataFrame({"name": ["a", "b"], "joined": pd.to_datetime(["2024-01-01", "2024-02-01"])}),
        "note": "hello",
        "items": [1, 2],
        "pd": pd,
    }


async def test_data_describe_and_find_describe_variables_without_dumping_them(bus, namespace):
    model = u.ScriptedModel(steps(
        u.call_tool("list_variables", type_contains="DataFrame"),
        u.call_tool("describe_variable", name="sales"),
        u.call_tool("describe_variable", name="nothing"),
        answer="sales: 3 regions, one missing delta",
    ))
    data = DataManager(namespace, model=model, bus=bus)
    assert await data.describe("Describe the sales table") == "sales: 3 regions, one missing delta"
    listing, detail, missing = results(model)
    assert "- sales: pd.DataFrame, shape (3, 2)" in listing and "- customers: pd.DataFrame" in listing
    assert "note" not in listing and "items" not in listing
    assert "- delta: float64, 2 non-null" in detail and "numeric summary:" in detail
    assert "there is no variable 'nothing'" in missing
    prompt = system(model)
    assert "You are serving its method `describe`" in prompt and FROM_NOTEBOOK in prompt
    assert "Variables in the namespace now:\n" in prompt and "- note: str: 'hello'" in prompt

    model = u.ScriptedModel(steps(u.call_tool("list_variables"), answer="customers has a date column"))
    data = DataManager(namespace, model=model, bus=bus)
    assert await data.find("anything with a date column") == "customers has a date column"
    assert "joined: datetime64" in results(model)[0]
    assert "You are serving its method `find`" in system(model)


async def test_data_ask_computes_on_a_scratch_copy_and_never_changes_the_namespace(bus, namespace):
    before = dict(namespace)
    model = u.ScriptedModel(steps(
        u.call_tool("run_code", code="worst = sales.nsmallest(1, 'delta')\nworst.region.iloc[0]"),
        u.call_tool("run_code", code="sales = sales.dropna()\nprint(len(sales), worst.delta.iloc[0])"),
        u.call_tool("run_code", code="items.append(3)"),
        u.call_tool("run_code", code="1 / 0"),
        answer="north fell most (-12.5)",
    ))
    data = DataManager(namespace, model=model, bus=bus)
    assert await data.ask("Which region fell most?") == "north fell most (-12.5)"
    first, second, mutated, failed = results(model)
    assert "value of the last expression: str: 'north'" in first
    assert "variables created:\n- worst: pd.DataFrame" in first and "scratch copy only" in first
    assert "stdout:\n2 -12.5" in second  # a later call sees the earlier one's names
    assert "warning" not in mutated and namespace["items"] == [1, 2]  # the scratch copy's list took it
    assert failed.startswith("success: false") and "ZeroDivisionError" in failed
    assert set(namespace) == set(before) and namespace["sales"] is before["sales"]  # nothing assigned leaked
    assert len(namespace["sales"]) == 3 and "worst" not in namespace
    assert "You are serving its method `ask`" in system(model)


async def test_data_code_that_writes_into_the_person_s_frame_or_array_changes_only_its_scratch_copy(bus):
    """The scratch copy held the person's very objects: a cell written in place (``df.loc[...] = ...``, ``a[0] = ...``)
    changed their data, and no warning said so (a change of a cell keeps shape, labels and dtypes)."""
    import numpy as np

    namespace = {"sales": pd.DataFrame({"region": ["north", "south"], "delta": [-12.5, 3.0]}), "arr": np.arange(3)}
    sales, arr = namespace["sales"], namespace["arr"]
    model = u.ScriptedModel(steps(
        u.call_tool("run_code", code="sales.loc[0, 'delta'] = 99.0\nsales['delta'].iloc[0]"),
        u.call_tool("run_code", code="sales['delta'].iloc[0]"),
        u.call_tool("run_code", code="arr[0] = 7"),
        u.call_tool("run_code", code="int(arr.sum())"),
        answer="done",
    ))
    data = DataManager(namespace, model=model, bus=bus)
    assert await data.ask("Set the first delta to 99") == "done"
    written, again, array, summed = results(model)
    assert "99.0" in written
    assert "99.0" in again  # the scratch copy keeps its own change for the next call
    assert array.startswith("success: false") and "read-only" in array  # the code learns it may not
    assert "int: 3" in summed  # read, it is the person's array as it was
    assert namespace["sales"] is sales and sales["delta"].tolist() == [-12.5, 3.0]
    assert namespace["arr"] is arr and arr.tolist() == [0, 1, 2] and arr.flags.writeable


async def test_data_code_that_changes_the_person_s_lists_dicts_and_sets_changes_only_its_scratch_copy(bus):
    """The scratch copy held the person's very lists, dicts and sets: code changing one in place changed their data
    (a warning said so after the fact, and not at all for a change deeper in, or in a list of more than 64 items)."""
    inner = {"x": [1]}
    namespace = {"records": [{"a": 1}, {"a": 2}], "config": {"k": inner, "again": inner}, "tags": {"red"},
                 "pair": ([1], 2), "long": list(range(100)), "deep": [[[["bottom"]]]]}
    namespace["config"]["self"] = namespace["config"]  # it holds itself
    before = {k: repr(v) for k, v in namespace.items()}
    held = dict(namespace)
    model = u.ScriptedModel(steps(
        u.call_tool("run_code", code=(
            "records[0]['a'] = 99\nrecords.append({'a': 3})\nconfig['k']['x'].append(2)\ntags.add('blue')\n"
            "pair[0].append(5)\nlong[50] = -1\ndeep[0][0][0][0] = 'changed'\nconfig['self']['new'] = 1")),
        u.call_tool("run_code", code="print(records, config['again']['x'], config['new'], sorted(tags), pair, "
                                     "long[50], deep)"),
        answer="done",
    ))
    data = DataManager(namespace, model=model, bus=bus)
    assert await data.ask("Change them") == "done"
    changed, seen = results(model)
    assert changed.startswith("success: true") and "warning" not in changed, changed
    # the scratch copy keeps its changes for the next call (the dict held twice is one copy, as in the namespace)
    assert "[{'a': 99}, {'a': 2}, {'a': 3}] [1, 2] 1 ['blue', 'red'] ([1, 5], 2) -1 [[[['changed']]]]" in seen
    assert {k: repr(v) for k, v in namespace.items()} == before  # the person's data is as it was
    assert all(namespace[k] is v for k, v in held.items()) and namespace["config"]["k"] is inner


def test_data_without_a_namespace_outside_ipython_uses_its_own_dict(monkeypatch):
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)  # another test may have made a shell
    data = DataManager()
    ns, hidden = data._ns()
    assert ns == {} and hidden is None and data._ns()[0] is ns


# ---------------------------------------------------------------------------- transcripts


async def test_transcripts_search_and_ask_read_past_loops_from_the_store(bus, store):
    store.attach(bus)

    def lookup(animal: str) -> str:
        """Look an animal up."""
        return f"{animal}: moves north in May"

    past = u.ScriptedModel(steps(u.call_tool("lookup", animal="zebra"), answer="The zebras move north in May."))
    h1 = u.start_loop("Plot the zebra migration", model=past, tools=[lookup], name="zoo", bus=bus)
    await h1
    await u.start_loop("Count the penguins", model=u.ScriptedModel(["42 penguins"]), name="zoo", bus=bus)
    key = store.uid(h1.id)

    def read_found(messages):
        hits = json.loads(last_result(messages))
        return u.call_tool("get_transcript", loop=hits[0]["loop"])

    model = u.ScriptedModel(steps(
        u.call_tool("list_loops", name_contains="zoo"),
        u.call_tool("search_text", text="ZEBRA"),
        read_found,
        u.call_tool("get_transcript", loop="nope"),
        answer=f"the zebra run is {key}",
    ))
    transcripts = TranscriptsManager(store=store, model=model, bus=bus)
    h = transcripts.search("when did we look at zebras?")
    assert await h == f"the zebra run is {key}"
    listed, found, transcript, missing = results(model)
    listed = json.loads(listed)
    assert [r["task"] for r in listed] == ["Count the penguins", "Plot the zebra migration"]  # newest first
    assert listed[1]["status"] == "finished" and listed[1]["result"] == "The zebras move north in May."
    found = json.loads(found)
    assert {f["loop"] for f in found} == {key}  # not this search's own loop, whose task says "zebras"
    assert {f["kind"] for f in found} >= {"loop_started", "tool_finished", "loop_finished"}
    assert any("zebra: moves north in May" in f["match"] for f in found)
    assert transcript.startswith(f"loop zoo ({key}), finished")
    assert "[task] Plot the zebra migration" in transcript and "[calls lookup] {\"animal\": \"zebra\"}" in transcript
    assert "[tool result lookup] zebra: moves north in May" in transcript
    assert "[answer] The zebras move north in May." in transcript
    assert "no recorded loop 'nope'" in missing
    assert FROM_NOTEBOOK in system(model) and "You are serving its method `search`" in system(model)

    model = u.ScriptedModel(steps(u.call_tool("search_text", text="penguins"), answer="42"))
    assert await TranscriptsManager(store=store, model=model, bus=bus).ask("How many penguins?") == "42"
    assert "42 penguins" in results(model)[0] and "You are serving its method `ask`" in system(model)
    # the search loops themselves are recorded too, and can be found later
    assert any(r["name"] == "transcripts.search" for r in store.loops())


# ---------------------------------------------------------------------------- guidance


async def test_guidance_update_links_checked_functions_and_asks_the_functions_manager(bus, store, registered):
    functions_model = u.ScriptedModel(steps(u.call_tool("find_functions", query="report region"),
                                            answer="region_report(region: str)"))
    model = u.ScriptedModel(steps(
        u.call_tool("ask_functions", request="which function writes a region report?"),
        u.call_tool("add_guidance", title="Monthly report", body="1. clean\n2. report",
                    functions=["clean_sale", "region_report"]),
        u.call_tool("add_guidance", title="Monthly report", body="1. clean the sales\n2. write the report",
                    functions=["primitives.user.clean_sales", "region_report"]),
        u.call_tool("add_guidance", title="monthly report", body="again", functions=[]),
        u.call_tool("edit_guidance", id=1, body="1. clean the sales\n2. write the report\n3. send it"),
        u.call_tool("add_guidance", title="Scratch", body="temporary"),
        u.call_tool("delete_guidance", id=2),
        answer="added 'Monthly report' (id 1)",
    ))
    registry = Registry([
        GuidanceManager(store=store, model=model, bus=bus),
        FunctionsManager(model=functions_model, bus=bus),
    ])
    guidance = registry.manager("guidance")
    h = guidance.update("Add the monthly report procedure")
    assert await h == "added 'Monthly report' (id 1)"
    asked, unknown, added, duplicate, edited, _scratch, deleted = results(model)
    assert asked == "region_report(region: str)"
    assert ("these are not registered functions: ['clean_sale']; for 'clean_sale' did you mean ['clean_sales']?"
            in unknown)
    assert json.loads(added) == {"added": 1, "title": "Monthly report", "functions": ["clean_sales", "region_report"]}
    assert "exists already (id 1); edit it instead" in duplicate
    assert json.loads(edited)["body"].endswith("3. send it")
    assert "deleted guidance 2 ('Scratch')" in deleted
    rows = store.query("SELECT id, title, body, functions FROM guidance")
    assert [(r["id"], r["title"], json.loads(r["functions"])) for r in rows] == [(1, "Monthly report",
                                                                                  ["clean_sales", "region_report"])]
    # the functions manager's loop is a child of the guidance loop, and knows who is calling
    assert [c.name for c in h.children] == ["functions.search"]
    who = "Who is calling: the GuidanceManager, keeping the person's procedures and how-to notes."
    assert who in system(functions_model)
    assert FROM_NOTEBOOK in system(model) and "ask_functions" in offered(model)


async def test_guidance_search_and_ask_and_names_kept_as_given_without_a_functions_manager(bus, store):
    writer = u.ScriptedModel(steps(
        u.call_tool("add_guidance", title="Cleaning sales", body="1. drop duplicates\n2. drop negatives",
                    functions=["not_yet_written"]),
        u.call_tool("add_guidance", title="Plotting", body="1. use seaborn"),
    ))
    guidance = GuidanceManager(store=store, model=writer, bus=bus)
    await guidance.update("add two procedures")
    assert "ask_functions" not in offered(writer)
    assert json.loads(results(writer)[0])["functions"] == ["not_yet_written"]  # accepted as given

    model = u.ScriptedModel(steps(
        u.call_tool("search_guidance", query="how do I clean the sales?"),
        u.call_tool("get_guidance", id_or_title="Plotting"),
        u.call_tool("get_guidance", id_or_title=9),
        answer="see 'Cleaning sales'",
    ))
    guidance.model = model
    assert await guidance.search("cleaning sales data") == "see 'Cleaning sales'"
    found, plotting, missing = results(model)
    found = json.loads(found)
    assert found[0]["title"] == "Cleaning sales" and "drop negatives" in found[0]["body"]
    assert json.loads(plotting)["id"] == 2 and "there is no guidance 9" in missing
    assert offered(model) == ["get_guidance", "list_guidance", "search_guidance"]  # search cannot write

    model = u.ScriptedModel(steps(u.call_tool("list_guidance"), answer="two entries"))
    guidance.model = model
    assert await guidance.ask("What procedures are there?") == "two entries"
    assert [e["title"] for e in json.loads(results(model)[0])] == ["Cleaning sales", "Plotting"]
    assert "You are serving its method `ask`" in system(model)


# ---------------------------------------------------------------------------- memory


class FakeTasks:
    """Durable tasks (a stand-in with the TasksManager's public create)."""

    alias = "tasks"

    def __init__(self):
        self.created = []

    def create(self, name: str, description: str):
        self.created.append((name, description))
        return type("Task", (), {"id": f"t{len(self.created)}", "name": name})()


async def test_memory_consolidates_every_n_finished_top_level_loops(bus, store):
    store.attach(bus)
    knowledge_model = u.ScriptedModel(steps(
        u.call_tool("create_table", name="facts", columns={"fact": "text"}, description="Facts from operations"),
        u.call_tool("add_rows", table="facts", rows=[{"fact": "north fell 12%"}]),
        answer="recorded 1 fact in facts",
    ))
    guidance_model = u.ScriptedModel(steps(
        u.call_tool("add_guidance", title="Regional check", body="1. compare quarters\n2. flag falls over 10%"),
        answer="added 'Regional check'",
    ))

    def consolidate(messages, tools):
        turns = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
        if turns == 0:
            return u.call_tool("recent_loops")
        if turns == 1:
            key = json.loads(last_result(messages))[0]["key"]
            return u.call_tool("read_transcript", loop=key)
        if turns == 2:
            return [u.call_tool("update_knowledge", instruction="Record: north fell 12%"),
                    u.call_tool("update_guidance", instruction="Add the regional check procedure"),
                    u.call_tool("create_task", name="Investigate north", description="Find out why north fell")]
        return "recorded a fact, a procedure and a task"

    memory_model = u.ScriptedModel(consolidate)
    tasks = FakeTasks()
    registry = Registry([
        KnowledgeManager(store=store, model=knowledge_model, bus=bus),
        GuidanceManager(store=store, model=guidance_model, bus=bus),
        MemoryManager(every=3, store=store, model=memory_model),
        tasks,
    ])
    memory = registry.manager("memory")
    memory.attach(bus)

    async def tiny(i):
        return await u.start_loop(f"tiny task {i}: north fell 12%", model=u.ScriptedModel([f"answer {i}"]), name="tiny",
                                  bus=bus)

    await tiny(0)
    await tiny(1)
    assert memory.pending == 2 and memory.consolidations == []
    await tiny(2)
    await until(lambda: memory.consolidations)
    (h,) = memory.consolidations
    await h.wait_for("loop_finished")
    assert await h == "recorded a fact, a procedure and a task"
    assert h.name == "memory.consolidate" and h.parent is None
    assert sorted(c.name for c in h.children) == ["guidance.update", "knowledge.update"]

    recent, transcript, *writes = results(memory_model)
    assert [r["task"] for r in json.loads(recent)] == [f"tiny task {i}: north fell 12%" for i in (2, 1, 0)]
    assert "[task] tiny task 2: north fell 12%" in transcript and "[answer] answer 2" in transcript
    assert sorted(writes) == sorted(["recorded 1 fact in facts", "added 'Regional check'",
                                     "created task t1 ('Investigate north')"])
    assert store.query('SELECT fact FROM "kn_facts"') == [{"fact": "north fell 12%"}]
    assert [r["title"] for r in store.query("SELECT title FROM guidance")] == ["Regional check"]
    assert tasks.created == [("Investigate north", "Find out why north fell")]

    prompt = system(memory_model)
    assert ("Who is calling: the MemoryManager's own schedule "
            "(3 top-level operations finished since the last consolidation)") in prompt
    assert "- tiny (" in prompt and "task 'tiny task 0: north fell 12%'" in prompt
    assert "Managers available to you: knowledge, guidance, tasks" in prompt
    assert offered(memory_model) == ["ask_knowledge", "create_task", "read_transcript", "recent_loops",
                                     "update_guidance",
                                     "update_knowledge"]
    # the managers it called were told who was calling
    caller = "Who is calling: the MemoryManager, consolidating what recent operations learned into long-term memory."
    assert caller in system(knowledge_model) and caller in system(guidance_model)
    # its own loops and their children are not counted
    assert memory.pending == 0
    memory.detach()
    await tiny(3)
    assert memory.pending == 0


async def test_memory_works_without_the_other_managers_and_can_be_run_by_hand(bus):
    model = u.ScriptedModel(steps(answer="nothing to record"))
    memory = MemoryManager(every=2, model=model, bus=bus)
    Registry([memory])
    h = memory.consolidate()
    assert await h == "nothing to record"
    assert offered(model) == []
    prompt = system(model)
    assert FROM_NOTEBOOK in prompt and "Managers available to you: none (you can only report)" in prompt
    assert "Consolidate what the recent operations learned" in model.requests[0].messages[1]["content"]
    with pytest.raises(u.UserError, match="every must be a positive number"):
        MemoryManager(every=0)


# ---------------------------------------------------------------------------- registry and actor


async def test_the_registry_offers_loop_methods_as_primitives_tools_and_prompt(bus, store):
    registry = Registry([
        FunctionsManager(bus=bus),
        ManagerSpec(KnowledgeManager(store=store, bus=bus), usage_hints="ask before assuming a fact"),
        DataManager({}, bus=bus),
        TranscriptsManager(store=store, bus=bus),
        GuidanceManager(store=store, bus=bus),
        MemoryManager(store=store, bus=bus),
    ])
    primitives = registry.primitives()
    exposed = {alias: sorted(n for n in vars(p) if not n.startswith("_")) for alias, p in primitives.items()}
    assert exposed == {
        "functions": ["ask", "search"], "knowledge": ["ask", "update"], "data": ["ask", "describe", "find"],
        "transcripts": ["ask", "search"], "guidance": ["ask", "search", "update"], "memory": ["consolidate"],
    }  # dataframe, catalog, attach and detach are for people, not plans
    assert [t.name for t in registry.tools()][:4] == ["functions_search", "functions_ask", "knowledge_ask",
                                                      "knowledge_update"]
    prompt = registry.prompt()
    assert "## knowledge: Structured facts the person wants kept" in prompt
    assert "Usage: ask before assuming a fact" in prompt
    assert "- knowledge.ask(question" in prompt
    assert ": Answer a question from the knowledge tables: find the relevant" in prompt
    assert "- guidance.update(instruction" in prompt and "- memory.consolidate(request" in prompt
    for alias in registry.aliases:
        assert registry.manager(alias).registry is registry
        assert isinstance(registry.manager(alias), Manager)


async def test_an_actor_plan_awaits_a_manager_whose_loop_is_its_child(bus, store):
    knowledge_model = u.ScriptedModel(steps(u.call_tool("list_tables"), answer="no tables yet"))
    registry = Registry([KnowledgeManager(store=store, model=knowledge_model, bus=bus)])

    def plan(messages, tools):
        if not tool_messages(messages):
            return u.call_tool("execute_code", code="answer = await primitives.knowledge.ask('what tables exist?')",
                               intent="ask the knowledge manager")
        return "asked"

    ns: dict = {}
    actor_model = u.ScriptedModel(plan)
    h = registry.actor(actor_model, namespace=ns, bus=bus).act("What do we know?")
    assert await h == "asked"
    assert ns["answer"] == "no tables yet"
    (child,) = h.children
    assert child.name == "knowledge.ask" and child.parent is h and child.tree.lineage[0] == h.tree.lineage[0]
    assert "Who is calling: the CodeAct actor, running a plan for the person." in system(knowledge_model)
    assert results(knowledge_model)[0] == "there are no knowledge tables yet"
    actor_prompt = system(actor_model)
    assert "- knowledge.ask(question" in actor_prompt and "Answer a question from the knowledge tables" in actor_prompt


async def test_memory_never_runs_two_consolidations_at_once(bus):
    gate = asyncio.Event()

    async def consolidate(messages, tools):
        if len(memory.consolidations) == 1:
            await gate.wait()  # the first consolidation is slow
        return f"consolidation {len(memory.consolidations)}"

    memory = MemoryManager(every=1, model=u.ScriptedModel(consolidate))
    memory.attach(bus)
    await u.start_loop("one", model=u.ScriptedModel(["1"]), bus=bus)
    await until(lambda: memory.consolidations)
    first = memory.consolidations[0]
    await first.wait_for("model_request")
    await u.start_loop("two", model=u.ScriptedModel(["2"]), bus=bus)
    await u.start_loop("three", model=u.ScriptedModel(["3"]), bus=bus)
    assert len(memory.consolidations) == 1 and memory.pending == 2  # counted, waiting for the first to end
    gate.set()
    assert await first == "consolidation 1"
    await until(lambda: len(memory.consolidations) == 2)
    second = memory.consolidations[1]
    assert await second == "consolidation 2" and memory.pending == 0
    model = second.model
    assert isinstance(model, u.ScriptedModel)
    prompt = model.requests[-1].messages[0]["content"]  # the second one is told about the loops it covers
    assert "task 'two'" in prompt and "task 'three'" in prompt and "task 'one'" not in prompt


async def test_a_discovery_first_actor_lists_functions_and_guidance_before_anything_else(bus, store):
    inner = u.ScriptedModel(lambda m, t: "nothing relevant")  # the functions and guidance loops

    def plan(messages, tools):
        names = sorted(t["function"]["name"] for t in tools)
        done = tool_messages(messages)
        if "execute_code" not in names:
            assert names == ["functions_search", "guidance_search"]
            return u.call_tool(names[len(done)], request="what helps with sales?")
        if len(done) == 2:
            return u.call_tool("execute_code", code="ok = True", intent="act")
        return "done"

    registry = Registry([FunctionsManager(model=inner, bus=bus), GuidanceManager(store=store, model=inner, bus=bus)])
    actor_model = u.ScriptedModel(plan)
    ns: dict = {}
    h = registry.actor(actor_model, namespace=ns, bus=bus, discovery_first=True).act("Improve sales")
    assert await h == "done"
    assert [r.tool_choice for r in actor_model.requests[:2]] == ["required", "required"]
    assert ns["ok"] is True and [c.name for c in h.children] == ["functions.search", "guidance.search"]
    with pytest.raises(u.UserError, match="discovery_first needs the functions and guidance managers"):
        Registry([FunctionsManager(bus=bus)]).actor(actor_model, discovery_first=True)
