"""The clock leases are counted on: one that keeps counting while the machine sleeps."""

import time

try:
    _CLOCK = time.CLOCK_BOOTTIME  # Linux: counts suspended time.
except AttributeError:  # pragma: no cover - other systems
    _CLOCK = time.CLOCK_MONOTONIC


def now() -> float:
    """Seconds on a clock that never goes back and counts suspended time where it can."""
    return time.clock_gettime(_CLOCK)
