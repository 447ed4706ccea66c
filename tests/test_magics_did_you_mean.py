"""A mistyped subcommand or option is a short UsageError with the nearest name, not pages of help (issue 28)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError


@pytest.mark.parametrize("line, says", [
    ("acct Find the slow queries", "unknown subcommand 'acct': did you mean 'act'?"),
    ("hisotry", "unknown subcommand 'hisotry': did you mean 'history'?"),
    ("act --max-step 3 Find the slow queries", "unknown option --max-step: did you mean --max-steps?"),
    ("act --max-step=3 Find the slow queries", "unknown option --max-step: did you mean --max-steps?"),
    ("act --managerz", "unknown option --managerz: did you mean --managers?"),
    ("map xs --concurency 5 Label it", "unknown option --concurency: did you mean --concurrency?"),
    ("model gpt-4.1 --bse-url http://localhost:1/v1", "unknown option --bse-url: did you mean --base-url?"),
])
def test_a_near_miss_names_what_was_meant_in_a_short_error(stored_shell, line, says):
    with pytest.raises(UsageError) as info:
        stored_shell.run_line_magic("unity", line)
    text = str(info.value)
    assert text.startswith(says)
    assert len(text) < 250 and "\n" not in text  # one line, not the help of every subcommand
    assert "%unity help" in text or "--help" in text  # where the full list is


def test_nothing_close_is_still_short_and_says_where_to_look(stored_shell):
    with pytest.raises(UsageError) as info:
        stored_shell.run_line_magic("unity", "act --zzz 1 x")
    assert str(info.value) == "unknown option --zzz (%unity act --help lists its options)"


def test_a_known_option_without_its_value_still_says_so(stored_shell):
    with pytest.raises(UsageError, match="option --max-steps needs a value"):
        stored_shell.run_line_magic("unity", "act --max-steps")
