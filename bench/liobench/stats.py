"""Median and spread of repeated measurements (COURSE.md, "Performance method": every figure is a
median with its min-max over at least five repeats, and a comparison whose range holds 1 is a tie)."""
import math
import statistics


def spread(values):
    """{"median", "min", "max", "samples"} of the measurements `values` (a non-empty sequence of
    numbers). Raises statistics.StatisticsError when `values` is empty."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "samples": list(values)}


def median_min_max(values):
    """(median, min, max) of `values`; (nan, nan, nan) when there are none."""
    values = list(values)
    return (statistics.median(values), min(values), max(values)) if values else (math.nan,) * 3


def spread_cell(s, digits=1, sep="–"):
    """'median [min–max]' of a spread dict (or a (median, min, max) tuple), `digits` decimals."""
    m, lo, hi = (s["median"], s["min"], s["max"]) if isinstance(s, dict) else s
    return f"{m:.{digits}f} [{lo:.{digits}f}{sep}{hi:.{digits}f}]"


def is_tie(lo, hi):
    """True when the range [lo, hi] of per-repeat ratios holds 1: neither side is faster."""
    return lo <= 1.0 <= hi
