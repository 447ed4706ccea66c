"""%unity resume NAME of a batch whose line the store keeps was changed by hand or damaged answered with an error about
a line the person never typed ('%unity map needs the items', 'option --concurrency needs a value'); it says the stored
line cannot be read again, which it is, and what to do."""

import pytest
from conftest import magics
from IPython.core.error import UsageError

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


@pytest.mark.parametrize(("kind", "task"), [("map", ""), ("map", "--concurrency"), ("filter", "items")])
def test_a_stored_line_that_cannot_be_read_again_is_said_so(ip, kind, task):
    store = magics(ip).store
    store.execute("INSERT INTO sessions (id, pid, host, started) VALUES ('gone', 0, 'elsewhere', 0)")
    store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, steps, lineage, kind, batch)"
                  " VALUES ('gone-1', 'gone', '1', 'labels', ?, 'running', 1, 0, '[]', ?, 1)", (task, kind))
    ip.user_ns["items"] = [1, 2]
    ip.user_ns["m"] = u.ScriptedModel(["x"])
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("unity", "resume labels")
    said = str(info.value)
    assert "as the store keeps it" in said and f"'%unity {kind} {task}'" in said
    assert "changed by hand or damaged" in said and "anew" in said
    assert "labels" not in magics(ip).handles
