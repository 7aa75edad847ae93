"""What the running study costs in CPU time: sums user + system time of every process of its process
group (run.sh, the study, its workers; reaped children are in their parent's cutime and cstime), every
INTERVAL seconds, and keeps one record per process group in OUT (JSON), so that a study stopped and
resumed over several sessions adds up.

    python cpu_meter.py PGID OUT.json [INTERVAL]

Read from /proc by hand: psutil is not a dependency of the project, and this is a few lines.
Processes that end between two samples without being reaped lose at most INTERVAL seconds each."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int) -> float | None:
    """utime + stime + cutime + cstime of every live process in the group (None: the group is gone)."""
    total, alive = 0, False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is fields[0]
        if int(fields[2]) != pgid:  # fields[2]: the process group
            continue
        alive = True
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / TICK if alive else None


def main() -> None:
    pgid, out = int(sys.argv[1]), Path(sys.argv[2])
    interval = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    records = json.loads(out.read_text()) if out.is_file() else {}
    started = time.time()
    while (cpu := group_cpu_seconds(pgid)) is not None:
        records[str(pgid)] = {"started": started, "last_sample": time.time(), "cpu_seconds": round(cpu, 1)}
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(records, indent=1))
        tmp.replace(out)
        time.sleep(interval)
    print(f"process group {pgid} is gone; its last sample: {records.get(str(pgid))}")


if __name__ == "__main__":
    main()
