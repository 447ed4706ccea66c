"""%unity filter|extract|topk|join|agg: parsed verbatim, refused with what to do, started as operations in a real
IPython shell, and one run in a real kernel."""

import asyncio
import textwrap

import pandas as pd
import pytest
from _kernel import Kernel
from IPython.core.error import UsageError

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


def last_user(messages):
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def oracle(messages, tools):
    text = last_user(messages)
    if "Decide for this row" in text:
        return u.call_tool("submit_answer", keep="humans" in text.split("report")[0], reason="read it")
    if "Give the fields" in text:
        return u.call_tool("submit_answer", method="experiment" if "experiment" in text else "other")
    if "\nA:\n" in text:
        a, b = (int(text.split(f"\n{s}:\n")[1].split()[1]) for s in "AB")
        return u.call_tool("submit_answer", better="A" if a > b else "B", reason="bigger")
    if "Rate this row" in text:
        return u.call_tool("submit_answer", score=int(text.split("item ")[-1].split()[0]) % 11, reason="r")
    if "match true or false" in text:
        return u.call_tool("submit_answer", match="experiment" in text and "sleep in humans" in text,
                           reason="both about sleep")
    return f"{text.count('abstract:')} abstracts"


PAPERS = pd.DataFrame({"abstract": ["an experiment on humans and sleep", "a survey of mice", "humans asleep"],
                       "field": ["neuro", "zoo", "neuro"]}, index=["p1", "p2", "p3"])
GRANTS = pd.DataFrame({"aims": ["sleep in humans", "zebrafish"]}, index=["g1", "g2"])


async def test_each_operator_subcommand_starts_a_named_operation_on_the_notebook_s_items(ip):
    ip.user_ns.update(m=u.ScriptedModel(oracle), papers=PAPERS, grants=GRANTS, items=[f"item {i}" for i in range(9)])
    ip.run_line_magic("unity", "model --var m")
    keep = ip.run_line_magic("unity", "filter papers --concurrency 50 --name keep Does {abstract} report humans?")
    assert isinstance(keep, u.FilterHandle) and keep.name == "keep" and keep.rows.plan.concurrency == 50
    assert list((await asyncio.wait_for(keep.result(), 10)).index) == ["p1", "p3"]
    fields = ip.run_line_magic("unity", "extract papers --columns method From {abstract}")
    assert (await asyncio.wait_for(fields.result(), 10))["method"].tolist() == ["experiment", "other", "other"]
    best = ip.run_line_magic("unity", "topk items 2 --candidates 4 Which item is biggest?")
    assert (await asyncio.wait_for(best.result(), 10)).tolist() == ["item 8", "item 7"]
    assert best.calls == 9 + 10  # scored; items 4-8 (within a point of the 4th best score) in a round robin
    pairs = ip.run_line_magic("unity", "join papers grants On {papers.abstract} and {grants.aims}: funded?")
    found = await asyncio.wait_for(pairs.result(), 10)
    assert list(zip(found["left"], found["right"])) == [("p1", "g1")] and pairs.pairs_total == 6
    summary = ip.run_cell_magic("unity", "agg papers --by field", "Summarise the main findings.")
    assert (await asyncio.wait_for(summary.result(), 10)).to_dict() == {"neuro": "2 abstracts", "zoo": "1 abstracts"}
    listed = ip.run_line_magic("unity", "list")
    assert {"keep", summary.name, pairs.name} <= set(listed["name"])


async def test_budget_and_no_cache_reach_an_operator_started_by_a_magic(ip):
    model = u.ScriptedModel(oracle, name="ops-magic-budget")
    u.set_price(model, input=1.0, output=1.0)
    ip.user_ns.update(m=model, papers=PAPERS)
    ip.run_line_magic("unity", "model --var m")
    keep = ip.run_line_magic("unity", "filter papers --budget 2.5 --name cheap Does {abstract} report humans?")
    assert keep.spending.budget == 2.5
    await asyncio.wait_for(keep.result(), 10)
    summary = ip.run_line_magic("unity", "agg papers --by field --budget 1 Summarise.")
    await asyncio.wait_for(summary.result(), 10)
    assert summary.budget == 1.0 and summary.phases[0].spending.budget == 1.0
    # the store's result cache, as %unity map uses it, unless --no-cache (a ScriptedModel is never cached)
    ip.user_ns["real"] = u.OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api_key="sk-test")
    ip.run_line_magic("unity", "model --var real")
    cached = ip.run_line_magic("unity", "filter papers --name cached Does {abstract} report humans?")
    uncached = ip.run_line_magic("unity", "filter papers --no-cache --name uncached Does {abstract} report humans?")
    assert cached.rows.plan.cache is not None and uncached.rows.plan.cache is None
    await cached.stop()
    await uncached.stop()


