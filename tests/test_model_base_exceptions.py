"""A model whose ``complete()`` raises what is not an ``Exception`` (``SystemExit``, ``KeyboardInterrupt``), or
code the run calls (an evaluation) that does: the run fails, ``result()`` raising an error that says what was
raised; the event loop goes on. A signal's (a Ctrl-C while the model's code runs) still ends the program.

Each loop runs on an event loop of its own on the main thread (``conftest.on_own_event_loop``): what escapes
its event loop fails the test, not the whole session."""

import signal

import pytest
from conftest import on_own_event_loop

import unity_nb as u


def _failed(**options):
    """A loop started with ``options``, run on an event loop of its own: ``((handle, the error result() raised),
    None)``, or ``(None, what escaped the event loop)``."""

    async def main():
        h = u.start_loop("go", bus=u.EventBus(), **options)
        with pytest.raises(u.UnityError) as info:
            await h.result()
        return h, info.value

    return on_own_event_loop(main)


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt("quota")], ids=["SystemExit", "KeyboardInterrupt"])
def test_a_model_raising_a_base_exception_fails_the_run_saying_so(python_sigint, raised):
    def script(messages, tools):
        raise raised

    ran, escaped = _failed(model=u.ScriptedModel(script))
    assert escaped is None, f"{escaped!r} escaped the event loop"
    h, err = ran
    name = type(raised).__name__
    assert str(err).startswith(f"the model 'scripted' raised {name}({raised}) in complete(): a model cannot end")
    assert err.__cause__ is raised
    assert h.status == "failed"
    assert h.events[-1].kind == "loop_failed" and name in h.events[-1].error
    assert h.transcript[-1].kind == "error"


def test_an_evaluation_raising_system_exit_fails_the_run_saying_so():
    def strict(answer: str) -> bool:
        raise SystemExit("bad answer")

    ran, escaped = _failed(model=u.ScriptedModel(lambda m, t: "an answer"), evaluations=[strict])
    assert escaped is None, f"{escaped!r} escaped the event loop"
    h, err = ran
    assert str(err).startswith("SystemExit(bad answer) was raised in the run")
    assert h.status == "failed"


def test_a_ctrl_c_while_the_models_code_runs_still_ends_the_program(python_sigint):
    def script(messages, tools):
        signal.raise_signal(signal.SIGINT)  # the person's Ctrl-C, arriving while the model's code runs
        return "an answer"

    async def main():
        h = u.start_loop("go", model=u.ScriptedModel(script), bus=u.EventBus())
        return await h.result()

    ran, escaped = on_own_event_loop(main)
    assert ran is None and isinstance(escaped, KeyboardInterrupt)
