"""One declaration per %unity subcommand gives its parser, its help and its errors (issue 25, "one source for
each verb and each option"): a steering verb's subcommand is derived from its entry in ``VERBS`` when it is read
(a verb registered later, or changed, is parsed and helped as its entry says, and gone once unregistered), no
help text repeats a verb's doc, and every subcommand's help lists exactly the options its parser takes."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import pytest
from conftest import Gate, magics
from IPython.core.error import UsageError

import unity_nb as u
from unity_nb.jupyter import _args
from unity_nb.jupyter._args import HELP, SUBCOMMANDS, declaration, parse, subcommands
from unity_nb.jupyter._commands import FLAG, Subcommand
from unity_nb.loop import VERBS, LoopHandle, Verb, register_verb, unregister_verb

HAIL_DOC = "Hail the operation NAME."
BUILTIN_VERBS = ("interject", "ask", "pause", "resume", "stop")


@pytest.fixture
def hail():
    register_verb(Verb("hail", entry=lambda m, _r: f"[hailed: {m}]", message="required", doc=HAIL_DOC))
    register_verb(Verb("wave", entry=lambda _m, _r: "[waved at]", doc="Wave at the operation NAME."))
    yield
    unregister_verb("hail")
    unregister_verb("wave")


def printed(ip, capsys, line: str) -> str:
    capsys.readouterr()
    assert ip.run_line_magic("unity", line) is None
    return capsys.readouterr().out


def test_a_registered_verb_is_a_subcommand_with_its_help_from_its_entry(hail, stored_shell, capsys):
    ip = stored_shell
    usage = "%unity hail NAME MESSAGE\n    " + HAIL_DOC
    assert usage in printed(ip, capsys, "help")
    assert printed(ip, capsys, "help hail").strip() == usage
    assert printed(ip, capsys, "hail --help").strip() == usage
    assert "%unity wave NAME\n    Wave at the operation NAME." in printed(ip, capsys, "help")
    cmd = parse("hail op hello there")
    assert (cmd.sub, cmd.name, cmd.text, cmd.options) == ("hail", "op", "hello there", {})
    assert parse("hail op", "from the cell").text == "from the cell"
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("unity", "hail op")
    assert str(info.value) == "%unity hail needs a message\n(%unity help hail shows its usage)"  # not the usage
    with pytest.raises(UsageError, match="%unity hail needs the name of an operation"):
        ip.run_line_magic("unity", "hail")
    with pytest.raises(UsageError, match="%unity wave takes only a name, got extra text 'now'"):
        ip.run_line_magic("unity", "wave op now")
    with pytest.raises(UsageError, match=r"unknown option --loud \(%unity hail --help lists its options\)"):
        ip.run_line_magic("unity", "hail --loud op hi")


def test_an_unregistered_verb_is_no_subcommand_any_more(stored_shell, capsys):
    ip = stored_shell
    register_verb(Verb("hail", entry=lambda m, _r: m or "", message="required", doc=HAIL_DOC))
    assert "%unity hail" in printed(ip, capsys, "help")
    unregister_verb("hail")
    assert "hail" not in HELP and "hail" not in subcommands()
    assert "%unity hail" not in printed(ip, capsys, "help")
    with pytest.raises(UsageError, match="unknown subcommand 'hail'"):
        ip.run_line_magic("unity", "hail op hi")
    with pytest.raises(UsageError, match="no subcommand 'hail' to help with"):
        ip.run_line_magic("unity", "help hail")


@pytest.mark.parametrize("name", BUILTIN_VERBS)
def test_a_builtin_verb_s_subcommand_follows_its_entry_in_the_table(monkeypatch, name):
    """Change a verb's doc and message in VERBS: its help and its parser follow (nothing hand-written)."""
    verb = VERBS[name]
    assert HELP[name].count(verb.doc) == 1 and _args.overview().count(verb.doc) == 1
    assert HELP[name].startswith(f"%unity {name} NAME")
    monkeypatch.setitem(VERBS, name, dataclasses.replace(verb, doc="A doc said once, here.", message="required"))
    assert "A doc said once, here." in HELP[name] and verb.doc not in HELP[name]
    with pytest.raises(UsageError, match=f"%unity {name} needs a"):
        parse(f"{name} op")
    monkeypatch.setitem(VERBS, name, dataclasses.replace(verb, message="none"))
    with pytest.raises(UsageError, match=f"%unity {name} takes only a name, got extra text 'why'"):
        parse(f"{name} op why")


def test_no_source_of_the_magics_repeats_a_verb_s_doc():
    jupyter = Path(_args.__file__).parent
    sources = {p.name: p.read_text(encoding="utf-8") for p in jupyter.glob("*.py")}
    for name in BUILTIN_VERBS:
        doc = VERBS[name].doc
        assert doc, name
        for file, text in sources.items():
            assert doc not in text, (name, file)
    # the fragments of the old hand-written entries are gone too: the doc's first words
    for file, text in sources.items():
        assert "Pause the operation NAME" not in text and "Send MESSAGE to the operation" not in text, file


def test_resume_extends_its_verb_without_restating_it():
    help_ = HELP["resume"]
    assert help_.count(VERBS["resume"].doc) == 1
    assert help_.startswith("%unity resume NAME [--budget DOLLARS]\n")
    assert "--budget DOLLARS: lifts the cap" in help_ and "continues from the store" in help_
    cmd = parse("resume spend --budget $10")
    assert (cmd.name, cmd.options) == ("spend", {"budget": 10.0})
    with pytest.raises(UsageError, match=r"option --budget takes dollars \(a number >= 0, e.g. 5.00\), not 'lots'"):
        parse("resume spend --budget lots")
    assert parse("ask op what now?").text == "what now?"
    with pytest.raises(UsageError, match="%unity ask needs a question"):
        parse("ask op")


