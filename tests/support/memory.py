"""A Berth process's peak memory, as tests bound it: what one request may cost the host."""

from pathlib import Path

# Peak resident memory any Berth process may reach through the suite's bomb tests (tree
# bombs, search patterns). Each one alone sits near 100-200 MB here; expanding any of
# those inputs would take gigabytes.
PEAK_RSS_BOUND_MB = 600


def peak_rss_mb(pid: int) -> float:
    """The process's high-water mark of resident memory since it started (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")
