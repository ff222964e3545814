"""What went wrong in a job: each rank's failure, and their order from cause to consequence.

A rank fails in one of two ways: its Python code raised (the rank records type, message and
traceback before it exits), or its process ended without a record (a signal such as SIGKILL
from the kernel's out-of-memory killer or a user, or a nonzero exit code from native code);
a rank that native code killed leaves the Python stack of each of its threads instead
(`record_native_crashes`).
When one rank goes, its peers fail next: gloo reports "Connection reset by peer" or "Read
error", NCCL a watchdog timeout. Those are consequences. `cause_order` sorts failures so the
root cause comes first:

1. ranks that died without a Python error (nothing else can have caused their death);
2. Python errors that are not a lost peer (`is_peer_loss`), earliest first;
3. lost-peer errors, earliest first.
"""

from __future__ import annotations

import faulthandler
import re
import signal
from dataclasses import dataclass
from pathlib import Path

PEER_LOSS_PATTERNS = (
    "connection reset by peer",
    "connection closed by peer",
    "read error",
    "broken pipe",
    "timed out",
    "timeout",
    "socket closed",
    "communicator was aborted",
    "nccl error",
    "unhandled system error",
)
"""Lower-case fragments of the errors a rank raises when a peer is gone or silent (gloo's
transport errors, store and collective timeouts, NCCL's aborted communicators)."""

CONTEXT_CHARS = 200
"""Longest message shown on a context line (gloo's messages run to several hundred)."""

OOM_ERROR_TYPES = frozenset({"OutOfMemoryError"})
"""Exception names of an accelerator running out of memory (``torch.OutOfMemoryError``)."""

