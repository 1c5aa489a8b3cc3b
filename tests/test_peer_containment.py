"""A program under test is contained: whatever it does, no wait is unbounded and nothing it
started outlives the checker.

Each peer here misbehaves in one way (closes stdout and keeps running, forks a child and exits,
never answers, never reads stdin, answers one endless line); after each case the peer's process
group must be gone (``os.killpg(pgid, 0)`` raises ProcessLookupError). Every bound below is a
safety net for a hang, not a timing claim: a case passes or fails on what it observes (an error
raised, a group gone), and the net is generous (10x the expected time) so a loaded machine
cannot fail it.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.processes import group_gone, sigint_default
from verispec.spec.external import CommandTransport, ExternalError, TimeoutSetting, check_timeout, kill_all_peers

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
HANG_NET = 30.0  # seconds: far above every bounded wait below (a case hitting it is a hang)


def request(n: int = 0, payload: int = 0) -> dict[str, object]:
    return {"id": f"t#{n}", "op": "sampled", "input": {"pad": "x" * payload}}


def started(transport: CommandTransport) -> int:
    """The peer's process group id (its shell's pid: start_new_session makes it the leader)."""
    assert transport._proc is not None
    return transport._proc.pid


def test_a_peer_that_closes_stdout_and_keeps_running_fails_at_once_and_dies() -> None:
    transport = CommandTransport("exec >&-; sleep 60", timeout=HANG_NET)
    transport._start()
    pgid = started(transport)
    began = time.monotonic()
    with pytest.raises(ExternalError, match="closed its stdout"):
        transport.exchange([request()])
    assert time.monotonic() - began < HANG_NET  # EOF is seen at once, not after the timeout
    transport.close()
    assert group_gone(pgid)


def test_a_child_forked_by_a_peer_that_exits_is_killed_with_it() -> None:
    transport = CommandTransport("(sleep 60 </dev/null >/dev/null 2>&1 &); exit 0", timeout=HANG_NET)
    transport._start()
    pgid = started(transport)
    with pytest.raises(ExternalError, match="exited"):
        transport.exchange([request()])
    transport.close()
    assert group_gone(pgid)


def test_a_child_kept_after_a_passing_exchange_is_killed_on_close() -> None:
    answer = 'read line; echo \'{"id": "t#0", "unsupported": "sampled"}\''
    transport = CommandTransport(f"sleep 60 </dev/null >/dev/null 2>&1 & {answer}; sleep 60", timeout=HANG_NET)
    (response,) = transport.exchange([request()])
    assert response == {"id": "t#0", "unsupported": "sampled"}
    pgid = started(transport)
    transport.close()
    assert group_gone(pgid)


def test_a_peer_that_never_answers_times_out_once_and_is_not_restarted() -> None:
    transport = CommandTransport("cat >/dev/null", timeout=0.5)
    transport._start()
    pgid = started(transport)
    with pytest.raises(ExternalError, match="no response"):
        transport.exchange([request()])
    assert group_gone(pgid)
    began = time.monotonic()
    for n in range(1, 20):  # later cases fail at once: a dead peer costs one timeout per run
        with pytest.raises(ExternalError, match="not restarted after it timed out"):
            transport.exchange([request(n)])
    assert transport.restarts == 0 and transport._proc is None or transport._proc.poll() is not None
    assert time.monotonic() - began < 19 * 0.5  # fewer than the 19 timeouts a restart per case would cost
    transport.close()


def test_close_does_not_deadlock_on_a_peer_that_never_reads_stdin() -> None:
    transport = CommandTransport("sleep 60", timeout=HANG_NET)
    big = [request(n, payload=1 << 16) for n in range(64)]  # 4 MiB: far past a pipe's buffer
    failure: list[BaseException] = []

    def run() -> None:
        try:
            transport.exchange(big)
        except ExternalError as exc:
            failure.append(exc)

    exchanging = threading.Thread(target=run, daemon=True)
    exchanging.start()
    while transport._writer is None or not transport._writer.is_alive():
        time.sleep(0.01)
    pgid = started(transport)
    closing = threading.Thread(target=transport.close, daemon=True)  # what Ctrl-C's finally runs
    closing.start()
    closing.join(HANG_NET)
    assert not closing.is_alive(), "close() deadlocked against the writer thread"
    exchanging.join(HANG_NET)
    assert not exchanging.is_alive() and failure, "the exchange must end with an error once the peer is gone"
    assert group_gone(pgid)


def test_an_endless_line_is_cut_and_not_echoed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    import verispec.spec.external.transport as external

    monkeypatch.setattr(external, "MAX_LINE_BYTES", 1 << 20)
    transport = CommandTransport("head -c 50000000 /dev/zero | tr '\\0' 'x'; sleep 60", timeout=HANG_NET)
    transport._start()
    pgid = started(transport)
    with pytest.raises(ExternalError) as caught:
        transport.exchange([request()])
    assert "longer than" in str(caught.value) and len(str(caught.value)) < 1000
    transport.close()
    assert group_gone(pgid)


def test_a_huge_id_is_truncated_in_the_message() -> None:
    script = (
        "read line; printf '{\"id\": \"%s\", \"output\": {}}\\n' $(head -c 2000000 /dev/zero | tr '\\0' 'y'); sleep 60"
    )
    transport = CommandTransport(script, timeout=HANG_NET)
    with pytest.raises(ExternalError, match="out of order") as caught:
        transport.exchange([request()])
    assert len(str(caught.value)) < 1000
    transport.close()


def test_kill_all_peers_kills_every_running_group() -> None:
    transports = [CommandTransport("sleep 60", timeout=HANG_NET) for _ in range(3)]
    pgids = []
    for transport in transports:
        transport._start()
        pgids.append(started(transport))
    kill_all_peers()
    assert all(group_gone(pgid) for pgid in pgids)
    for transport in transports:
        transport.close()


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, 1e300, -1.0, 0.0, True, "5", None])
def test_a_timeout_that_is_not_finite_and_positive_is_a_usage_error(bad: object) -> None:
    with pytest.raises(TimeoutSetting):
        check_timeout(bad)
    with pytest.raises(TimeoutSetting):
        CommandTransport("true", timeout=bad)  # type: ignore[arg-type]


def test_a_finite_positive_timeout_is_kept() -> None:
    assert check_timeout(2) == 2.0 and check_timeout(0.25) == 0.25


@pytest.mark.parametrize("timeout", ["inf", "nan", "1e300", "-1"])
def test_the_check_command_refuses_a_bad_timeout_with_exit_2(timeout: str) -> None:
    result = subprocess.run(
        [PY, "-m", "verispec", "check", "--verifier-cmd", "true", "--timeout", timeout, "--count", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "timeout" in result.stderr


SIGNALS = pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])


def start_waiting_checker(pidfile: Path) -> tuple[subprocess.Popen[str], int]:
    """A checker waiting on a peer's first answer, and the peer's group id.

    The peer reads the first request, then records its group, forks a child that ignores stdin
    and never answers: once the group id is there the checker has started and recorded the peer
    and sent it a request (a readiness signal, not a guess at how long a loaded machine takes).
    The checker's --timeout (120 s) is past HANG_NET, so a signal it fails to act on is a hang.
    Its SIGINT is the default a terminal's Ctrl-C meets, not whatever this test run inherited
    (a background ``make test`` has SIGINT ignored: the checker would rightly ignore it too)."""
    peer = f"read line; echo $$ > {pidfile}; sleep 60 </dev/null >/dev/null 2>&1 & exec sleep 60"
    checker = subprocess.Popen(
        [PY, "-m", "verispec", "check", "--verifier-cmd", peer, "--timeout", "120", "--count", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    deadline = time.monotonic() + 120
    while not (pidfile.exists() and pidfile.read_text().endswith("\n")):
        if checker.poll() is not None or time.monotonic() > deadline:
            checker.kill()
            raise AssertionError(f"the peer never started: {checker.communicate()}")
        time.sleep(0.05)
    return checker, int(pidfile.read_text())


def stopped_by(checker: subprocess.Popen[str], send: Callable[[], None]) -> str:
    """``send()`` a signal, then the checker's stderr once it has exited (a hang fails at HANG_NET)."""
    try:
        send()
        _, err = checker.communicate(timeout=HANG_NET)
    finally:
        if checker.poll() is None:
            checker.kill()
            checker.communicate()
    return err


