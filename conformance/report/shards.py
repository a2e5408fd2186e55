"""A shard of a run, as `run --shard K/N` asks for it and summary.json's `selection.shard` records it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Shard:
    """Part `index` (1-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """`K/N` with 1 <= K <= N; a ValueError names what is wrong."""
    index, slash, count = text.partition("/")
    if not slash or not index.isdecimal() or not count.isdecimal():
        raise ValueError(f"{text!r} is not K/N (two whole numbers, e.g. 2/4)")
    shard = Shard(int(index), int(count))
    if shard.count < 1 or shard.index < 1:
        raise ValueError(f"{text!r}: K and N start at 1 (shards are 1/N to N/N)")
    if shard.index > shard.count:
        raise ValueError(f"{text!r}: K is above N (there is no shard {shard.index} of {shard.count})")
    return shard
