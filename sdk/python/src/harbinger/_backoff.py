"""Spacing of the retries of something the broker cannot do for now."""

from __future__ import annotations

import random

MIN_BACKOFF = 0.05


class Backoff:
    """The wait doubles from 50 ms up to max_delay, each drawn at random between
    half and all of it, so that the many clients that lost a broker together do
    not all come back at the same instant."""

    def __init__(self, max_delay: float) -> None:
        self._cur = MIN_BACKOFF
        self._max = max_delay

    def next(self) -> float:
        d = self._cur / 2 + random.uniform(0, self._cur / 2)
        self._cur = min(self._cur * 2, self._max)
        return d

    def reset(self) -> None:
        self._cur = MIN_BACKOFF