_OOM_FIELDS = {
    "tried_to_allocate": r"Tried to allocate ([\d.]+ [KMGT]?i?B)",
    "total": r"total capacity of ([\d.]+ [KMGT]?i?B)",
    "in_use": r"([\d.]+ [KMGT]?i?B) memory in use",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class RankFailure:
    """One rank's failure, as it recorded it or as the parent saw its process end."""

    rank: int
    """Global rank that failed."""
    error_type: str
    """Exception class name, e.g. ``ValueError``; ``ProcessDied`` without a Python error."""
    message: str
    """The exception message, or how the process ended."""
    traceback: str
    """Formatted traceback in the rank; empty when the process died without one."""
    time_s: float
    """Wall-clock time (``time.time()``) at which the failure was recorded or seen."""
    signal: str | None = None
    """Name of the signal that ended the process (``SIGKILL``), None otherwise."""


class LaunchError(RuntimeError):
    """A job whose ranks did not all finish.

    ``failures`` are in `cause_order`, ``original`` is the root cause, ``stopped`` the
    ranks the launcher ended because a peer had failed. ``str()`` is `headline`.
    """

    def __init__(self, failures: tuple[RankFailure, ...], stopped: tuple[int, ...] = ()) -> None:
        self.failures = tuple(sorted(failures, key=cause_order))
        self.original = self.failures[0]
        self.stopped = tuple(sorted(stopped))
        super().__init__(self.headline())

    def headline(self) -> str:
        """One line naming the failed rank and its cause (`describe`)."""
        return describe(self.original)

    def context(self) -> list[str]:
        """One line per other failed or stopped rank, in cause order."""
        lines = []
        for f in self.failures[1:]:
            tag = " (a consequence: the peer was lost)" if is_peer_loss(f) else ""
            text = first_line(f.message)
            if len(text) > CONTEXT_CHARS:
                text = text[: CONTEXT_CHARS - 3] + "..."
            lines.append(f"then rank {f.rank}: {f.error_type}: {text}{tag}")
        lines += [f"then rank {r}: stopped by the launcher" for r in self.stopped]
        return lines

    def full_report(self) -> str:
        """Headline, context and every recorded traceback: the text of a failure log."""
        parts = [self.headline(), *self.context(), ""]
        for f in self.failures:
            parts.append(f"---- rank {f.rank}: {f.error_type}")
            parts.append(f.traceback.rstrip() or f.message)
            parts.append("")
        return "\n".join(parts)


class LaunchInterrupted(KeyboardInterrupt):
    """The launching process was asked to stop while its ranks ran: SIGINT (Ctrl-C) or
    SIGTERM (a batch scheduler's cancel). By the time it is raised the launcher has stopped
    every rank. A `KeyboardInterrupt`, so code that handles Ctrl-C handles both signals.
    ``exit_code`` is the shell's convention for a process ended by the signal (128 + its
    number: 130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signal_name: str) -> None:
        self.signal_name = signal_name
        self.exit_code = 128 + signal.Signals[signal_name].value
        super().__init__(self.headline())

    def headline(self) -> str:
        """One line naming the signal and what the launcher did."""
        how = " (Ctrl-C)" if self.signal_name == "SIGINT" else ""
        return f"interrupted by {self.signal_name}{how}; the launcher stopped every rank"

    def context(self) -> list[str]:
        """No rank failed on its own: no context lines (`LaunchError.context`'s form)."""
        return []

    def full_report(self) -> str:
        """The text of a failure log: the headline (no rank raised, so no traceback)."""
        return self.headline() + "\n"


def is_peer_loss(failure: RankFailure) -> bool:
    """True when a recorded Python error reads as a consequence of a lost or silent peer
    (`PEER_LOSS_PATTERNS`)."""
    if failure.error_type == "ProcessDied":
        return False
    text = failure.message.lower()
    return any(p in text for p in PEER_LOSS_PATTERNS)


def cause_order(failure: RankFailure) -> tuple[int, float]:
    """Sort key from root cause to consequence (module doc)."""
    if failure.error_type == "ProcessDied":
        return 0, failure.time_s
    return (2 if is_peer_loss(failure) else 1), failure.time_s


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` (empty when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def describe(failure: RankFailure) -> str:
    """``rank 1 killed by signal 9 (SIGKILL)``, ``rank 0: CUDA out of memory: ...`` or
    ``rank 0: ValueError: <first line>``."""
    if failure.error_type == "ProcessDied":
        return failure.message
    if failure.error_type in OOM_ERROR_TYPES:
        return f"rank {failure.rank}: {oom_summary(failure.message)}"
    return f"rank {failure.rank}: {failure.error_type}: {first_line(failure.message)}"


def oom_summary(message: str) -> str:
    """``CUDA out of memory: tried to allocate 2.00 GiB with 77.9 GiB of 79.1 GiB in use``
    from torch's out-of-memory message (fields it lacks are left out)."""
    found = {k: m.group(1) for k, p in _OOM_FIELDS.items() if (m := re.search(p, message))}
    text = "CUDA out of memory"
    if "tried_to_allocate" in found:
        text += f": tried to allocate {found['tried_to_allocate']}"
        if "in_use" in found and "total" in found:
            text += f" with {found['in_use']} of {found['total']} in use"
    return text


SIGNAL_CAUSES = {
    "SIGKILL": "the kernel's out-of-memory killer or a user sends it",
    "SIGABRT": (
        "native code aborted: an uncaught C++ exception, a failed check, or a heap "
        "corruption the C library detected (its message is on the rank's stderr)"
    ),
}
"""What usually sends each signal, added to the message of a rank it killed."""


def native_trace_path(folder: Path, rank: int) -> Path:
    """The file in which rank ``rank`` of a spawned job leaves the Python stack of each of
    its threads when native code kills it (`record_native_crashes`)."""
    return folder / f"rank{rank}.native-crash.txt"


def record_native_crashes(path: Path) -> None:
    """Have this process write the Python stack of every thread to ``path`` when a fatal
    signal ends it (`faulthandler`: SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL). A C-library
    heap check or a C++ exception aborts without a Python traceback; the stack names the
    Python line (which collective, which probe) that was running. The file stays open for
    the life of the process (`faulthandler.enable` writes to its descriptor, and holds a
    reference to it)."""
    faulthandler.enable(file=path.open("w"), all_threads=True)


def read_native_trace(path: Path) -> str:
    """What `record_native_crashes` wrote to ``path`` (empty when nothing was, or when the
    file cannot be read)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def died(rank: int, exitcode: int | None, time_s: float, native_trace: str = "") -> RankFailure:
    """The failure of a rank whose process ended with ``exitcode`` and no Python record
    (negative: killed by that signal); ``native_trace``: the Python stacks the process left
    at the crash (`record_native_crashes`), the failure's traceback."""
    name = None
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = f"killed by signal {-exitcode} ({name})"
        if name in SIGNAL_CAUSES:
            why += f"; {SIGNAL_CAUSES[name]}"
    else:
        why = f"exited with code {exitcode} without a Python error"
    if native_trace:
        why += "; the Python stack of each of its threads at the crash follows"
    return RankFailure(
        rank=rank,
        error_type="ProcessDied",
        message=f"rank {rank} {why}",
        traceback=native_trace,
        time_s=time_s,
        signal=name,
    )
