"""Every %unity form receives exactly what the person typed: IPython expands no `{name}` or `$name` in it
(issue 28), with variables of those names defined in the notebook."""

from __future__ import annotations

import asyncio
import textwrap

import pandas as pd
from _kernel import Kernel

import unity_nb as u

TYPED = "Label {title}: {abstract} ($title, $$abstract)"


def recording(ip) -> list[str]:
    """A model that answers 'ok' and keeps each row's prompt; the notebook's own title and abstract defined."""
    seen: list[str] = []

    def script(messages, tools):
        seen.append(messages[-1]["content"])
        return "ok"

    ip.user_ns.update(
        m=u.ScriptedModel(script), title="MY REPORT TITLE", abstract="unrelated",
        papers=pd.DataFrame({"title": ["Deep nets"], "abstract": ["We train."]}),
    )
    ip.run_line_magic("unity", "model --var m")
    return seen


async def test_a_line_magic_receives_the_template_as_typed(stored_shell):
    ip = stored_shell
    seen = recording(ip)
    ip.run_cell(f"h = %unity map papers --name typed {TYPED}").raise_error()
    h = ip.user_ns["h"]
    assert (await asyncio.wait_for(h.result(), 10)).tolist() == ["ok"]
    assert "Label Deep nets: We train. ($title, $$abstract)" in seen[0]
    assert "MY REPORT TITLE" not in seen[0] and "unrelated" not in seen[0]


async def test_a_cell_magic_line_and_body_are_received_as_typed(stored_shell):
    ip = stored_shell
    seen = recording(ip)
    ip.run_cell(f"%%unity map papers --name cell {TYPED}\nand $title again").raise_error()
    magics = ip.magics_manager.registry["UnityMagics"]
    assert (await asyncio.wait_for(magics.handles["cell"].result(), 10)).tolist() == ["ok"]
    assert "Label Deep nets: We train. ($title, $$abstract)\nand $title again" in seen[0]


async def test_an_act_task_is_received_as_typed(stored_shell):
    ip = stored_shell
    recording(ip)
    ip.run_cell("h = %unity act --name said Say {title} and $abstract").raise_error()
    h = ip.user_ns["h"]
    await asyncio.wait_for(h.result(), 10)
    assert h.task == "Say {title} and $abstract"


def test_in_a_real_kernel_the_template_reaches_the_rows_unexpanded():
    k = Kernel()
    try:
        k.run(textwrap.dedent(f"""
            %load_ext unity_nb
            import pandas as pd, unity_nb as u
            seen = []
            m = u.ScriptedModel(lambda messages, tools: (seen.append(messages[-1]["content"]), "ok")[1])
            %unity model --var m
            title, abstract = "MY REPORT TITLE", "unrelated"
            papers = pd.DataFrame({{"title": ["Deep nets"], "abstract": ["We train."]}})
            h = %unity map papers --name typed {TYPED}
            answers = (await h).tolist()
        """))
        assert k.value("answers") == ["ok"]
        assert "Label Deep nets: We train. ($title, $$abstract)" in k.value("seen[0]")
    finally:
        k.close()