@pytest.mark.parametrize(("line", "said"), [
    ("topk papers ten Best?", "needs K, the number of rows to keep"),
    ("extract papers From {abstract}", "needs --columns"),
    ("join papers", "needs the right items"),
    ("filter papers --concurrency 50", "needs a task"),
    ("agg papers --by", "needs a value"),
    ("filtr papers x", "did you mean 'filter'"),
    ("topk papers 3 --max-comparison 5 Best?", "did you mean --max-comparisons"),
])
def test_operator_lines_that_cannot_run_say_what_to_do(ip, line, said):
    ip.user_ns["papers"] = PAPERS
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("unity", line)
    assert said in str(info.value)



@pytest.mark.parametrize("line", [
    "topk papers 2 Which {title} is best?",
    "topk papers.abstract 2 Which {title} is best?",
    "agg papers Summarise {title}",
    "agg papers --by field Summarise {title}",
])
async def test_an_operator_s_task_naming_a_column_no_row_has_is_refused_at_its_line(ip, line):
    """As map, filter and extract do: a usage error naming the columns there are, before anything runs (top-k's
    scoring map failed once it ran; agg showed every column instead, silently)."""
    ip.user_ns["papers"] = PAPERS
    ip.user_ns["m"] = u.ScriptedModel(oracle)
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match=r"names \{title\}, which no row has"):
        ip.run_line_magic("unity", line)
    assert not ip.run_line_magic("unity", "list").shape[0]  # nothing started


async def test_a_join_line_takes_blocking_and_max_pairs_and_a_resume_runs_them_again(ip, tmp_path):
    """u.join's blocking= and max_pairs= on a %unity join line: --blocking words|none (none asks every pair, as
    --all-pairs does) and --max-pairs N (0 too, as u.join takes), refused with what they take, kept in the stored
    line so a resume after a dead kernel runs with them."""
    from conftest import magics

    lefts, rights = pd.DataFrame({"t": ["a", "b", "c"]}), pd.DataFrame({"t": ["x", "y", "z"]})  # no word shared
    ip.user_ns.update(m=u.ScriptedModel(oracle), lefts=lefts, rights=rights)
    ip.run_line_magic("unity", "model --var m")
    task = "On {lefts.t} and {rights.t}: match true or false?"
    every = ip.run_line_magic("unity", f"join lefts rights --blocking none --max-pairs 9 {task}")
    assert every.blocking is None and every.max_pairs == 9
    await asyncio.wait_for(every.result(), 10)
    assert every.pairs_asked == every.pairs_total == 9 and every.recall.status == "exact"
    stored = magics(ip).store.find(every.name)["task"]
    assert stored == f"lefts rights --blocking none --max-pairs 9 {task}"  # what a resume reads back
    words = ip.run_line_magic("unity", f"join lefts rights --blocking Words --max-pairs 0 --sample 2 {task}")
    assert words.blocking == "words" and words.max_pairs == 0
    await asyncio.wait_for(words.result(), 10)
    for line, said in [
        (f"--blocking some {task}", "blocking takes words (only pairs sharing rare words) or none (every pair), "
                                    "not 'some'"),
        (f"--blocking words --all-pairs {task}", "--all-pairs asks every pair and --blocking words only pairs"),
        (f"--max-pairs lots {task}", "option --max-pairs takes a whole number >= 0, not 'lots'"),
        (f"--max-pairs -1 {task}", "option --max-pairs takes a whole number >= 0"),
        (f"--blocking none --max-pairs 8 {task}", "more than max_pairs=8. Pass max_pairs=9 (--max-pairs 9)"),
    ]:
        with pytest.raises(UsageError) as info:
            ip.run_line_magic("unity", f"join lefts rights {line}")
        assert said in str(info.value) and "%unity help join" in str(info.value), (line, str(info.value))

    reached, hold = asyncio.Event(), asyncio.Event()

    async def dies(messages, tools):  # its kernel dies while a pair is asked
        if "On c and z" in last_user(messages):
            reached.set()
            await hold.wait()
        return oracle(messages, tools)

    other = u.Store(str(tmp_path / "state.db"))  # another kernel on the same file, which ran the line
    bus = u.EventBus()
    other.attach(bus)
    h = u.join(lefts, rights, task, names=("lefts", "rights"), blocking=None, max_pairs=9, label=stored,
               name="again", model=u.ScriptedModel(dies), concurrency=1, bus=bus)
    await asyncio.wait_for(reached.wait(), 10)
    other.flush()
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (other.session,))  # that kernel's process is gone
    resumed = ip.run_line_magic("unity", "resume again")
    assert resumed.blocking is None and resumed.max_pairs == 9
    await asyncio.wait_for(resumed.result(), 10)
    assert resumed.pairs_asked == 9 and resumed.recall.status == "exact"
    assert resumed.phases[0].rows.kept == 8  # every pair but the one its kernel died asking
    hold.set()
    await h.stop()
    other.close()


