"""Under nbval, notebooks record to a throwaway store, not to notebooks/.unity_nb/."""

import os
import tempfile

os.environ.setdefault("UNITY_NB_STORE", os.path.join(tempfile.mkdtemp(prefix="unity_nb_notebooks_"), "state.db"))


def pytest_collection_modifyitems(items):
    """Every notebook cell runs in a real kernel (nbval): marked ``kernel`` (registered in pyproject.toml)."""
    import pytest

    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:  # the hook sees every item of the session: only the notebooks'
        if str(item.fspath).startswith(here + os.sep):
            item.add_marker(pytest.mark.kernel)
