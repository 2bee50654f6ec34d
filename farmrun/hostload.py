"""What else the host did while something was timed, read from ``/proc`` (Linux; elsewhere: unknown).

``LoadMeter`` brackets a timing window: the host's whole busy CPU time over the window (``/proc/stat``),
this process's own (``os.times``, reaped children included, plus its live descendants from
``/proc/<pid>/stat``: a native runtime's server process runs the timed program) and the difference, the
CPU other processes took, each in cores (CPU seconds over wall seconds), with the 1-minute load average
at both ends.
``farmrun.cpu_share`` decides a CPU runtime's threads from the CPUs the process may use. ``host_id``
names the host, so a speed-up can check that both of its measurements were taken on the same one.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from coverfarm.device_result import HostLoad

_STAT = Path("/proc/stat")
_LOADAVG = Path("/proc/loadavg")
_MACHINE_ID = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
# The running kernel's id, new at each boot: a machine without a machine id (a container, a leased VM)
# is told apart by it, where host names repeat ("vm", "localhost").
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
# /proc/stat counts in clock ticks (10 ms at the usual 100 Hz): over a shorter window than this the
# shares are mostly rounding, and are left unknown.
MIN_WINDOW_S = 0.5


def cores() -> int:
    return os.cpu_count() or 1


def busy_seconds(cpus: set[int] | None = None) -> float | None:
    """CPU seconds spent busy since boot (every state but idle and iowait): the whole host's (the
    ``cpu`` line of ``/proc/stat``), or those of the CPUs ``cpus`` (their ``cpuN`` lines); None when
    unreadable or none of them is listed."""
    try:
        lines = _STAT.read_text().splitlines()
    except OSError:
        return None
    names = {"cpu"} if cpus is None else {f"cpu{cpu}" for cpu in cpus}
    total, seen = 0, 0
    for line in lines:
        fields = line.split()
        if not fields or fields[0] not in names:
            continue
        ticks = [int(value) for value in fields[1:9]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks) - ticks[3] - ticks[4]
        seen += 1
    return total / os.sysconf("SC_CLK_TCK") if seen else None


def _loadavg() -> float | None:
    try:
        return float(_LOADAVG.read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None


def _stat(pid: int | str) -> tuple[int, float]:
    """(parent pid, CPU seconds used so far) of a live process, from ``/proc/<pid>/stat`` (its fields
    after the command name, which may hold spaces: ppid is the 2nd, utime and stime the 12th and 13th)."""
    stat = (Path("/proc") / str(pid) / "stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU seconds a live process has used so far (``/proc``)."""
    return _stat(pid)[1]


def live_descendant_seconds(root: int | None = None) -> float:
    """CPU seconds used so far by the live descendants of process ``root`` (default: this one), read
    from ``/proc``; 0.0 where there is none or no ``/proc``. A child once reaped is in ``os.times``."""
    root = os.getpid() if root is None else root
    stats: dict[int, tuple[int, float]] = {}
    try:
        entries = [entry.name for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    except OSError:
        return 0.0
    for name in entries:
        try:
            stats[int(name)] = _stat(name)
        except (OSError, ValueError):
            continue  # gone meanwhile
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


def own_seconds() -> float:
    """CPU seconds this process has used so far, its children's included (reaped or live)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system + live_descendant_seconds()


class LoadMeter:
    """``start()`` before the timed window, ``stop()`` after it."""

    def __init__(self) -> None:
        self._start = 0.0
        self._busy: float | None = None
        self._own = 0.0
        self._loadavg: float | None = None

    def start(self) -> LoadMeter:
        self._loadavg = _loadavg()
        self._busy, self._own = busy_seconds(), own_seconds()
        self._start = time.perf_counter()
        return self

    def stop(self) -> HostLoad:
        window = time.perf_counter() - self._start
        busy_now, own_now = busy_seconds(), own_seconds()
        load = HostLoad(cores=cores(), window_s=round(window, 3))
        load.loadavg_1m_start, load.loadavg_1m_end = self._loadavg, _loadavg()
        if window >= MIN_WINDOW_S and self._busy is not None and busy_now is not None:
            busy = min((busy_now - self._busy) / window, float(load.cores))
            own = min((own_now - self._own) / window, busy)
            load.busy_cores = round(busy, 3)
            load.own_cores = round(own, 3)
            load.other_cores = round(max(busy - own, 0.0), 3)
        return load


def host_id() -> str:
    """This host's machine id (``/etc/machine-id``) and name; where there is no machine id, the kernel's
    boot id (``boot-<id>/<name>``: the speed-up rule pairs a device run and a baseline by this, and two
    leased machines may share a name); the name alone where there is neither."""
    name = socket.gethostname()
    for path in _MACHINE_ID:
        if machine := _read_id(path):
            return f"{machine}/{name}"
    if boot := _read_id(_BOOT_ID):
        return f"boot-{boot}/{name}"
    return name


def _read_id(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
