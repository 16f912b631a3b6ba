"""The injected ``call_later`` of the controller's unit tests: timers recorded, fired on demand."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class FakeTimer:
    """One ``call_later``: fired only when the test says so; ``cancel`` is recorded."""

    delay: float
    callback: Callable[[], None]
    cancelled: bool = False
    fired: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeTimers:
    """The injected ``call_later``: every timer ever requested, in order."""

    created: list[FakeTimer] = field(default_factory=list)

    def __call__(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(delay, callback)
        self.created.append(timer)
        return timer

    def pending(self) -> list[FakeTimer]:
        return [t for t in self.created if not t.cancelled and not t.fired]

    def fire(self) -> None:
        """Fire the only pending timer, as the event loop would once its delay passed."""
        (timer,) = self.pending()
        timer.fired = True
        timer.callback()
