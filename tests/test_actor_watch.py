"""What plans and the person change shows, step after step, while most of the namespace stays as it was.

Most steps are looked at against the last snapshot, redoing only what may differ (unity_nb/actor/_watch.py):
these steps make one change each among many DataFrames, and each change must show as it would without that
history, whichever object it replaces and whether the object replaced lives on elsewhere.
"""

import asyncio
import re

import numpy as np
import pandas as pd
import pytest
from conftest import tool_messages

import unity_nb as u


def frames(k):
    return {f"f{i:02d}": pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5]}) for i in range(k)}


def reported(result):
    """{"created"|"changed": [names], "deleted": [names]} of one plan's result."""
    out = {}
    for kind in ("created", "changed"):
        m = re.search(rf"variables {kind}:\n((?:- .*\n?)+)", result)
        out[kind] = re.findall(r"^- (\w+):", m[1], flags=re.M) if m else []
    m = re.search(r"variables deleted: (.*)", result)
    out["deleted"] = m[1].split(", ") if m else []
    return out


async def test_each_change_a_plan_makes_shows_and_nothing_else_does(bus):
    ns = {**frames(20), "lst": [1, 2], "arr": np.zeros(6), "big": "x" * 5000}
    ns["keep"] = ns["f07"].columns  # the columns Index f07 drops lives on: no weak reference sees it go
    steps = [
        ("i = 1", {"created": ["i"]}),
        ("i = 2", {"changed": ["i"]}),
        ("None", {}),
        ("f07.columns = ['x', 'y']", {"changed": ["f07"]}),
        ("f03['c'] = 1.5", {"changed": ["f03"]}),
        ("f11['a'] = f11['a'] / 2", {"changed": ["f11"]}),  # int64 to float64: its block is replaced
        ("f05.loc[len(f05)] = [9, 9.5]", {"changed": ["f05"]}),  # a row appended: a new manager
        ("del f12['b']", {"changed": ["f12"]}),
        ("f13.iloc[0, 1] = 7.5", {}),  # a value rewritten: shape, labels and dtypes as they were
        ("lst.append(3)", {"changed": ["lst"]}),
        ("arr.shape = (3, 2)", {"changed": ["arr"]}),
        ("big = big + 'y'\ni = 3", {"changed": ["i", "big"]}),
        ("import math as i", {"deleted": ["i"]}),  # a module: not a variable
        ("i = 4", {"created": ["i"]}),
        ("f01 = f01.copy()", {"changed": ["f01"]}),  # another object, though equal
        ("f01['z'] = 0", {"changed": ["f01"]}),  # the new one changed in place, a step after it was bound
        ("None", {}),
    ]
    model = u.ScriptedModel(
        lambda messages, tools: u.call_tool("execute_code", code=steps[len(tool_messages(messages))][0], intent="x")
        if len(tool_messages(messages)) < len(steps) else "done"
    )
    h = u.act("change things", model=model, namespace=ns, bus=bus, max_steps=len(steps) + 2)
    assert await h == "done"
    results = [m["content"] for m in tool_messages(model.requests[-1].messages)]
    for (code, want), result in zip(steps, results, strict=True):
        got = {k: v for k, v in reported(result).items() if v}
        assert got == {k: sorted(v, key=list(ns).index) for k, v in want.items()}, (code, result)
    assert "- f07: pd.DataFrame, shape (3, 2); columns: x: int64, y: float64" in results[3]
    assert "- f11: pd.DataFrame, shape (3, 2); columns: a: float64, b: float64" in results[5]
    assert "- f05: pd.DataFrame, shape (4, 2)" in results[6]
    notes = [m["content"] for m in model.requests[-1].messages if m["role"] == "user"][1:]
    assert not any("outside your plans" in n for n in notes)  # every change was a plan's


async def test_each_change_the_person_makes_between_steps_shows_before_the_next(bus):
    ns = {**frames(20), "lst": [1, 2]}
    others = {"cols": ns["f04"].columns, "index": ns["f09"].index}  # held outside the namespace
    changes = [
        lambda: None,
        lambda: setattr(ns["f04"], "columns", ["p", "q"]),
        lambda: ns["f09"].__setitem__("new", 1),
        lambda: setattr(ns["f09"], "index", pd.Index([7, 8, 9])),  # shape, labels and dtypes as they were
        lambda: ns["lst"].append(3),
        lambda: ns["f02"].__setitem__("a", ns["f02"]["a"].astype("float32")),
        lambda: ns.__setitem__("n", 5),
        lambda: None,
    ]
    gates = [asyncio.Event() for _ in changes]

    async def reply(messages, tools):
        done = len(tool_messages(messages))
        if done and done <= len(changes):
            await gates[done - 1].wait()
        if done < len(changes):
            return u.call_tool("execute_code", code=f"step = {done}", intent="wait")
        return "done"

    model = u.ScriptedModel(reply)
    h = u.act("wait", model=model, namespace=ns, bus=bus, max_steps=len(changes) + 3)
    for k, change in enumerate(changes):
        await h.wait_for("code_executed", lambda e, k=k: e.code == f"step = {k}", timeout=10)
        change()  # after the plan, before the loop's next look: the person's
        gates[k].set()
    assert await h == "done"
    assert others["cols"] is not ns["f04"].columns and others["index"] is not ns["f09"].index
    notes = [m["content"] for m in model.requests[-1].messages
             if m["role"] == "user" and "outside your plans" in m["content"]]
    assert [re.findall(r"^(created|changed) (\w+):", n, flags=re.M) for n in notes] == [
        [("changed", "f04")], [("changed", "f09")], [("changed", "lst")], [("changed", "f02")], [("created", "n")],
    ]
    assert "changed f04: pd.DataFrame, shape (3, 2); columns: p: int64, q: float64" in notes[0]
    assert "changed f02: pd.DataFrame, shape (3, 2); columns: a: float32, b: float64" in notes[3]
    results = [m["content"] for m in tool_messages(model.requests[-1].messages)]
    assert [reported(r)["changed"] for r in results] == [[], *[["step"]] * (len(changes) - 1)]  # only their own


