"""Under nbval, notebooks record to a throwaway store, not to notebooks/.unity_nb/."""

import os
import tempfile

os.environ.setdefault("UNITY_NB_STORE", os.path.join(tempfile.mkdtemp(prefix="unity_nb_notebooks_"), "state.db"))