# -- every declaration: its help lists exactly the options its parser takes -----------------------

SAMPLES = {
    _args.TEXT: "v", _args.WORD: "w", _args.WHOLE: "3", _args.POSITIVE: "2", _args.COUNT: "0", _args.TIMEOUT: "1.5",
    _args.SECONDS: "2.5", _args.APPROVAL: "first", _args.TOKENS: "100", _args.FRACTION: "0.5",
    _args.COLUMNS: "a,b:int", _args.DOLLARS: "5", _args.ROUTE: "batch", _args.BACKEND_KIND: "ray",
}
"""A valid value of each kind of option (a new kind without one fails the test below)."""


def declared() -> list[tuple[str, Subcommand]]:
    """``(line prefix, declaration)`` of every subcommand and action, the steering verbs of now among them."""
    out = []
    for sub in subcommands():
        spec = declaration(sub)
        if sub == "help":
            continue
        out += [(a.name, a) for a in spec.actions] or [(sub, spec)]
    return out


def minimal(prefix: str, spec: Subcommand, option: str = "") -> str:
    """A line the declaration accepts: ``option``, its arguments, its required options and its text."""
    words = [prefix, option] if option else [prefix]
    for arg in spec.args:
        words.append({"k": "3", "limit": "5"}.get(arg.key, "x"))
    words += [f"{o.flag} {SAMPLES[o.kind]}" for o in spec.options if o.required and o.flag not in option]
    if spec.text is not None:
        words.append("some text")
    return " ".join(words)


def help_options(text: str) -> set[str]:
    """The options a usage line (and its continuation lines) names."""
    first, *rest = text.splitlines()
    usage = [first, *(line for line in rest[: next((i for i, x in enumerate(rest) if not x.startswith(" " * 11)),
                                                     len(rest))])]
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", "\n".join(usage)))


@pytest.mark.parametrize("prefix, spec", declared(), ids=[p for p, _ in declared()])
def test_each_declared_option_is_listed_and_accepted_and_no_other(prefix, spec):
    sub = prefix.split()[0]
    flags = {o.flag for o in spec.options}
    own = re.search(rf"^%unity {re.escape(prefix)}\b.*?(?=^%unity |\Z)", HELP[sub], re.S | re.M)
    assert own is not None
    assert help_options(own[0]) == flags  # the usage line names exactly the declared options
    for o in spec.options:
        assert f"\n    {o.usage}: {o.doc.split()[0]}" in own[0]  # and each is described
    base = parse(minimal(prefix, spec), "")
    assert set(base.options) <= {o.key for o in spec.options} | {a.key for a in spec.args}
    for o in spec.options:
        value = True if o.kind is FLAG else o.kind.convert(SAMPLES[o.kind])
        given = o.flag if o.kind is FLAG else f"{o.flag} {SAMPLES[o.kind]}"
        assert parse(minimal(prefix, spec, given)).options[o.key] == value, o.flag
        with pytest.raises(UsageError) as info:
            parse(minimal(prefix, spec, given.replace(o.flag, o.flag + "z")))
        assert str(info.value).startswith(f"unknown option {o.flag}z: did you mean {o.flag}?"), str(info.value)
    with pytest.raises(UsageError, match=rf"^unknown option --zzz \(%unity {sub} --help lists its options\)$"):
        parse(minimal(prefix, spec, "--zzz 1"))


def test_the_declarations_give_the_names_other_modules_read():
    assert set(_args.operators()) == {"filter", "extract", "topk", "join", "agg"}
    assert not set(_args.operators()) & set(SUBCOMMANDS)  # derived from the registry, never declared by hand
    assert _args.TASK_ACTIONS == ("new", "run", "message", "show")
    assert set(_args.SETTINGS) == {"context_window", "compress_at", "keep_last", "max_parallel_tools"}
    assert not set(SUBCOMMANDS) & set(VERBS)  # a verb's subcommand is never declared by hand


async def test_a_verb_named_like_a_helper_of_the_magics_steers(stored_shell, monkeypatch):
    """``%unity live NAME``: a verb whose name is a method of the magics (``_live``) still steers."""
    ip = stored_shell

    async def live(self):
        self.run.steer("live")  # as the built-in verbs steer

    monkeypatch.setattr(LoopHandle, "live", live, raising=False)
    register_verb(Verb("live", entry=lambda _m, _r: "[kept alive]", doc="Keep the operation NAME alive."))
    try:
        gate = Gate(lambda m, t: "done")
        ip.user_ns["m"] = u.ScriptedModel(gate)
        ip.run_line_magic("unity", "model --var m")
        h = ip.run_line_magic("unity", "act --name job work")
        await h.wait_for("model_request", timeout=10)
        assert ip.run_line_magic("unity", "live job") is None
        await h.wait_for("steering", lambda e: e.action == "live", timeout=10)
        await asyncio.wait_for(asyncio.gather(*magics(ip).steering), 10)
        gate.event.set()
        assert await asyncio.wait_for(h.result(), 10) == "done"
    finally:
        unregister_verb("live")


def test_an_action_s_help_is_its_subcommand_s():
    for action in _args.TASK_ACTIONS:
        assert (parse(f"task {action} --help").sub, parse(f"task {action} -h").name) == ("help", "task")
    assert all(f"%unity task {action} " in HELP["task"] for action in _args.TASK_ACTIONS)
