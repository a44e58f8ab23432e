"""The step journal names the requests of the step a process died in, and blames none when it was killed
from outside."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid

from services.common.step_journal import StepJournal, journal_path, read_fatal_step


def _die_in_a_step(instance_id: str, ids: list[str], how: str) -> int:
    """A real process that journals a step and dies in it: `how` is `abort` (a crash) or `kill` (from outside)."""
    code = (f"import os, signal; from services.common.step_journal import StepJournal; "
            f"j = StepJournal({instance_id!r}, 'inc1'); j.begin({ids!r}); "
            + ("os.abort()" if how == "abort" else "os.kill(os.getpid(), signal.SIGKILL)"))
    return subprocess.run([sys.executable, "-c", code]).returncode


def test_a_crash_in_a_step_blames_the_requests_of_that_step() -> None:
    instance_id = f"prefill-test-{uuid.uuid4().hex[:6]}"
    code = _die_in_a_step(instance_id, ["r1", "r2"], "abort")
    assert code == -signal.SIGABRT
    assert read_fatal_step(instance_id, code) == ("inc1", ["r1", "r2"])
    assert not journal_path(instance_id).exists()  # read once: a restarted process starts its own


def test_a_kill_from_outside_blames_no_request() -> None:
    instance_id = f"prefill-test-{uuid.uuid4().hex[:6]}"
    code = _die_in_a_step(instance_id, ["r1"], "kill")
    assert read_fatal_step(instance_id, code) == ("inc1", [])


def test_a_step_that_returned_is_cleared_and_a_stopped_journal_is_gone() -> None:
    instance_id = f"decode-test-{uuid.uuid4().hex[:6]}"
    journal = StepJournal(instance_id, "inc2")
    journal.begin(["a", "b", "c"])
    journal.clear()
    journal.begin(["d"])
    assert journal_path(instance_id).read_text() == "inc2\nd"
    journal.clear()
    assert read_fatal_step(instance_id, -signal.SIGSEGV) == ("inc2", [])
    journal.close()
    assert read_fatal_step(instance_id, -signal.SIGSEGV) is None
