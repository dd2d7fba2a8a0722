"""A secret a line break cuts, where an error quotes only a command's last lines (Slurm's and
Pulumi's): masked on both sides there, though the tail drops the line its start is on."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from dtrun import redact
from dtrun.engines.slurm.shell import SlurmShell
from dtrun.errors import DtrunError
from dtrun.redact import REDACTED, redact_text, remember_secrets

SECRET = "hunter2xQ"  # short: its parts are no WRAPPED_SHORTEST piece a line alone shows
SAID = "error: token hunt\ner2xQ rejected\n"


@dataclass(frozen=True)
class _Said(SlurmShell):
    """A Slurm command that fails, printing ``said`` on stderr."""

    said: str = ""

    def run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(command), 1, "", self.said)


def _shown(error: DtrunError) -> str:
    return redact_text(str(error))


def test_slurms_last_line_quoted_alone_masks_a_secret_the_break_before_it_cuts():
    remember_secrets([SECRET])
    with pytest.raises(DtrunError) as caught:
        _Said(said=SAID).check(["sinfo"], "list the nodes")
    assert f"said: {REDACTED} rejected" in _shown(caught.value), _shown(caught.value)
    assert "er2x" not in _shown(caught.value)


def test_slurms_refusal_joined_to_one_line_masks_a_secret_its_line_break_cut():
    from dtrun.engines.slurm.allocation import submit
    from dtrun.spec.slurmrequest import SlurmRequest

    remember_secrets([SECRET])
    with pytest.raises(DtrunError) as caught:
        submit(_Said(said=SAID), SlurmRequest(partition="gpu"), 2, "dtrun-x")
    assert f"token {REDACTED} {REDACTED} rejected" in _shown(caught.value), _shown(caught.value)
    assert "hunt" not in _shown(caught.value) and "er2x" not in _shown(caught.value)


def test_a_site_failure_line_masks_a_secret_the_break_before_it_cuts():
    from dtrun.engines.slurm.shell import site_failure

    remember_secrets([SECRET])
    down = site_failure("auth hunt\ner2xQ: Munge encode failed\n")
    assert down is not None
    assert "er2x" not in _shown(down), _shown(down)


def test_a_srun_log_s_last_line_masks_a_secret_the_break_before_it_cuts():
    from dtrun.engines.slurm.shell import last_said

    remember_secrets([SECRET])
    assert last_said(SAID) == f"{REDACTED} rejected"
    assert last_said("\n \n") == ""


def test_pulumis_tail_masks_a_secret_cut_where_the_tail_begins():
    """15 lines are quoted: the secret's start on the 16th last is dropped, its end masked."""
    from dtrun.azure.stack import _tail

    remember_secrets([SECRET])
    text = "step 1\npw: hu\nnter2xQ x\n" + "ok\n" * 14
    shown = redact_text(_tail(text))
    assert f"    {REDACTED} x" in shown.splitlines(), shown
    assert "nter" not in shown


def test_no_secret_no_change():
    assert redact._process.wrapped == ()
    from dtrun.engines.slurm.shell import last_said

    assert last_said("a\nb c\n") == "b c"


@pytest.mark.parametrize("blank", ["", "\n"])
def test_a_secret_cut_over_three_lines_where_an_upload_piece_ends_is_masked_on_each(
    monkeypatch, tmp_path, blank
):
    """A log over SCAN_LIMIT is redacted a piece at a time: at every piece end, a secret cut
    over three lines (a blank one between two parts too) shows none of its parts."""
    from dtrun.redact import Redactor
    from dtrun.store import base

    log = tmp_path / "node-0.log"
    log.write_text("".join(f"s{i}: hu\nnte\n{blank}r2xQ {i}\n" for i in range(12)))
    masked = "".join(f"s{i}: {REDACTED}\n{REDACTED}\n{blank}{REDACTED} {i}\n" for i in range(12))
    for limit in range(8, 40):  # pieces end at every line
        monkeypatch.setattr(base, "SCAN_LIMIT", limit)
        spill = tmp_path / f"spill-{limit}"
        spill.mkdir()
        body = base.redacted_body(log, Redactor.of([SECRET]), spill)
        assert isinstance(body, Path)
        assert body.read_text() == masked, limit


@pytest.mark.parametrize(
    "cut", [("pw: h", "unt", "er2x ok"), ("pw: h", "un", "te", "r2x ok")], ids=["3", "4"]
)
def test_a_secret_whose_first_line_ends_in_one_character_is_masked_on_its_middle_lines(
    monkeypatch, cut
):
    """The line ending in one character of a value is shown at once (HOLD_FROM); a next line
    that wholly goes on with it is held, so the line that ends the value masks it too."""
    import io

    from dtrun.cli import common
    from dtrun.cli.inert import inert_console_class

    monkeypatch.setattr(redact, "_process", redact.Redactor.of(["hunter2x"]))
    monkeypatch.setattr(common, "HOLD_S", 60.0)  # shown by the next line, not by the clock
    out = io.StringIO()
    show = inert_console_class()(file=out)
    for line in (*cut, "step 3"):
        common.print_node_line(show, "node-0", line)
    middle = [f"[node-0] {REDACTED}\n"] * (len(cut) - 2)
    expected = ["[node-0] pw: h\n", *middle, f"[node-0] {REDACTED} ok\n", "[node-0] step 3\n"]
    assert out.getvalue() == "".join(expected)
