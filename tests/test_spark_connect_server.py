import subprocess
import sys

from airflow_provider_wm.spark_connect_server import terminate_group


def start_group(code: str) -> subprocess.Popen[bytes]:
    """A process group led by a child of ours running ``code``; it has started once it prints a line."""
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    return process


def test_a_group_whose_leader_exits_on_sigterm_is_terminated_without_waiting_for_the_kill():
    # The leader is our child: once it exits it stays a zombie member of its group until reaped.
    process = start_group("import time; print('ready', flush=True); time.sleep(600)")
    assert terminate_group(process.pid, timeout=60) == "terminated"
    process.wait(timeout=5)


def test_a_group_that_ignores_sigterm_is_killed_after_the_timeout():
    ignore = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)"
    process = start_group(f"{ignore}; import time; print('ready', flush=True); time.sleep(600)")
    assert terminate_group(process.pid, timeout=0.5) == "killed"
    assert process.wait(timeout=5) == -9


def test_a_group_that_does_not_exist_is_absent():
    process = start_group("print('ready', flush=True)")
    process.wait(timeout=5)
    assert terminate_group(process.pid, timeout=1) == "absent"
