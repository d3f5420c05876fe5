"""What the watermark store raises: a damaged record (named by its path and what is wrong with it), and a
stream, key or pipeline the store has never seen (named beside those it has, so a typo is obvious)."""

from __future__ import annotations

from collections.abc import Sequence

from airflow_provider_wm.core.names import watermark_label

__all__ = ["DamagedRecordError", "UnknownKeyError", "UnknownNameError", "UnknownPipelineError", "UnknownStreamError"]


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