async def test_a_join_line_takes_sample_0_as_u_join_does(ip):
    """u.join(sample=0) asks no recall sample (the recall is not checked, and said so), but --sample 0 was refused
    ('at least 1'): the line takes 0, kept in the stored line a resume reads back; a negative one is refused."""
    from conftest import magics

    ip.user_ns.update(m=u.ScriptedModel(oracle), papers=PAPERS, grants=GRANTS)
    ip.run_line_magic("unity", "model --var m")
    task = "On {papers.abstract} and {grants.aims}: funded?"
    h = ip.run_line_magic("unity", f"join papers grants --sample 0 {task}")
    found = await asyncio.wait_for(h.result(), 10)
    assert list(zip(found["left"], found["right"])) == [("p1", "g1")]
    assert h.recall.status == "not checked" and h.recall.sampled == 0 and "sample=0" in h.recall.text
    assert magics(ip).store.find(h.name)["task"] == f"papers grants --sample 0 {task}"
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("unity", f"join papers grants --sample -1 {task}")
    assert "option --sample takes a whole number >= 0" in str(info.value)


async def test_a_join_line_of_every_pair_refuses_the_options_that_only_tune_blocking(ip):
    """--blocking none (or --all-pairs) asks every pair: --per-left, --sample and --recall change nothing there,
    and were taken without a word; beside it they are a usage error saying so, and nothing starts."""
    ip.user_ns.update(m=u.ScriptedModel(oracle), papers=PAPERS, grants=GRANTS)
    ip.run_line_magic("unity", "model --var m")
    task = "On {papers.abstract} and {grants.aims}: funded?"
    for line, said in [("--blocking none --per-left 2", "per_left= (--per-left) only apply with blocking"),
                       ("--all-pairs --sample 0", "sample= (--sample) only apply with blocking"),
                       ("--blocking none --recall 0.9", "recall= (--recall) only apply with blocking"),
                       ("--all-pairs --estimate --sample 10", "sample= (--sample) only apply with blocking")]:
        with pytest.raises(UsageError) as info:
            ip.run_line_magic("unity", f"join papers grants {line} {task}")
        assert said in str(info.value) and "%unity help join" in str(info.value), (line, str(info.value))
    assert not ip.run_line_magic("unity", "list").shape[0]  # nothing started
    every = ip.run_line_magic("unity", f"join papers grants --all-pairs {task}")
    await asyncio.wait_for(every.result(), 10)
    assert every.pairs_asked == every.pairs_total == 6


KERNEL = textwrap.dedent(  # after %load_ext in a cell of its own: a line ending in "?" is kept as typed from then on
    """
    import pandas as pd, unity_nb as u

    def script(messages, tools):
        text = messages[-1]["content"]
        return u.call_tool("submit_answer", keep=None if "lost" in text else "slept" in text,
                           reason="read it")

    m = u.ScriptedModel(script)
    %unity model --var m
    papers = pd.DataFrame({"abstract": ["humans slept", "mice ran", "lost text"]}, index=["a", "b", "c"])
    keep = %unity filter papers --concurrency 50 Does {abstract} report an experiment on humans?
    """
)


def test_filter_in_a_real_kernel_keeps_rows_and_says_which_it_could_not_decide():
    kernel = Kernel()
    try:
        kernel.run("%load_ext unity_nb")
        kernel.run(KERNEL)
        assert kernel.value("list((await keep).index)") == ["a"]
        assert kernel.value("(await keep).attrs['reasons']") == {"c": "undecided: read it"}
        verdicts = kernel.value("keep.verdicts.astype(object).where(keep.verdicts.notna(), None).values.tolist()")
        assert verdicts == [[True, "read it"], [False, "read it"], [None, "read it"]]
        assert kernel.value("keep.status.value") == "finished"
    finally:
        kernel.close()
