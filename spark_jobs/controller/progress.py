"""Gap-free progress (NebulaStream) as DataFrame operations: per origin, the sequences applied in order, the
chunks that wait for a gap, and the reason of each mark that cannot be (``core.progress``)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
    StringType,
)

from airflow_provider_wm.core.controller import (
    MarkKind,
    Quarantine,
)
from airflow_provider_wm.core.progress import MAX_CHUNKS, MAX_PENDING_SEQUENCES
from airflow_provider_wm.core.segments import Segment
from spark_jobs.controller.marks import invalid_key, is_known, names_unknown_segment, nullable_key, row_local_reason
from spark_jobs.controller.schemas import (
    KEYS,
    MARKS_SCHEMA,
    PENDING_STATE_SCHEMA,
    POSITION,
    PROGRESS_COLUMNS,
    STREAM_NAME_REGEX,
)

__all__ = ["ORIGIN_KEYS", "Progress", "advance_origins", "exact_origins", "origin_decisions", "sequence_reason"]


ORIGIN_KEYS = [*KEYS, "origin_id"]


@dataclass(frozen=True)
class Progress:
    released: DataFrame  # one mark (MARKS_SCHEMA, progress columns null) per released sequence not in ``dense``
    bad: DataFrame | None  # quarantined sequenced marks: MARKS_SCHEMA + reason; None: none can be
    seen: DataFrame  # KEYS of writers with a sane sequenced mark in the round
    origins: DataFrame  # next ORIGINS_STATE_SCHEMA
    pending: DataFrame | None  # next PENDING_STATE_SCHEMA; None: no chunk waits (known without reading the state)
    dense: DataFrame | None = None  # ORIGIN_KEYS + prefix_end of dense origins: their marks up to it are released


def advance_origins(
    sequenced: DataFrame,
    origins0: DataFrame,
    pending0: DataFrame,
    segments: dict[str, dict[int, Segment]],
) -> Progress:
    """``core.progress.advance`` for every origin with marks in the round.

    Two paths. A *dense* origin, the common case, is decided by fixed-width aggregates per origin
    (:func:`origin_decisions`): every chunk of it in the round and waiting in the state is a whole one-chunk
    sequence, none is bad, all numbers are distinct, past the committed one and within reach. Its prefix
    then ends one before the first number missing after the committed one (committed 3, sequences 4 5 7
    -> 5; 6 is missing), and its rows are released or kept waiting through a broadcast join, with no
    per-sequence shuffle. Its marks of the round that are released are not in ``released``: the round's scan
    of the marks picks them out with ``dense`` (:func:`spark_jobs.controller.marks.round_marks`), and the marks
    are read again for the pending state only when some of them wait. When the decisions show that no chunk
    waits after the round (every origin dense, none with chunks above its prefix end, none untouched with
    chunks waiting), ``pending`` is ``None``: the next pending state is empty, without a read of this one.
    Every other origin with marks in the round takes the exact path (:func:`exact_origins`).
    """
    sequenced = sequenced.withColumn("origin_id", F.coalesce("origin_id", F.lit("")))
    # one row per origin with marks in the round or chunks waiting: small; with how many take the exact path,
    # the lowest prefix end of the dense origins with marks of the round that wait (a bound on their numbers),
    # and how many origins keep chunks waiting (those untouched by the round, the dense ones with some above
    # their prefix end)
    decisions = origin_decisions(sequenced, origins0, pending0, segments).localCheckpoint()
    counts = (
        decisions.coalesce(1)  # one task over the checkpoint's blocks: one Spark job, no shuffle
        .agg(
            F.count(F.when(F.col("arrived") & ~F.col("dense"), 1)).alias("exact"),
            F.min(F.when(F.col("dense") & F.col("arrivals_wait"), F.col("prefix_end"))).alias("waiting_above"),
            F.count(F.when(~F.col("arrived") | (F.col("dense") & F.col("pending_waits")), 1)).alias("keep_pending"),
        )
        .first()  # small: one row of counts
    )
    assert counts is not None  # an aggregation without grouping has one row
    dense_decisions = decisions.where("dense")
    dense = F.broadcast(dense_decisions.select(*ORIGIN_KEYS, "prefix_end"))
    released_now = F.col("seq") <= F.col("prefix_end")
    pending_columns = PENDING_STATE_SCHEMA.fieldNames()
    dense_pending0 = pending0.join(dense, ORIGIN_KEYS).select(*pending_columns, "prefix_end")
    progress_nulls = [F.lit(None).cast(MARKS_SCHEMA[c].dataType).alias(c) for c in PROGRESS_COLUMNS]
    released = dense_pending0.where(released_now).select(
        "stream", "writer_id", "time_ms", "position", "kind", "reported_at_ms", *progress_nulls, "wm_key"
    )
    arrived_waiting = None
    if counts["waiting_above"] is not None:  # some marks of the round wait: read them (numbers above a bound)
        arrived = sequenced.where(F.col("seq") > F.lit(counts["waiting_above"])).join(dense, ORIGIN_KEYS)
        arrived_waiting = arrived.where(~released_now).select(*pending_columns)
    dense_origins = dense_decisions.select(
        *ORIGIN_KEYS, F.greatest("committed_seq", "prefix_end").alias("committed_seq")
    ).where(F.col("committed_seq") > 0)
    seen = dense_decisions.select(*KEYS)
    other_origins0 = origins0.join(dense, ORIGIN_KEYS, "left_anti")
    dense_keys = dense_decisions.select(*ORIGIN_KEYS, "prefix_end")
    if counts["exact"] == 0:  # the dense origins' marks are all good
        # the stored chunks that still wait, of every origin, in one read of the pending state
        still_pending = None
        if counts["keep_pending"] > 0:
            still_pending = (
                pending0.join(dense, ORIGIN_KEYS, "left")
                .where(F.col("prefix_end").isNull() | ~released_now)
                .select(*pending_columns)
            )
        if arrived_waiting is not None:
            still_pending = arrived_waiting if still_pending is None else still_pending.unionByName(arrived_waiting)
        return Progress(released, None, seen, other_origins0.unionByName(dense_origins), still_pending, dense_keys)
    waiting = dense_pending0.where(~released_now).select(*pending_columns)
    if arrived_waiting is not None:
        waiting = waiting.unionByName(arrived_waiting)
    other_pending0 = pending0.join(dense, ORIGIN_KEYS, "left_anti")
    exact = exact_origins(sequenced.join(dense, ORIGIN_KEYS, "left_anti"), other_origins0, other_pending0, segments)
    return Progress(
        exact.released.unionByName(released),
        exact.bad,
        exact.seen.unionByName(seen),
        exact.origins.unionByName(dense_origins),
        waiting if exact.pending is None else exact.pending.unionByName(waiting),
        dense_keys,
    )


def sequence_reason(segments: dict[str, dict[int, Segment]]) -> Column:
    """Why a sequenced mark is bad on its own (row-local checks, unknown segment, bad numbers), or null."""
    unknown_segment = names_unknown_segment(segments)
    invalid_sequence = (
        F.col("seq").isNull()
        | (F.col("seq") < 1)
        | F.col("chunk").isNull()
        | (F.col("chunk") < 1)
        | (F.col("chunk") > MAX_CHUNKS)
        | F.col("last_chunk").isNull()
    )
    row_local = row_local_reason()
    return (
        F.when(row_local.isNotNull(), row_local)
        .when(unknown_segment, Quarantine.UNKNOWN_SEGMENT.value)
        .when(invalid_sequence, Quarantine.INVALID_SEQUENCE.value)
    )


def origin_decisions(
    sequenced: DataFrame, origins0: DataFrame, pending0: DataFrame, segments: dict[str, dict[int, Segment]]
) -> DataFrame:
    """Per origin with marks in the round or chunks waiting in ``pending0``: ``arrived`` (it has marks in the
    round; one without is untouched by it, as in core, and never dense), ``dense`` (see :func:`advance_origins`),
    its committed sequence, when dense the end of its gap-free prefix, ``arrivals_wait``: a mark of the round has
    a number past that end (it waits in the pending state), and ``pending_waits``: so has a chunk of
    ``pending0`` (it keeps waiting). Committed 3, sequences 4 5 7 arriving and 9 waiting: prefix end 5, both
    wait.

    One scan of the marks and fixed-width aggregates only (no per-origin lists, which Spark sorts once an
    aggregation holds more than a few hundred groups). Each sequence number sets bit ``seq - committed - 1``
    of a 64-bit word (word ``(seq - committed - 1) div 64``); a word's mark count above its bit count is a
    duplicate; the prefix ends at the first unset bit: committed 3, sequences 4 5 7 -> word 0 = ``0b1011``
    -> 5. The checks of a mark's stream, key and writer are made once per origin, those of its position
    (offsets, unknown segments) on its exploded positions in the same aggregation, where they are scalar
    comparisons and a lookup in the segments' literal (:func:`~spark_jobs.controller.marks.known_segment_sql`; a
    broadcast join would be a Spark job of its own).
    """
    committed_seq = F.coalesce("committed_seq", F.lit(0).cast(LongType()))
    committed = F.broadcast(origins0.select(*ORIGIN_KEYS, "committed_seq"))
    lone = (F.col("chunk") == 1) & F.col("last_chunk")
    valid_numbers = F.col("seq").isNotNull() & F.col("chunk").isNotNull() & F.col("last_chunk").isNotNull()
    clean = row_local_reason(cheap_only=True).isNull() & F.coalesce(valid_numbers & lone, F.lit(False))
    known = is_known(segments)
    # one row per mark and segment (one for a mark without any); its first row counts the mark, and a later
    # one is kept only when its segment or offset is bad (else it adds nothing the first row does not)
    good_position = F.col("segment_id").isNull() | (known & (F.col("offset") >= 0))
    first_row = F.col("pos").isNull() | (F.col("pos") == 0)
    arrivals = (
        sequenced.select(
            *ORIGIN_KEYS,
            "seq",
            clean.alias("clean"),
            F.posexplode_outer("position").alias("pos", "segment_id", "offset"),
        )
        .where(first_row | ~F.coalesce(good_position, F.lit(False)))
        .select(
            *ORIGIN_KEYS,
            "seq",
            (F.col("clean") & F.coalesce(good_position, F.lit(False))).alias("clean"),
            F.lit(1).alias("arrived"),
            F.when(first_row, 1).otherwise(0).alias("first"),
        )
    )
    numbers = (
        arrivals.unionByName(
            pending0.select(
                *ORIGIN_KEYS, "seq", lone.alias("clean"), F.lit(0).alias("arrived"), F.lit(1).alias("first")
            )
        )
        .join(committed, ORIGIN_KEYS, "left")
        .select(
            *ORIGIN_KEYS,
            committed_seq.alias("committed_seq"),
            # null for a number below 1 (not clean), so that no number can overflow
            F.when(F.col("seq") >= 1, F.col("seq") - committed_seq - 1).alias("bit"),
            "clean",
            "arrived",
            "first",
        )
    )
    in_reach = (F.col("bit") >= 0) & (F.col("bit") < F.lit(MAX_PENDING_SEQUENCES))
    words = numbers.groupBy(*ORIGIN_KEYS, "committed_seq", F.floor(F.col("bit") / 64).alias("word")).agg(
        F.min(F.coalesce(F.col("clean") & in_reach, F.lit(False)).cast("int")).alias("clean"),
        F.max("arrived").alias("arrived"),
        F.max(F.when(F.col("arrived") == 1, F.col("bit"))).alias("last_arrival"),
        F.max(F.when(F.col("arrived") == 0, F.col("bit"))).alias("last_pending"),
        F.sum("first").alias("marks"),
        F.bit_or(F.when(in_reach, F.expr("shiftleft(CAST(1 AS BIGINT), CAST(pmod(bit, 64) AS INT))"))).alias("bits"),
    )
    full = F.col("bits") == F.lit(-1)
    per_origin = words.groupBy(*ORIGIN_KEYS, "committed_seq").agg(
        F.min("clean").alias("clean"),
        F.max("arrived").alias("arrived"),
        F.max("last_arrival").alias("last_arrival"),
        F.max("last_pending").alias("last_pending"),
        (F.sum("marks") == F.sum(F.bit_count(F.coalesce("bits", F.lit(0))))).alias("distinct"),
        F.collect_list(F.when(full, F.col("word"))).alias("full_words"),
        # no entry for a null word (a mark without a number: not clean)
        F.map_from_entries(F.collect_list(F.when(F.col("word").isNotNull(), F.struct("word", "bits")))).alias("words"),
    )
    valid_keys = F.col("stream").rlike(STREAM_NAME_REGEX) & ~invalid_key()
    arrived = F.col("arrived") == 1
    dense = arrived & (F.col("clean") == 1) & F.col("distinct") & valid_keys
    # the first word that is not full, and the first unset bit in it (the trailing ones of its bits)
    first_open = F.array_min(
        F.array_except(F.sequence(F.lit(0).cast(LongType()), F.size("full_words").cast(LongType())), "full_words")
    )
    open_bits = F.coalesce(F.try_element_at("words", first_open), F.lit(0).cast(LongType()))
    # bits 0-62 set (63 sequences in a row): open_bits + 1 would overflow
    all_but_top = F.lit(2**63 - 1).cast(LongType())
    trailing_ones = F.when(open_bits == all_but_top, 63).otherwise(F.bit_count(open_bits.bitwiseXOR(open_bits + 1)) - 1)
    prefix_end = F.col("committed_seq") + first_open * 64 + trailing_ones

    def waits(last_bit: str) -> Column:  # a number past the prefix end (null bits: none, or not dense)
        return F.coalesce(F.col("committed_seq") + F.col(last_bit) + 1 > F.col("prefix_end"), F.lit(False))

    return per_origin.select(
        *ORIGIN_KEYS,
        "committed_seq",
        arrived.alias("arrived"),
        F.coalesce(dense, F.lit(False)).alias("dense"),
        F.when(dense, prefix_end).alias("prefix_end"),
        "last_arrival",
        "last_pending",
    ).select(
        *ORIGIN_KEYS,
        "committed_seq",
        "arrived",
        "dense",
        "prefix_end",
        waits("last_arrival").alias("arrivals_wait"),
        waits("last_pending").alias("pending_waits"),
    )


def exact_origins(
    sequenced: DataFrame, origins0: DataFrame, pending0: DataFrame, segments: dict[str, dict[int, Segment]]
) -> Progress:
    """The exact path: window functions in arrival order, for origins that are not dense.

    Arrival order is (pending first, report time, chunk, time); the first of duplicates is kept. The small
    frames that several steps read are checkpointed once (the marks with their reasons, the waiting chunks of
    the origins the round touches, the surviving chunks with whether they are released), so that no step runs
    their joins again: each broadcast join re-run is a Spark job of its own.
    """
    spark = sequenced.sparkSession
    shuffle_partitions = spark.conf.get("spark.sql.shuffle.partitions")
    # per-sequence aggregations and sorts can be as large as the marks themselves: not the small frames the
    # rest of the round sizes its shuffles for (restored below)
    spark.conf.set("spark.sql.shuffle.partitions", str(max(64, int(shuffle_partitions or 0))))
    try:
        return _exact_origins(sequenced, origins0, pending0, segments)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))


def _exact_origins(
    sequenced: DataFrame, origins0: DataFrame, pending0: DataFrame, segments: dict[str, dict[int, Segment]]
) -> Progress:
    committed = F.broadcast(origins0.select(*ORIGIN_KEYS, "committed_seq"))
    committed_seq = F.coalesce("committed_seq", F.lit(0).cast(LongType()))
    # each mark with its origin's committed sequence and its reason (its own checks first, then its number against
    # the committed one), checkpointed: every output below reads it
    checked = (
        sequenced.withColumn("origin_id", F.coalesce("origin_id", F.lit("")))
        .join(committed, ORIGIN_KEYS, "left")
        .withColumn("committed_seq", committed_seq)
        .withColumn("local_reason", sequence_reason(segments))
        .withColumn(
            "reason",
            F.when(F.col("local_reason").isNotNull(), F.col("local_reason"))
            .when(F.col("seq") <= F.col("committed_seq"), Quarantine.SEQUENCE_ALREADY_COMMITTED.value)
            .when(
                F.col("seq") > F.col("committed_seq") + F.lit(MAX_PENDING_SEQUENCES),
                Quarantine.SEQUENCE_TOO_FAR_AHEAD.value,
            ),
        )
        .withColumn("is_new", F.lit(1))
        .localCheckpoint()
    )
    marks_columns = MARKS_SCHEMA.fieldNames()
    touched = checked.where(F.col("local_reason").isNull()).select(*ORIGIN_KEYS).distinct()
    # the waiting chunks of the origins the round touches (checkpointed: three of the steps below read them)
    old = (
        pending0.join(F.broadcast(touched), ORIGIN_KEYS, "left_semi")
        .join(committed, ORIGIN_KEYS, "left")
        .withColumn("committed_seq", committed_seq)
        .withColumn("reason", F.lit(None).cast(StringType()))
        .withColumn("is_new", F.lit(0))
        .localCheckpoint()
    )
    columns = [*PENDING_STATE_SCHEMA.fieldNames(), "committed_seq", "reason", "is_new"]
    seq_keys = [*ORIGIN_KEYS, "seq"]
    accepted_new = checked.where(F.col("reason").isNull()).select(*columns)
    # Fast path: a one-chunk sequence (chunk 1, last) seen once in the round and not waiting in the state
    # cannot conflict with anything. The other sequences (usually few) and their waiting chunks take the
    # exact path: window functions in arrival order. The split is decided on narrow columns, in one aggregation
    # of the round's chunks and the waiting ones of the origins it touches.
    lone = ((F.col("chunk") == 1) & F.col("last_chunk")).cast("int")
    per_seq = (
        accepted_new.select(*seq_keys, "chunk", "last_chunk", "is_new")
        .unionByName(old.select(*seq_keys, "chunk", "last_chunk", "is_new"))
        .groupBy(*seq_keys)
        .agg(
            F.sum("is_new").alias("rows"),
            F.min(F.when(F.col("is_new") == 1, lone)).alias("lone"),
            F.min("is_new").alias("all_new"),
        )
    )
    slow_keys = (
        per_seq.where((F.col("rows") > 1) | ((F.col("rows") == 1) & ((F.col("lone") == 0) | (F.col("all_new") == 0))))
        .select(*seq_keys)
        .withColumn("slow", F.lit(True))
        .localCheckpoint()
    )
    routed = accepted_new.join(F.broadcast(slow_keys), seq_keys, "left")
    fast = routed.where(F.col("slow").isNull()).drop("slow")
    slow = routed.where(F.col("slow").isNotNull()).drop("slow")
    arrived = old.join(F.broadcast(slow_keys), seq_keys, "left_semi").select(*columns).unionByName(slow)
    untouched_pending = old.join(F.broadcast(slow_keys), seq_keys, "left_anti").select(*columns)
    order = [F.col("is_new"), F.col("reported_at_ms"), F.col("chunk"), F.col("time_ms")]
    by_chunk = Window.partitionBy(*seq_keys, "chunk").orderBy(*order)
    by_last = Window.partitionBy(*seq_keys, "last_chunk").orderBy(*order)
    by_seq = Window.partitionBy(*seq_keys)
    if slow_keys.isEmpty():  # the common case: every sequence of the round takes the fast path
        arrived = arrived.limit(0)
    # one shuffle by sequence serves the three windows (each partitions by the sequence, or by it and more)
    deduped = arrived.repartition(*seq_keys).withColumn("dup", F.row_number().over(by_chunk) > 1)
    first = deduped.where(~F.col("dup"))
    lasts = first.withColumn("extra_last", F.col("last_chunk") & (F.row_number().over(by_last) > 1))
    kept_last = lasts.withColumn(
        "last_number", F.max(F.when(F.col("last_chunk") & ~F.col("extra_last"), F.col("chunk"))).over(by_seq)
    )
    decided = (
        deduped.where(F.col("dup"))
        .withColumn("reason", F.lit(Quarantine.DUPLICATE_CHUNK.value))
        .withColumn("extra_last", F.lit(False))
        .withColumn("last_number", F.lit(None).cast(LongType()))
        .unionByName(
            kept_last.withColumn(
                "reason",
                F.when(F.col("extra_last"), Quarantine.DUPLICATE_LAST_CHUNK.value).when(
                    ~F.col("last_chunk") & (F.col("chunk") > F.col("last_number")), Quarantine.CHUNK_AFTER_LAST.value
                ),
            )
        )
        .drop("dup")
        .localCheckpoint()
    )
    own_last = F.when(F.col("last_chunk"), F.col("chunk")).alias("last_number")
    # the chunks that are not fast and survived: checked ones and the waiting ones of untouched sequences
    others = (
        decided.where(F.col("reason").isNull())
        .select(*columns, "last_number")
        .unionByName(untouched_pending.select(*columns, own_last))
    )
    other_sequences = others.groupBy(*seq_keys, "committed_seq").agg(
        F.count("*").alias("chunks"), F.max("last_number").alias("last_number")
    )
    complete = (
        other_sequences.where(F.col("last_number").isNotNull() & (F.col("chunks") == F.col("last_number")))
        .select(*seq_keys, "committed_seq")
        .unionByName(fast.select(*seq_keys, "committed_seq"))
    )
    # released = the complete sequences continuing the committed one without a gap: seq - rank == committed
    rank = F.row_number().over(Window.partitionBy(*ORIGIN_KEYS).orderBy("seq"))
    prefix_ends = (
        complete.withColumn("gap", F.col("seq") - rank)
        .where(F.col("gap") == F.col("committed_seq"))
        .groupBy(*ORIGIN_KEYS)
        .agg(F.max("seq").alias("prefix_end"))
        .localCheckpoint()
    )  # one row per origin that advanced
    # every surviving chunk (fast or not) with whether its origin's prefix now covers it, computed once: the
    # released marks and the next pending state both read it (their broadcast joins ran once per reader before)
    marked = (
        fast.select(*columns, F.lit(True).alias("fast"))
        .unionByName(others.select(*columns, F.lit(False).alias("fast")))
        .join(F.broadcast(prefix_ends), ORIGIN_KEYS, "left")
        .select(
            *columns,
            "fast",
            (F.col("prefix_end").isNotNull() & (F.col("seq") <= F.col("prefix_end"))).alias("released"),
        )
        .localCheckpoint()
    )
    progress_nulls = [F.lit(None).cast(MARKS_SCHEMA[c].dataType).alias(c) for c in PROGRESS_COLUMNS]
    released_fast = marked.where(F.col("fast") & F.col("released")).select(
        "stream", "writer_id", "time_ms", "position", "kind", "reported_at_ms", *progress_nulls, "wm_key"
    )
    released_rows = marked.where(~F.col("fast") & F.col("released"))
    per_segment = (
        released_rows.select(*seq_keys, F.explode("position").alias("segment_id", "offset"))
        .groupBy(*seq_keys, "segment_id")
        .agg(F.max("offset").alias("offset"))
        .groupBy(*seq_keys)
        .agg(F.map_from_entries(F.collect_list(F.struct("segment_id", "offset"))).alias("merged"))
    )
    released = (
        released_rows.groupBy(*seq_keys)
        .agg(
            F.max("time_ms").alias("time_ms"),
            F.max("reported_at_ms").alias("reported_at_ms"),
            F.max((F.col("kind") == MarkKind.COMMIT.value).cast("int")).alias("has_commit"),
        )
        .join(per_segment, seq_keys, "left")
        .select(
            "stream",
            "writer_id",
            "time_ms",
            F.coalesce("merged", F.create_map().cast(POSITION)).alias("position"),
            F.when(F.col("has_commit") == 1, MarkKind.COMMIT.value).otherwise(MarkKind.NOTE.value).alias("kind"),
            "reported_at_ms",
            *progress_nulls,
            "wm_key",
        )
        .unionByName(released_fast)
    )
    origins = (
        origins0.join(prefix_ends, ORIGIN_KEYS, "full")
        .select(
            *ORIGIN_KEYS,
            F.greatest(F.coalesce("committed_seq", F.lit(0)), F.coalesce("prefix_end", F.lit(0)))
            .cast(LongType())
            .alias("committed_seq"),
        )
        .where(F.col("committed_seq") > 0)
    )
    pending_columns = PENDING_STATE_SCHEMA.fieldNames()
    pending = (
        pending0.join(F.broadcast(touched), ORIGIN_KEYS, "left_anti")
        .select(*pending_columns)
        .unionByName(marked.where(~F.col("released")).select(*pending_columns))
    )
    as_mark: list[Column | str] = [
        *[c for c in marks_columns if c not in ("origin_id", "wm_key")],
        F.when(F.col("origin_id") != "", F.col("origin_id")).alias("origin_id"),
        nullable_key(),
        "reason",
    ]
    bad = (
        checked.where(F.col("reason").isNotNull())
        .select(*as_mark)
        .unionByName(decided.where(F.col("reason").isNotNull()).select(*as_mark))
    )
    return Progress(released, bad, touched.select(*KEYS), origins, pending)
