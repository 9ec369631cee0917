"""A workflow script's log file: its records and an uncaught traceback (d2lrepro.core.logs)."""

import logging
import subprocess
import sys

from d2lrepro.core import logs

SCRIPT = """
import logging, sys
from d2lrepro.core import logs

log = logs.setup(sys.argv[1])
log.info("step %d of %d", 1, 2)
logging.getLogger("d2lrepro.core.data").debug("below INFO: not written")
logging.getLogger("d2lrepro.core.data").warning("a child logger's warning")
raise ValueError("the job broke")
"""


def test_a_script_s_records_and_its_uncaught_traceback_go_to_its_log(tmp_path):
    path = tmp_path / "job.log"
    path.write_text("the previous run's log\n")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1  # logged, and still raised
    assert "ValueError: the job broke" in done.stderr
    text = path.read_text()
    assert "the previous run's log" not in text  # each run writes its log anew
    assert "INFO d2lrepro: step 1 of 2" in text
    assert "WARNING d2lrepro.core.data: a child logger's warning" in text
    assert "below INFO" not in text
    assert "ERROR d2lrepro: failed" in text
    assert "Traceback (most recent call last)" in text
    assert text.rstrip().endswith("ValueError: the job broke")


def test_a_script_that_ends_well_logs_no_failure(tmp_path):
    path = tmp_path / "job.log"
    code = "import sys; from d2lrepro.core import logs; logs.setup(sys.argv[1]).info('done')"
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    text = path.read_text()
    assert "INFO d2lrepro: done" in text and "failed" not in text


def test_progress_logs_what_a_step_took_and_starts_the_next(caplog, monkeypatch):
    caplog.set_level("INFO", logger="d2lrepro.test")
    monkeypatch.setattr(logs.time, "perf_counter", lambda: 12.5)
    assert logs.progress(logging.getLogger("d2lrepro.test"), "the sweep", 10.0) == 12.5
    assert caplog.messages == ["the sweep in 2.5 s"]
