"""What a kernel keeps of operations a person moved on from (not a test): in a real kernel (jupyter_client), one cell
run again ``--runs`` times, each run starting an operation whose plan prints 100,000 characters, awaiting it and
displaying its handle, sent as JupyterLab sends it (the cell's id in ``cellId``). Then, counted in the kernel after a
collection: the operations (``LoopHandle``) still in memory, the widgets still open, and the kernel's RSS growth
over the runs after the first. ``--cell`` picks what the cell does: ``display`` (``u.act(...)`` then
``display(h)``), ``magic`` (``h = %unity act ...``).

Run: .venv/bin/python bench/bench_kernel_widgets.py [--runs 20] [--cell display|magic]
Before and after: PYTHONPATH=<an older checkout> .venv/bin/python bench/bench_kernel_widgets.py (the kernel
inherits PYTHONPATH; the first line names the unity_nb it imported).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _kernel import running

SETUP = textwrap.dedent("""
    %load_ext unity_nb
    import gc, os, psutil, unity_nb as u  # psutil: a dependency of ipykernel
    from unity_nb.jupyter._widget import HandleWidget
    def plan(messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            return u.call_tool("execute_code", code="print('x' * 100_000)", intent="print a lot")
        return "done"
    scripted = u.ScriptedModel(plan)
    %unity model --var scripted
    def live():
        gc.collect()
        objs = gc.get_objects()
        return [sum(isinstance(o, u.LoopHandle) for o in objs),
                sum(isinstance(o, HandleWidget) and o.comm is not None for o in objs),
                psutil.Process(os.getpid()).memory_info().rss / 2**20]
""")
CELLS = {
    "display": "h = u.act('print a lot', model=scripted)\n_ = await h\ndisplay(h)",
    "magic": "h = %unity act print a lot\n_ = await h",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--cell", choices=tuple(CELLS), default="display")
    args = ap.parse_args()
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else None
    with running(SETUP, env=env) as k:
        print("unity_nb from", k.value("u.__file__"))
        k.run("%config UnityMagics.approval = 'never'")
        code = CELLS[args.cell]
        k.run_cell(code, cell="the-cell")
        first = k.value("live()")
        for _ in range(args.runs):
            k.run_cell(code, cell="the-cell")
        handles, widgets, rss = k.value("live()")
        print(f"| cell {args.cell!r}, run {args.runs + 1} times | operations in memory | open widgets | RSS growth |")
        print("| --- | --- | --- | --- |")
        print(f"| after the first run | {first[0]} | {first[1]} | |")
        print(f"| after the last | {handles} | {widgets} | {rss - first[2]:+.1f} MiB |")


if __name__ == "__main__":
    main()
