"""A small thread-safe bounded LRU map: the one helper behind the process-local caches."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLRU(Generic[K, V]):
    """At most ``maxsize`` entries; the least recently used one goes first.

    Web threads share these caches, so every access takes the lock; values are
    computed outside it (two threads may compute the same one; the last wins).
    With ``weigh``, entries also go while their total weight exceeds
    ``max_weight`` (the newest one always stays): a cache of message windows
    is bounded by the messages it holds, not by how many windows.
    """

    __slots__ = ("_data", "_lock", "_weight", "_weights", "max_weight", "maxsize", "weigh")

    def __init__(
        self,
        maxsize: int,
        *,
        max_weight: int | None = None,
        weigh: Callable[[V], int] | None = None,
    ) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        if (max_weight is None) != (weigh is None):
            raise ValueError("max_weight and weigh go together")
        self.maxsize = maxsize
        self.max_weight = max_weight
        self.weigh = weigh
        self._data: OrderedDict[K, V] = OrderedDict()
        self._weights: dict[K, int] = {}
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            if self.weigh is not None:
                weight = self.weigh(value)
                self._weight += weight - self._weights.get(key, 0)
                self._weights[key] = weight
            while len(self._data) > self.maxsize or (
                self.max_weight is not None
                and self._weight > self.max_weight
                and len(self._data) > 1
            ):
                old, _ = self._data.popitem(last=False)
                self._weight -= self._weights.pop(old, 0)

    def get_or_set(self, key: K, compute: Callable[[], V]) -> V:
        value = self.get(key)
        if value is None:
            value = compute()
            self.put(key, value)
        return value

    def pop(self, key: K) -> V | None:
        with self._lock:
            self._weight -= self._weights.pop(key, 0)
            return self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._weights.clear()
            self._weight = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data
