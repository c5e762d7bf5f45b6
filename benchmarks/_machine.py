"""What else is running: benchmarks record it, since wall times on a shared machine are noisy."""

from __future__ import annotations

import os
import subprocess


def other_busy_processes(threshold: float = 20.0) -> list[str]:
    """Other processes above ``threshold``% CPU (ps's lifetime average; empty without ps)."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pid,pcpu,args", "--no-headers"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    busy = []
    for line in out.splitlines():
        pid, pcpu, command = line.split(None, 2)
        if int(pid) != os.getpid() and float(pcpu) > threshold:
            busy.append(f"{pid} {pcpu}% {command[:70]}")
    return busy
