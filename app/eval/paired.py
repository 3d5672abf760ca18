"""Is a candidate better than what is served, past noise? A paired bootstrap over the questions both answered:
resample the questions with replacement, and take the interval of the mean per-question difference. The candidate
wins only when the whole interval lies above zero, so a lucky draw of a small question set promotes nothing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel


class Comparison(BaseModel):
    """Served against candidate on the same `n` questions (scores in the metric's own unit)."""

    n: int
    served: float  # mean score
    candidate: float
    difference: float  # candidate - served
    low: float  # the interval of the difference
    high: float
    confidence: float

    @property
    def better(self) -> bool:
        return self.low > 0

    def describe(self, metric: str) -> str:
        return (f"{metric} {self.candidate:.4f} against {self.served:.4f} served: {self.difference:+.4f}, "
                f"{self.confidence:.0%} interval [{self.low:+.4f}, {self.high:+.4f}] over {self.n} questions")


def paired_bootstrap(served: Sequence[float], candidate: Sequence[float], resamples: int = 2000,
                     confidence: float = 0.95, seed: int = 0) -> Comparison:
    """The mean difference and its percentile interval. `served[i]` and `candidate[i]` score the same question."""
    assert len(served) == len(candidate) > 0, "a paired comparison needs the same questions, at least one"
    a, b = np.asarray(served, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    diff = b - a
    rows = np.random.default_rng(seed).integers(0, len(diff), size=(resamples, len(diff)))  # (resamples, n)
    means = diff[rows].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Comparison(n=len(diff), served=float(a.mean()), candidate=float(b.mean()), difference=float(diff.mean()),
                      low=float(low), high=float(high), confidence=confidence)
