from datetime import datetime


def took(start: datetime | None, end: datetime | None) -> str:
    """A duration a person reads at a glance: 0.42 s, 12.3 s, 4 min 05 s, 1 h 02 min."""
    if start is None or end is None:
        return ""
    s = max((end - start).total_seconds(), 0.0)
    if s < 10:
        return f"{s:.2f} s"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"
