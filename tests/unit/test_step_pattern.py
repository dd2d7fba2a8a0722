"""--step-pattern is matched with RE2 (issue 36, class 6): linear in a line's length whatever
the pattern, the same matches as Python's re for the patterns people write, and a pattern RE2
cannot take refused at input with exit 2. That SIGTERM ends dtrun during such a match is
tests/e2e/test_e2e_program.py's."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtrun.errors import UsageError
from dtrun.plan.steppattern import compile_step_pattern, searchable, step_matcher
from tests.conftest import run_dtrun


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        (r"step (\d+) again \1", "invalid escape sequence: \\1"),  # a backreference
        (r"step (?=\d)", "invalid perl operator: (?="),  # lookahead
        (r"(?<!x)step", "invalid perl operator: (?<"),  # lookbehind
        ("step (", "missing ): step ("),
    ],
    ids=["backreference", "lookahead", "lookbehind", "unclosed"],
)
def test_a_pattern_re2_cannot_take_is_exit_2_naming_why(tmp_path, pattern, said):
    done = run_dtrun("bench", "--step-pattern", pattern, "--dry-run", "--", "python", "x.py",
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert "is not a regular expression RE2 takes" in err and said in err, err
    assert "no backreferences, no lookaround" in err and "Traceback" not in err
    assert "re2.cc" not in done.stderr  # RE2's own log line is not printed beside dtrun's


def test_a_long_pattern_is_cut_in_the_message():
    with pytest.raises(UsageError) as caught:
        compile_step_pattern("(" * 5000)
    assert len(caught.value.what) < 300 and "(5,000 characters)" in caught.value.what


def test_nested_quantifiers_over_a_long_line_match_in_one_pass():
    # Python's re takes 2^n steps here (n the run of a's): past 30 it runs for minutes
    assert compile_step_pattern("(a+)+$").search("a" * 100_000 + "b") is None
    assert compile_step_pattern("(a|aa)+$").search("a" * 100_000) is not None


def test_an_undecodable_byte_in_a_line_does_not_stop_the_match():
    line = "step 3 took 12.5 ms \udcff"  # surrogateescape's stand-in for a byte 0xff
    assert step_matcher(r"took (?P<ms>[0-9.]+) ms")(line) == {"ms": "12.5"}
    assert searchable(line) == "step 3 took 12.5 ms ?"


PATTERNS = (
    r"step \d+ took (?P<ms>[0-9.]+) ms",
    r"^step \d+ took",
    r"(?P<seconds>\d+\.\d+)s/it",
    r"loss=[0-9.e+-]+ time=(?P<seconds>[0-9.]+)",
    r"\[rank0\].*iteration (\d+)",
)
# RE2's \d is ASCII's digits, where Python's re takes any script's (docs/your-training.md)
AROUND = st.text(st.characters(codec="utf-8", exclude_categories=["Nd"]) | st.sampled_from(
    "0123456789"), max_size=20)  # fmt: skip
LINES = st.builds(
    "{}{}{}".format,
    AROUND,
    st.sampled_from(
        ["step 12 took 3.5 ms", "0.25s/it", "loss=1e-3 time=0.75", "[rank0] iteration 7", ""]
    ),
    AROUND,
)


@settings(max_examples=300, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), line=LINES)
def test_re2_finds_what_pythons_re_finds_for_step_patterns(pattern, line):
    ours, theirs = compile_step_pattern(pattern).search(line), re.search(pattern, line)
    assert (ours is None) == (theirs is None)
    if ours is not None and theirs is not None:
        assert ours.groupdict() == theirs.groupdict() and ours.group(0) == theirs.group(0)


def test_a_tqdm_bar_s_states_match_once_each_and_its_closing_redraw_not_again():
    import io

    from dtrun.engines.common.scripts import line_text, segments

    # what tqdm writes for 3 steps: a "\r" before each state, the last drawn again as it closes
    bar = b"\r  0%|  | 0/3\r 33%|# | 1/3\r 67%|##| 2/3\r100%|##| 3/3\r100%|##| 3/3\n"
    lines = [line_text(part.decode()) for part in segments(io.BytesIO(bar))]
    match = step_matcher(r"(\d+)/3")
    steps = [found for found in map(match, lines) if found is not None]
    assert len(steps) == 4  # 0/3, 1/3, 2/3, 3/3: the closing 3/3 is no fifth step
    # the same line printed twice is two steps, as before
    again = step_matcher(r"step done")
    assert sum(again(line) is not None for line in ["step done", "step done"]) == 2
