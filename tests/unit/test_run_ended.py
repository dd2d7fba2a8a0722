"""run.json of a `dtrun run` that ended without recording how (docs/launchers.md): its guard
rewrites "running" to "unrecorded", and nothing else. The SIGKILL itself:
tests/e2e/test_failure.py."""

from __future__ import annotations

import json

from dtrun.check.stopped import unrecorded_record
from dtrun.execute.guard import drop_guard, start_guard
from dtrun.record.ended import UNRECORDED_RUN, guard_command, mark_unrecorded, settle


def _record(tmp_path, status):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema": "dtrun.run/1", "status": status, "error": None}))
    return path


def test_a_run_json_still_running_is_marked_unrecorded_with_why(tmp_path):
    path = _record(tmp_path, "running")
    assert mark_unrecorded(path)
    data = json.loads(path.read_text())
    assert (data["schema"], data["status"], data["error"]) == (
        "dtrun.run/1", "unrecorded", UNRECORDED_RUN,
    )  # fmt: skip
    assert "SIGKILL" in data["error"] and data["updated_at"]
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left


def test_a_run_json_that_recorded_its_end_is_left_as_it_is(tmp_path):
    for status in ("ok", "failed", "timeout", "interrupted"):
        path = _record(tmp_path, status)
        before = path.read_bytes()
        assert not mark_unrecorded(path)
        assert path.read_bytes() == before


def test_a_link_at_run_json_is_not_written_through(tmp_path):
    target = _record(tmp_path, "running").rename(tmp_path / "elsewhere.json")
    before = target.read_bytes()
    (tmp_path / "run.json").symlink_to(target)
    assert not mark_unrecorded(tmp_path / "run.json")
    assert target.read_bytes() == before and (tmp_path / "run.json").is_symlink()


def test_the_guard_marks_run_json_when_its_pipe_closes_and_not_when_dropped(tmp_path):
    """dtrun's end, however it ends, closes the guard's pipe: the guard's own interpreter
    (-I -S, no PYTHONPATH) finds the package and rewrites the record."""
    path = _record(tmp_path, "running")
    dropped = start_guard(guard_command(path))
    drop_guard(dropped)  # dtrun recorded the end itself
    assert json.loads(path.read_text())["status"] == "running"
    guard = start_guard(guard_command(path))
    assert guard.stdin is not None
    guard.stdin.close()  # as when dtrun's process is gone
    assert guard.wait(timeout=60) == 0
    assert json.loads(path.read_text())["status"] == "unrecorded"


def test_a_killed_check_s_guard_writes_check_json_only_where_none_is(tmp_path):
    path = tmp_path / "check.json"
    missing = json.dumps(unrecorded_record())
    assert settle(str(path), missing)
    data = json.loads(path.read_text())
    assert (data["schema"], data["status"]) == ("dtrun.check-report/1", "unrecorded")
    assert "nodes" not in data and "SIGKILL" in data["error"]
    path.write_text('{"status": "interrupted"}')  # dtrun recorded the stop itself
    assert not settle(str(path), missing)
    assert json.loads(path.read_text()) == {"status": "interrupted"}
