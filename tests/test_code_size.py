"""The size backstop: no file in tuner/ over 600 lines, no function over 120. Below that,
length is a report (`make lint` prints `tuner_testing.code_size`: files over 400 lines and
functions over 80, to read for meaning), never a failure (House IV: the 400/80 rule as a gate
made commits split "to stay within 400 lines")."""

from __future__ import annotations

from tuner_testing.code_size import long_files, long_functions, sources

BACKSTOP_FILE_LINES = 600
BACKSTOP_FUNCTION_LINES = 120


def test_the_rule_sees_the_package() -> None:
    assert len(sources()) > 50  # a wrong root would check nothing and pass


def test_no_file_over_the_backstop() -> None:
    long = long_files(BACKSTOP_FILE_LINES)
    assert not long, f"files over {BACKSTOP_FILE_LINES} lines: {long}"


def test_no_function_over_the_backstop() -> None:
    long = long_functions(BACKSTOP_FUNCTION_LINES)
    assert not long, f"functions over {BACKSTOP_FUNCTION_LINES} lines: {long}"
