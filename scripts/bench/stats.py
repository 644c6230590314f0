"""Percentiles for the bench scripts' summaries: one definition, so that a p99 means the same
thing in every figure of docs/performance.md.

Imported by the scripts' inline Python (run with ``PYTHONPATH=scripts/bench``) and by the
Python bench scripts themselves.
"""

import math


def quantile(values, q):
    """The ``q``-quantile (0 to 1) of ``values``, linearly interpolated between the two
    nearest ranks (numpy's default); nan when there are none."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)
