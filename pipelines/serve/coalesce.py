"""Merge the batches that wait for the model into one pass: continuous batching behind Serve's batching.

Serve's @serve.batch forms a batch from the requests that arrive within its bounded wait of the first one,
and it forms the next batch as soon as that one is handed over, while the model may still be busy. On a
loaded replica those batches queue up small. `Coalescer` takes every batch that queued while the model
worked and runs them as one call (one retrieval, one forward pass), so a busy replica's batches grow with
its load and an idle one answers a lone request at once.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable


class Coalescer:
    """`await submit(items)` -> the results of `items`; `run(all_items)` does the work, one call at a time,
    for everything submitted meanwhile, and returns one result per item in order."""

    def __init__(self, run: Callable[[list], Awaitable[list]], max_items: int):
        self.run, self.max_items = run, int(max_items)
        self.pending: list = []  # (items, future)
        self.task: asyncio.Task | None = None

    async def submit(self, items: list) -> list:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((list(items), future))
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._drain())
        return await future

    def _take(self) -> list:
        """The oldest submissions, whole, up to max_items items (at least one submission)."""
        taken, count = [], 0
        while self.pending and (not taken or count + len(self.pending[0][0]) <= self.max_items):
            taken.append(self.pending.pop(0))
            count += len(taken[-1][0])
        return taken

    async def _drain(self) -> None:
        while self.pending:
            taken = self._take()
            items = [item for batch, _ in taken for item in batch]
            try:
                results = await self.run(items)
            except Exception as err:  # noqa: BLE001 - every waiting request gets the error, the loop goes on
                for _, future in taken:
                    if not future.done():
                        future.set_exception(err)
                continue
            pos = 0
            for batch, future in taken:
                if not future.done():  # a cancelled request (client gone) is skipped
                    future.set_result(results[pos : pos + len(batch)])
                pos += len(batch)
