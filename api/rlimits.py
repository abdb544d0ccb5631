"""The process's own limits, raised where the operating system allows it.

A server keeps one open file per mapped seek file and per layout it holds (:mod:`exact.store.seek`), besides
its sockets and its catalog; the soft limit of open files many systems start a process with (1024, or 256)
is the first thing a busy server would exhaust.  Each ``seqsketch`` process raises its soft limit to the hard
limit the system grants (at most :data:`WANTED`) before it opens anything.  A process that still runs out is
answered :class:`~exact.errors.OutOfResources` (503), never a report of damage."""

from __future__ import annotations

#: open files a process asks for: a few per part for thousands of parts, far below what systems grant
WANTED = 65536


def raise_open_file_limit(wanted: int = WANTED) -> int:
    """Raise this process's soft limit of open files towards ``wanted`` (never above the hard limit, never
    lower than it is); the soft limit it has now."""
    try:
        import resource
    except ImportError:  # (no POSIX limits here)
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return int(soft)
