"""`%unity model list` and the warning for a model name the server does not list (issue 39 item 3), over real
loopback HTTP: a server that ignores the name (llama.cpp's, and many others) answers any name with its own model,
so a typo would otherwise pass silently."""

from __future__ import annotations

import pytest
from fake_openai import FakeOpenAIServer
from IPython.core.error import UsageError


@pytest.fixture
def server():
    srv = FakeOpenAIServer().start_in_thread()
    srv.models = ["alpha-7b", "beta-13b"]
    yield srv
    srv.stop_thread()


def test_list_shows_the_models_the_server_lists(stored_shell, server, capsys):
    stored_shell.run_line_magic("unity", f"model list --base-url {server.base_url}")
    out = capsys.readouterr().out
    assert f"models at {server.base_url}" in out and "alpha-7b, beta-13b" in out
    assert "%unity model NAME --base-url" in out


def test_a_name_the_server_does_not_list_is_warned_of(stored_shell, server, capsys):
    stored_shell.run_line_magic("unity", f"model gamma --base-url {server.base_url}")
    out = capsys.readouterr().out
    assert "warning: the server at" in out and "lists no model named 'gamma'" in out
    assert "'alpha-7b', 'beta-13b'" in out and "%unity model list --base-url" in out
    assert "model: gamma" in out  # the model is set all the same: the server may serve names it does not list
    stored_shell.run_line_magic("unity", f"model alpha-7b --base-url {server.base_url}")
    assert "warning" not in capsys.readouterr().out


def test_a_server_that_lists_nothing_gets_no_warning(stored_shell, server, capsys):
    server.models = None  # GET /v1/models answers 404
    stored_shell.run_line_magic("unity", f"model gamma --base-url {server.base_url}")
    out = capsys.readouterr().out
    assert "warning" not in out and "model: gamma" in out
    with pytest.raises(UsageError, match=r"answered GET /models with HTTP 404"):
        stored_shell.run_line_magic("unity", f"model list --base-url {server.base_url}")


def test_list_asks_the_current_models_server_with_its_key(stored_shell, server, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-listing-39")
    stored_shell.run_line_magic("unity", f"model alpha-7b --base-url {server.base_url}")
    capsys.readouterr()
    stored_shell.run_line_magic("unity", "model list")
    assert "alpha-7b, beta-13b" in capsys.readouterr().out
    assert server.listings and all(h.get("authorization") == "Bearer sk-test-listing-39" for h in server.listings)