async def one_plan(ns, code, bus):
    """A one-plan run over ``ns``: its system prompt, and what its plan's result reports."""
    model = u.ScriptedModel(
        lambda messages, tools: "done" if tool_messages(messages) else u.call_tool("execute_code", code=code,
                                                                                      intent="x")
    )
    assert await u.act("look", model=model, namespace=ns, bus=bus) == "done"
    messages = model.requests[-1].messages
    return messages[0]["content"], {k: v for k, v in reported(tool_messages(messages)[0]["content"]).items() if v}


async def test_each_run_sees_what_changed_since_the_last_run_and_reports_only_its_plan_s_changes(bus):
    """A run's first look starts from the last run's over the same namespace: whatever the person changed between
    two runs shows in the next one's system prompt, and no plan is told of it as its own change."""
    import math

    ns = {**frames(20), "lst": [1, 2]}
    between = [
        (lambda: None, "- f04: pd.DataFrame, shape (3, 2); columns: a: int64, b: float64"),
        (lambda: setattr(ns["f04"], "columns", ["p", "q"]), "- f04: pd.DataFrame, shape (3, 2); columns: p: int64"),
        (lambda: ns["f09"].__setitem__("new", 1), "- f09: pd.DataFrame, shape (3, 3)"),
        (lambda: setattr(ns["f09"], "index", pd.Index([7, 8, 9])), "\n7 1 0.5 1\n"),
        (lambda: ns["lst"].append(3), "- lst: list, length 3: [1, 2, 3]"),
        (lambda: ns["f02"].__setitem__("a", ns["f02"]["a"].astype("float32")), "columns: a: float32, b: float64"),
        (lambda: ns.__setitem__("m", math), None),  # a module: no variable
        (lambda: ns.__setitem__("m", 3), "- m: int: 3"),
        (lambda: ns.pop("f05"), None),
        (lambda: ns.__setitem__("f06", ns["f06"].copy()), "- f06: pd.DataFrame, shape (3, 2)"),
        (lambda: ns["f06"].__setitem__("c", 2.5), "- f06: pd.DataFrame, shape (3, 3)"),  # the new one, in place
        # a cell run in IPython adds names that are never variables (``_i12``, ``_12``) after the others
        (lambda: ns.update({"_i12": "f08.columns = ['u', 'v']", "_12": 5}), "- f07: pd.DataFrame, shape (3, 2)"),
        (lambda: (ns.update({"_i13": "c"}), setattr(ns["f08"], "columns", ["u", "v"])), "u: int64, v: float64"),
        (lambda: (ns.update({"_i14": "c"}), ns["lst"].append(4)), "- lst: list, length 4: [1, 2, 3, 4]"),
        (lambda: ns.update({"_i15": "c", "k": 7}), "- k: int: 7"),
    ]
    for k, (change, shows) in enumerate(between):
        change()
        system, got = await one_plan(ns, f"step = {k}", bus)
        assert got == ({"created": ["step"]} if k == 0 else {"changed": ["step"]}), k
        listing = "\n".join(" ".join(line.split()) for line in system.split("Variables in the namespace now:\n")[1]
                            .splitlines())
        if shows is not None:
            assert shows in listing, (k, listing)
        assert ("- m: module" not in listing) and ("- f05:" not in listing or k < 8), k


async def test_a_namespace_made_where_a_dead_one_was_is_looked_at_as_it_is(bus):
    """What a run learnt of a namespace is kept under its identity for the next run's; a new dict that takes a
    dead one's identity, with the same names bound to other objects, is looked at as it is."""
    import gc

    df = pd.DataFrame({"x": [1, 2, 3]})
    ns = {"a": 1, "f": df, "lst": [1]}
    await one_plan(ns, "a = 2", bus)
    old = id(ns)
    for _ in range(10):  # the loop's last callbacks let go of the run (and so of its namespace)
        await asyncio.sleep(0)
    gc.collect()
    del ns  # its last reference: it goes at once, and the next dict made takes its place (CPython's free list)
    made = [{} for _ in range(100)]
    ns = next((d for d in made if id(d) == old), None)
    del made
    if ns is None:
        pytest.skip("no dict took the dead one's identity")
    # the same names in the same order; the frame the very one, the others new objects
    ns.update({"a": 1, "f": df, "lst": [5, 6, 7], "__builtins__": __builtins__})
    system, got = await one_plan(ns, "lst.append(8)\na = 5", bus)
    assert got == {"changed": ["a", "lst"]}
    assert "- a: int: 1" in system and "- f: pd.DataFrame, shape (3, 1); columns: x: int64" in system
    assert "- lst: list, length 3: [5, 6, 7]" in system
