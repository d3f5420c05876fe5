"""A real fault injector for the watermark store: a local fsspec file system (``flaky://<dir>``) whose next
``fail`` opens raise ``error`` (a network blip), then behave. No mock: every other call is the local file
system's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.local import LocalFileSystem


class FlakyFileSystem(LocalFileSystem):
    """``LocalFileSystem`` under the ``flaky`` protocol; :func:`failing_opens` arms it."""

    protocol = "flaky"
    root_marker = "/"
    pending: ClassVar[list[BaseException]] = []

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        return str(super()._strip_protocol(str(path).replace("flaky://", "", 1)))

    def _open(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        if self.pending:
            raise self.pending.pop(0)
        return super()._open(path, *args, **kwargs)


fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)


@contextmanager
def failing_opens(count: int, error: BaseException | None = None) -> Iterator[list[BaseException]]:
    """The next ``count`` opens of any ``flaky://`` path raise ``error`` (default a ``ConnectionError``); yields
    the errors not raised yet, so a test can tell that they were."""
    FlakyFileSystem.pending[:] = [error or ConnectionError("connection reset by peer") for _ in range(count)]
    try:
        yield FlakyFileSystem.pending
    finally:
        FlakyFileSystem.pending.clear()