@SIGNALS
def test_a_signal_to_the_checker_kills_the_peer_and_its_children(tmp_path: Path, signum: int, status: int) -> None:
    checker, pgid = start_waiting_checker(tmp_path / "pgid")
    err = stopped_by(checker, lambda: checker.send_signal(signum))
    assert checker.returncode == status, err
    assert "Traceback" not in err
    assert group_gone(pgid)


def first_helper_thread(pid: int) -> int:
    """The id of the earliest-started thread of ``pid`` other than its main thread (Linux /proc):
    a long-lived one (a thread pool's, or the reader of the peer's stdout), not the writer that
    may be exiting."""

    def started_at(tid: int) -> tuple[int, int]:
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2 :].split()[19]), tid  # field 22, starttime

    helpers = [int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid]
    assert helpers, "the checker waits on a peer with reader threads"
    return min(helpers, key=started_at)


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="threads of another process are named in Linux's /proc"
)
@SIGNALS
def test_a_signal_taken_by_a_helper_thread_still_stops_the_checker_at_once(
    tmp_path: Path, signum: int, status: int
) -> None:
    """The kernel may hand a signal sent to the checker to any of its threads (always so while
    the main thread creates one). kill() of a thread id sends the process its signal with that
    thread first in line, so here a helper thread takes it and the main thread, asleep in its
    wait for the peer's answer, is not woken by it: it must still act on it within a slice of its
    wait (spec/signals.py), not when the 120 s --timeout ends."""
    checker, pgid = start_waiting_checker(tmp_path / "pgid")
    err = stopped_by(checker, lambda: os.kill(first_helper_thread(checker.pid), signum))
    assert checker.returncode == status, err
    assert "Traceback" not in err
    assert group_gone(pgid)


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signal handlers run in the main thread"
)
def test_a_ctrl_c_while_a_peer_starts_is_acted_on_once_the_peer_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that lands between the fork of a peer and its registration must not leave the
    peer unknown to kill_all_peers (the checker's exit path): it is raised after the registration."""
    import verispec.spec.external.transport as external

    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_ctrl_c(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(proc)
        signal.raise_signal(signal.SIGINT)  # Ctrl-C right after the fork
        return proc

    monkeypatch.setattr(external.subprocess, "Popen", popen_then_ctrl_c)
    transport = CommandTransport("sleep 60", timeout=HANG_NET)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive run has it
    try:
        with pytest.raises(KeyboardInterrupt):
            transport._start()
        kill_all_peers()  # what the CLI's KeyboardInterrupt handler runs
        assert started and group_gone(started[0].pid)
    finally:
        signal.signal(signal.SIGINT, previous)
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
