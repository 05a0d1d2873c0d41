"""The data loader of an FCP run: this rank's packed group batch of every round, with data-loader workers.

A round's batch is its group's samples collated and packed (the plan says which; the collator adds the padding
document a group too wide for its samples needs, `solver.short_shards`); the run's `num_workers` collate the next
rounds ahead, in worker processes, as torch's `DataLoader` would. Unlike a
`DataLoader` over a batch sampler, which asks its sampler for `prefetch_factor x num_workers` batches ahead,
this loader never asks for the rounds of a step whose plan cannot be made yet: with recalibration, the plan
of step s needs the measured group times of step s - 2. So every rank gets the same batches, in the same
order, with any `num_workers` and `prefetch_factor` as with none, and the run reaches `train_iters`.
"""
from __future__ import annotations

import collections
import multiprocessing
import queue
from collections.abc import Callable, Iterator
from itertools import count
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401  (tensors sent between processes travel in shared memory)

from mindspeed_mm.core.fcp.runtime.step_runtime import FCPRankLayout, rounds_of_rank

from .step_plans import FCPDataError, StepPlans

Collate = Callable[[list[int], int], dict[str, Any]]
"""(dataset indices of a round's group in packing order, the group's degree) -> the round's packed batch."""
_POLL_S = 5.0


def _worker_loop(collate: Collate, tasks: Any, results: Any) -> None:
    """One worker: collates the rounds it is sent until it gets None."""
    torch.set_num_threads(1)
    while True:
        task = tasks.get()
        if task is None:
            return
        key, indices, degree = task
        try:
            results.put((key, collate(indices, degree), None))
        except Exception as error:  # sent back whole, raised in the training process
            results.put((key, None, f"{type(error).__name__}: {error}"))


class _Workers:
    """`num_workers` processes sharing one task queue and one result queue (tensors travel in shared memory)."""

    def __init__(self, collate: Collate, num_workers: int) -> None:
        context = multiprocessing.get_context("fork")
        self.tasks = context.Queue()
        self.results = context.Queue()
        self.processes = [context.Process(target=_worker_loop, args=(collate, self.tasks, self.results),
                                          daemon=True, name=f"fcp-loader-{i}") for i in range(num_workers)]
        for process in self.processes:
            process.start()

    def get(self) -> tuple[Any, Any, str | None]:
        while True:
            try:
                return self.results.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [p.name for p in self.processes if not p.is_alive()]
                if dead:
                    raise FCPDataError(f"FCP data-loader worker(s) {', '.join(dead)} exited unexpectedly") from None

    def close(self) -> None:
        for _ in self.processes:
            self.tasks.put(None)
        for process in self.processes:
            process.join(timeout=_POLL_S)
            if process.is_alive():
                process.terminate()


def _accelerator_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


class FCPRoundLoader:
    """This rank's round batches from the run's first step on; an endless iterable, as the training loop reads it."""

    def __init__(self, plans: StepPlans, layout: FCPRankLayout, collate: Collate, *, num_workers: int = 0,
                 prefetch_factor: int | None = None, pin_memory: bool = False) -> None:
        if num_workers < 0:
            raise FCPDataError(f"data.dataloader_param.num_workers must be >= 0, got {num_workers}")
        self.plans = plans
        self.layout = layout
        self.collate = collate
        self.num_workers = num_workers
        self.prefetch = num_workers * (2 if prefetch_factor is None else int(prefetch_factor))
        # As torch's DataLoader decides: pinning needs an accelerator.
        self.pin_memory = pin_memory and _accelerator_available()

    def rounds(self) -> Iterator[tuple[int, list[int], int]]:
        """(step, dataset indices of this rank's group, the group's degree) of every round, in order (what a batch
        sampler yields)."""
        for step in count(self.plans.steps.first):
            yield from self._step_rounds(step)

    def _step_rounds(self, step: int) -> Iterator[tuple[int, list[int], int]]:
        for fcp_round in rounds_of_rank(self.plans.plan(step, "sampler"), self.layout):
            yield step, self.plans.samples(step, fcp_round.batch_positions), fcp_round.degree

    def __len__(self) -> int:
        return self.plans.order.num_samples

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.num_workers == 0:
            for _, indices, degree in self.rounds():
                yield self._pinned(self.collate(indices, degree))
            return
        workers = _Workers(self.collate, self.num_workers)
        try:
            yield from self._prefetched(workers)
        finally:
            workers.close()

    def _prefetched(self, workers: _Workers) -> Iterator[dict[str, Any]]:
        unsent: collections.deque[tuple[int, list[int], int]] = collections.deque()
        done: dict[int, Any] = {}
        next_step = self.plans.steps.first
        sent = received = 0

        def expand(step: int) -> None:
            unsent.extend(self._step_rounds(step))

        while True:
            # Send rounds ahead, but only those of steps whose plans can be made now.
            while sent - received < self.prefetch:
                if not unsent:
                    if not self.plans.can_plan(next_step):
                        break
                    expand(next_step)
                    next_step += 1
                    continue
                workers.tasks.put((sent, *unsent.popleft()[1:]))
                sent += 1
            if sent == received:  # nothing ahead: the training loop needs this round now, so its plan is known
                if not unsent:
                    expand(next_step)
                    next_step += 1
                workers.tasks.put((sent, *unsent.popleft()[1:]))
                sent += 1
            while received not in done:
                key, batch, error = workers.get()
                if error is not None:
                    raise FCPDataError(f"collating round {key + 1} of this rank failed in a worker: {error}")
                done[key] = batch
            yield self._pinned(done.pop(received))
            received += 1

    def _pinned(self, batch: dict[str, Any]) -> dict[str, Any]:
        if not self.pin_memory:
            return batch
        return {key: value.pin_memory() if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


__all__ = ["Collate", "FCPRoundLoader"]
