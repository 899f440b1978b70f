"""The batch loop the garbage collector and the namespace controller share: read up to
``BATCH`` live candidates of a kind, let the core sort them, carry them out, again, until
none are left or the reconcile's time budget is spent.

Each batch is a few statements that commit on their own, so a worker killed midway leaves
whole batches done and the next reconcile reads what is left. The budget
(``QM_SWEEP_SECONDS``, 10 s) bounds how long a reconcile holds its key and its worker; past
it the controller asks to be requeued at once.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import asyncpg

from app.core.audit import WriteContext
from app.core.controllers.garbage import BATCH, Candidate, split
from app.core.errors import Failure
from app.core.kinds import Kind
from app.store import collect
from workers.outcome import failure_of

BUDGET_SECONDS = float(os.environ.get("QM_SWEEP_SECONDS", "10"))
Read = Callable[[Kind], Awaitable[list[Candidate]]]


@dataclass
class Swept:
    more: bool = False  # the budget ran out with candidates left
    changed: int = 0
    missed: int = 0  # candidates whose row changed after it was read
    failures: list[Failure] = field(default_factory=list)

    @property
    def messages(self) -> tuple[str, ...]:
        return tuple(f.message for f in self.failures)


async def sweep(
    pool: asyncpg.Pool,
    kinds: Sequence[Kind],
    read: Read,
    ctx: WriteContext,
    owner_uid: str = "",
    budget: float = BUDGET_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> Swept:
    """Batches of each of ``kinds`` in turn, as ``read`` finds them; a batch the database
    refuses ends that kind's turn, its failure classified for the task's retry."""
    out = Swept()
    deadline = clock() + budget
    for kind in kinds:
        while True:
            if clock() >= deadline:
                out.more = True
                return out
            found = await read(kind)
            if not found:
                break
            try:
                changed = await collect.apply(pool, kind, split(found), ctx, owner_uid)
            except asyncpg.PostgresError as exc:
                failure = failure_of(exc)
                assert failure is not None  # database errors are temporary
                out.failures.append(dataclasses.replace(failure, message=f"{kind.plural}: {exc}"))
                break
            out.changed += changed
            out.missed += len(found) - changed
            if len(found) < BATCH:
                break  # rows changed under the batch are read again by the next reconcile
    return out
