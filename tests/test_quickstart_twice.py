"""Run All on the quickstart twice within a minute works (issue 28): the second run's last cell failed with
"tour is still running: stop it first", the first tour still going."""

from __future__ import annotations

import json
from pathlib import Path

from _kernel import Kernel

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "01_quickstart.ipynb"


def test_run_all_twice_in_one_kernel_within_the_minute():
    cells = [
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"
    ]
    k = Kernel()
    try:
        for code in cells:
            k.run(code)
        first = k.value("tour.id")
        assert k.value("tour.done()") is False  # the tour runs for about a minute
        for code in cells:  # Run All again at once
            k.run(code)
        assert k.value("tour.id") != first and k.value("tour.done()") is False
        assert k.value("get_ipython().magics_manager.registry['UnityMagics'].handles['tour'].id") == k.value("tour.id")
        k.run("await tour.stop('test over')")
    finally:
        k.close()
