"""What the watermark store raises: a damaged record (named by its path and what is wrong with it), a
stream, key or pipeline the store has never seen (named beside those it has, so a typo is obvious), a store
that cannot be reached right now, and a pipeline of the wrong kind for the reader.

Transient or permanent: an :class:`OSError` (``ConnectionError``, ``TimeoutError``, what fsspec raises for a
network blip, and :class:`StoreUnreachableError`) may pass by itself, so a waiting reader logs it and reads
again (:func:`is_transient`); every other error of a read (a missing permission, a file where a folder
belongs, a damaged record, an unknown name, a wrong kind) stays until someone fixes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_provider_wm.core.names import watermark_label

__all__ = [
    "DamagedRecordError",
    "PipelineKindError",
    "StoreUnreachableError",
    "UnknownKeyError",
    "UnknownNameError",
    "UnknownPipelineError",
    "UnknownStreamError",
    "checked_watermark",
    "is_transient",
]


def checked_watermark(record: dict[str, Any], path: str) -> dict[str, Any]:
    """``record`` (read from ``path``) when it is a watermark: ``lower_ms`` is epoch milliseconds, and so are
    ``upper_ms``, ``computed_at_ms`` and ``published_at_ms`` when present; else :class:`DamagedRecordError` naming
    ``path`` and the field. A reader would otherwise fail on a bare ``KeyError`` or, worse, compare a string.

    >>> checked_watermark({"lower_ms": 5}, "/s/latest.json")
    {'lower_ms': 5}
    >>> checked_watermark({"lower_ms": "5"}, "/s/latest.json")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    DamagedRecordError: damaged record /s/latest.json: lower_ms='5' is not epoch milliseconds
    """
    for field in ("lower_ms", "upper_ms", "computed_at_ms", "published_at_ms"):
        value = record.get(field)
        if value is None and field != "lower_ms":
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise DamagedRecordError(path, f"{field}={value!r} is not epoch milliseconds")
    return record


_LASTING_OS_ERRORS = (PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError)
"""OS errors that stay until someone acts: no access, or a file where a folder belongs (or the reverse)."""


def is_transient(error: BaseException) -> bool:
    """Whether a read's ``error`` may pass by itself (a waiting reader reads again): an :class:`OSError`, which
    covers ``ConnectionError``, ``TimeoutError`` and :class:`StoreUnreachableError`, but not a missing permission
    or a file where a folder belongs. A damaged record (a ``ValueError``) or an unknown name (a ``LookupError``)
    is not either.

    >>> is_transient(ConnectionError("reset by peer")), is_transient(DamagedRecordError("/s/latest.json", "empty"))
    (True, False)
    """
    return isinstance(error, OSError) and not isinstance(error, _LASTING_OS_ERRORS)


class StoreUnreachableError(OSError):
    """The store's base path is not there: an unmounted volume, a bucket briefly unreachable, or a wrong
    ``store_path``. Transient (:func:`is_transient`): readers wait and read again until their timeout, whose
    message then names this error, rather than calling every stream unknown."""

    def __init__(self, store: str) -> None:
        super().__init__(f"the store at {store} is unreachable: its base path does not exist (check store_path)")
        self.store = store

    def __reduce__(self) -> tuple[type[StoreUnreachableError], tuple[str]]:
        return type(self), (self.store,)


class PipelineKindError(ValueError):
    """A pipeline whose state document is of another kind than the reader needs, e.g. a completeness sensor
    pointed at a windowed pipeline: ``pipeline 'orders_15m' is a windowed pipeline: use StreamWatermarkSensor on
    its output stream``. Waiting cannot fix it."""


class DamagedRecordError(ValueError):
    """A record of the store that is there but cannot be read as one (truncated, garbage, not an object).

    ``path`` names the file, ``reason`` says what is wrong; the message is ``damaged record <path>: <reason>``.
    A ``ValueError``, so callers that fall back on a bad record (the publish path) keep doing so.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"damaged record {path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type[DamagedRecordError], tuple[str, str]]:
        return type(self), (self.path, self.reason)


class UnknownNameError(LookupError):
    """A name the store has never seen: a stream, a key of a stream, a pipeline. A sensor that finds no record
    raises it (through the hook's ``fail_on_unknown`` reads) to tell a misspelt name or store path, which no
    amount of waiting fixes, from a name that is known but has no record yet. ``unknown`` are the names asked
    for, ``known`` what the store has instead, ``store`` its base path; the message names all three."""

    unknown: list[str]
    known: list[str]
    store: str


class UnknownStreamError(UnknownNameError):
    """Streams the store has never seen: no controller round reported them and no watermark of them was
    published (``streams/<stream>/`` does not exist). The message names the store and the streams it has, so a
    misspelt name or store path shows at once: ``unknown stream 'clikcs': the store at /data/store has clicks,
    orders``."""

    def __init__(self, unknown: Sequence[str], known: Sequence[str], store: str) -> None:
        self.unknown, self.known, self.store = list(unknown), list(known), store
        names = ", ".join(repr(name) for name in self.unknown)
        has = ", ".join(self.known) if self.known else "no streams yet"
        super().__init__(
            f"unknown stream{'s' if len(self.unknown) > 1 else ''} {names}: the store at {store} has {has}"
        )

    def __reduce__(self) -> tuple[type[UnknownStreamError], tuple[list[str], list[str], str]]:
        return (UnknownStreamError, (self.unknown, self.known, self.store))


class UnknownKeyError(UnknownNameError):
    """Keys (``wm_key``) of a known ``stream`` that the store has never seen: no controller round reported a
    mark with them (``streams/<stream>/keys/<key>/`` does not exist). ``known`` are the stream's keys; the
    message shows them as the labels a sensor takes: ``unknown key 'ue' of stream 'orders': the store at
    /data/store has orders:eu, orders:us``."""

    def __init__(self, stream: str, unknown: Sequence[str], known: Sequence[str], store: str) -> None:
        self.stream, self.unknown, self.known, self.store = stream, list(unknown), list(known), store
        names = ", ".join(repr(name) for name in self.unknown)
        has = (
            ", ".join(watermark_label(stream, key) for key in self.known)
            if self.known
            else f"no keyed watermark of stream {stream!r}"
        )
        super().__init__(
            f"unknown key{'s' if len(self.unknown) > 1 else ''} {names} of stream {stream!r}: "
            f"the store at {store} has {has}"
        )

    def __reduce__(self) -> tuple[type[UnknownKeyError], tuple[str, list[str], list[str], str]]:
        return (UnknownKeyError, (self.stream, self.unknown, self.known, self.store))


class UnknownPipelineError(UnknownNameError):
    """A pipeline the store has never seen: no run of it wrote anything (``pipelines/<pipeline>/`` does not
    exist; its first run creates it before its Spark job starts). ``unknown pipeline 'ordrs_daily': the store
    at /data/store has orders_5m, orders_daily``."""

    def __init__(self, unknown: Sequence[str], known: Sequence[str], store: str) -> None:
        self.unknown, self.known, self.store = list(unknown), list(known), store
        names = ", ".join(repr(name) for name in self.unknown)
        has = ", ".join(self.known) if self.known else "no pipelines yet"
        super().__init__(
            f"unknown pipeline{'s' if len(self.unknown) > 1 else ''} {names}: the store at {store} has {has}"
        )

    def __reduce__(self) -> tuple[type[UnknownPipelineError], tuple[list[str], list[str], str]]:
        return (UnknownPipelineError, (self.unknown, self.known, self.store))
