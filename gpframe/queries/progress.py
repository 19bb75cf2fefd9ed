"""A progress bar over the stages of an operation that can take seconds.

Used where the work is a few vectorised stages rather than a loop (``grid_stats``: Clip-User
planning, release, the output frame; ``nearest_users``: the budget check, the elimination
rounds). tqdm, shown only when ``progress`` asks for it or, with ``progress=None``, in a
terminal or a notebook (:func:`gpframe.queries.privatize.progress_enabled`).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from gpframe.queries.privatize import progress_enabled

__all__ = ["Stages"]


class Stages:
    """Context manager: ``step(name)`` after each of ``total`` stages.

    >>> with Stages(False, "demo", 2) as bar:
    ...     bar.step("one")
    ...     bar.step("two")
    >>> bar.done
    2
    """

    def __init__(self, progress: bool | None, desc: str, total: int) -> None:
        self.done = 0
        self._bar: Any = None
        if progress_enabled(progress):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="stage")

    def step(self, name: str) -> None:
        """Mark a stage finished; ``name`` is shown next to the bar."""
        self.done += 1
        if self._bar is not None:
            self._bar.set_postfix_str(name, refresh=False)
            self._bar.update()

    def __enter__(self) -> Stages:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.close()
