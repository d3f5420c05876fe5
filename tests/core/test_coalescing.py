"""Watermark coalescing (Jet): the rule over snapshots, and Jet's message-by-message vectors, idle, done, keys,
errors and properties replayed through it (tests/core/jet_coalescer.py)."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_wm.core.coalescing import (
    CoalesceResult,
    InputSeen,
    WatermarkCheck,
    check_watermarks,
    coalesce,
)
from tests.core.jet_coalescer import DEFAULT_KEY, Coalescer, InputDone, NonIncreasingWatermark

# --- worked examples --------------------------------------------------------------------------------------


def test_example_1_the_last_input_going_idle_emits_the_highest_watermark_and_reports_all_idle():
    c = Coalescer(2)
    assert c.watermark(0, 10) is None
    assert c.watermark(1, 11) == 10
    assert c.idle(1) == {}
    assert not c.all_idle
    assert c.idle(0) == {DEFAULT_KEY: 11}
    assert c.all_idle and c.output() == 11


def test_example_2_a_recovered_input_without_a_watermark_holds_the_output_back_until_it_produces_one():
    c = Coalescer(2)
    assert c.idle(0) == {}
    assert c.watermark(1, 11) == 11
    assert c.event(0) is None
    assert not c.is_idle(0)
    assert c.watermark(1, 12) is None
    assert c.status().waiting == [0]
    assert c.watermark(0, 13) == 12


def test_jet_example_the_output_is_the_minimum_and_only_emitted_when_it_rises():
    c = Coalescer(2)
    steps = [(0, 10, None), (1, 12, 10), (0, 11, 11), (1, 13, None), (0, 14, 13)]
    for input, value, expected in steps:
        assert c.watermark(input, value) == expected
    assert c.output() == 13


# --- idle ---------------------------------------------------------------------------------------------------


def test_an_idle_input_is_excluded_from_the_minimum():
    c = Coalescer(3)
    c.watermark(0, 5)
    c.watermark(1, 7)
    c.watermark(2, 9)
    assert c.output() == 5
    assert c.idle(0) == {DEFAULT_KEY: 7}
    assert c.status().excluded == [0]


def test_a_recovered_input_holds_the_output_back_at_its_old_value_until_it_advances():
    c = Coalescer(2)
    c.watermark(0, 10)
    c.watermark(1, 11)
    c.idle(0)
    assert c.watermark(1, 20) == 20
    c.event(0)  # back at 10: the minimum is 10, the output stays at 20
    assert c.watermark(1, 30) is None
    assert c.watermark(0, 15) is None
    assert c.watermark(0, 25) == 25
    assert c.output() == 25


def test_a_watermark_of_any_key_clears_idleness_for_all_keys():
    c = Coalescer(2)
    c.watermark(0, 1, key="a")
    c.idle(0)
    assert c.watermark(1, 5, key="a") == 5
    assert c.watermark(0, 100, key="b") is None  # input 0 is active again, for key "a" too, at 1
    assert not c.is_idle(0)
    assert c.watermark(1, 6, key="a") is None
    assert c.watermark(0, 7, key="a") == 6


def test_an_event_on_an_active_input_changes_nothing():
    c = Coalescer(2)
    c.watermark(0, 1)
    before = c.snapshot()
    c.event(0)
    assert c.snapshot() == before


def test_idle_twice_is_harmless():
    c = Coalescer(2)
    c.watermark(0, 1)
    c.watermark(1, 2)
    assert c.idle(0) == {DEFAULT_KEY: 2}
    assert c.idle(0) == {}


def test_all_idle_emits_nothing_when_the_highest_watermark_is_not_above_the_last_output():
    c = Coalescer(2)
    c.watermark(0, 10)
    c.watermark(1, 10)
    assert c.idle(0) == {}
    assert c.idle(1) == {}
    assert c.all_idle and c.output() == 10


def test_an_event_ending_all_idle_emits_nothing_the_output_already_is_the_highest():
    c = Coalescer(2)
    c.watermark(0, 1)
    c.idle(0)
    c.idle(1)  # input 1 has no watermark: the highest observed is 1
    assert c.output() == 1
    assert c.event(0) is None
    assert c.status() == CoalesceResult(1, False, False, [1], [])


def test_recovering_from_all_idle_holds_the_output_at_the_highest_until_the_minimum_passes_it():
    c = Coalescer(2)
    c.watermark(0, 10)
    c.watermark(1, 20)
    c.idle(0)
    c.idle(1)
    assert c.output() == 20
    c.event(0)
    assert not c.all_idle
    assert c.watermark(0, 15) is None
    assert c.watermark(0, 21) == 21


def test_all_idle_reports_each_key_at_its_own_highest_watermark():
    c = Coalescer(2)
    c.watermark(0, 1, key="a")
    c.watermark(1, 9, key="a")
    c.watermark(0, 50, key="b")
    c.watermark(1, 40, key="b")
    assert (c.output("a"), c.output("b")) == (1, 40)
    assert c.idle(0) == {"a": 9}
    assert c.idle(1) == {"b": 50}  # "a" is already at its highest, 9
    assert c.output("a") == 9


# --- done ---------------------------------------------------------------------------------------------------


def test_a_done_input_counts_as_infinity():
    c = Coalescer(2)
    c.watermark(0, 10)
    c.watermark(1, 12)
    assert c.done(0) == {DEFAULT_KEY: 12}
    assert c.watermark(1, 13) == 13
    assert c.is_done(0) and not c.all_done


def test_a_done_input_without_a_watermark_holds_nothing_back():
    c = Coalescer(2)
    c.watermark(1, 5)
    assert c.done(0) == {DEFAULT_KEY: 5}


def test_when_all_inputs_are_done_nothing_more_is_emitted():
    c = Coalescer(2)
    c.watermark(0, 10)
    c.watermark(1, 12)
    c.done(0)
    assert c.done(1) == {}
    assert c.all_done and not c.all_idle
    assert c.output() == 12
    assert c.status() == CoalesceResult(12, False, False, [0, 1], [])


def test_the_others_idle_and_the_rest_done_is_all_idle():
    c = Coalescer(3)
    c.watermark(0, 10)
    c.watermark(1, 30)
    c.watermark(2, 20)
    c.done(1)
    assert c.output() == 10
    c.idle(0)
    assert c.idle(2) == {DEFAULT_KEY: 30}  # the highest observed includes the done input's last watermark
    assert c.all_idle


def test_done_clears_idleness():
    c = Coalescer(2)
    c.idle(0)
    c.done(0)
    assert not c.is_idle(0) and c.is_done(0)


@pytest.mark.parametrize(
    "message", [lambda c: c.watermark(1, 1), lambda c: c.event(1), lambda c: c.idle(1), lambda c: c.done(1)]
)
def test_a_done_input_takes_no_more_messages(message):
    c = Coalescer(2)
    c.done(1)
    with pytest.raises(InputDone, match="input 1 is done"):
        message(c)


# --- keys ---------------------------------------------------------------------------------------------------


def test_keys_are_coalesced_independently():
    c = Coalescer(2)
    assert c.watermark(0, 10, key="orders") is None
    assert c.watermark(1, 100, key="deliveries") is None
    assert c.watermark(1, 12, key="orders") == 10
    assert c.watermark(0, 90, key="deliveries") == 90
    assert c.watermark(0, 11, key="orders") == 11
    assert (c.output("orders"), c.output("deliveries"), c.output()) == (11, 90, None)
    assert c.keys == ("orders", "deliveries")


def test_a_key_seen_on_one_input_only_waits_for_the_other():
    c = Coalescer(2)
    c.watermark(0, 10, key="left")
    assert c.output("left") is None
    assert c.status("left").waiting == [1]


def test_idle_and_done_return_the_emissions_of_every_key():
    c = Coalescer(2)
    c.watermark(0, 1, key="a")
    c.watermark(0, 2, key="b")
    c.watermark(1, 5, key="a")
    c.watermark(1, 6, key="b")
    assert c.done(0) == {"a": 5, "b": 6}


# --- errors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [10, 9])
def test_a_non_increasing_watermark_is_an_error_naming_input_key_value_and_previous(value):
    c = Coalescer(2)
    c.watermark(1, 10, key="k")
    before = c.snapshot()
    with pytest.raises(NonIncreasingWatermark, match=rf"input 1, key 'k': watermark {value} .* previous 10") as err:
        c.watermark(1, value, key="k")
    assert (err.value.input, err.value.key, err.value.value, err.value.previous) == (1, "k", value, 10)
    assert isinstance(err.value, ValueError)
    assert c.snapshot() == before


def test_a_non_increasing_watermark_on_an_idle_input_leaves_it_idle():
    c = Coalescer(2)
    c.watermark(0, 10)
    c.idle(0)
    with pytest.raises(NonIncreasingWatermark):
        c.watermark(0, 3)
    assert c.is_idle(0)


def test_the_same_value_on_another_key_or_input_is_fine():
    c = Coalescer(2)
    c.watermark(0, 10)
    c.watermark(0, 10, key="other")
    assert c.watermark(1, 10) == 10


def test_errors_survive_pickling():
    for error in (NonIncreasingWatermark(0, "k", 1, 2), InputDone(3)):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Coalescer(0), "inputs=0 must be a positive int"),
        (lambda: Coalescer(True), "inputs=True must be a positive int"),
        (lambda: Coalescer(2).watermark(2, 1), r"input=2 is not an input index in 0\.\.1"),
        (lambda: Coalescer(2).idle(-1), r"input=-1 is not an input index"),
        (lambda: Coalescer(2).watermark(0, 1.5), "value=1.5 must be an int"),  # type: ignore[arg-type]
        (lambda: Coalescer(2).watermark(0, True), "value=True must be an int"),
        (lambda: Coalescer(2).watermark(0, 1, key=1), "key=1 must be a str"),  # type: ignore[arg-type]
        (lambda: coalesce({}), "names no input"),
        (lambda: coalesce({"a": 1}, idle={"b"}), r"idle=\['b'\] names inputs that have no entry"),
        (lambda: coalesce({"a": 1}, idle={"a"}, done={"a"}), "both idle and done"),
        (lambda: coalesce({"a": "1"}), "must be ints"),  # type: ignore[dict-item]
        (lambda: coalesce({"a": 1}, last_output=1.0), "last_output=1.0 must be an int"),  # type: ignore[arg-type]
        (lambda: coalesce({"a": 1}, all_idle_policy="never"), "all_idle_policy='never'"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_are_rejected_with_a_clear_message(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- the one-shot rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("watermarks", "idle", "last", "policy", "expected"),
    [
        ({"a": 10, "b": 12}, set(), None, "highest", CoalesceResult(10, True, False, [], [])),
        ({"a": 10, "b": 12}, set(), 10, "highest", CoalesceResult(10, False, False, [], [])),
        ({"a": 10, "b": None}, set(), None, "highest", CoalesceResult(None, False, False, [], ["b"])),
        ({"a": 10, "b": None}, {"b"}, 5, "highest", CoalesceResult(10, True, False, ["b"], [])),
        ({"a": 10, "b": 12}, {"a", "b"}, 10, "highest", CoalesceResult(12, True, True, ["a", "b"], [])),
        ({"a": 10, "b": 12}, {"a", "b"}, 10, "wait", CoalesceResult(10, False, True, ["a", "b"], [])),
        ({"a": None, "b": None}, {"a", "b"}, None, "highest", CoalesceResult(None, False, True, ["a", "b"], [])),
        ({"a": 4, "b": 12}, {"b"}, 10, "highest", CoalesceResult(10, False, False, ["b"], [])),
    ],
)
def test_coalesce_applies_the_rule_to_a_snapshot_of_named_inputs(watermarks, idle, last, policy, expected):
    assert coalesce(watermarks, idle, last, policy) == expected


def test_coalesce_with_every_input_done_emits_nothing():
    assert coalesce({"a": 3, "b": 4}, done={"a", "b"}, last_output=2) == CoalesceResult(2, False, False, ["a", "b"], [])


def test_coalesce_accepts_any_collection_of_names():
    assert coalesce({0: 1, 1: 2}, [1], None).value == 1


# --- snapshots ----------------------------------------------------------------------------------------------


def test_a_snapshot_is_json_and_restores_the_same_state():
    c = Coalescer(3)
    c.watermark(0, 10, key="a")
    c.watermark(1, 12, key="a")
    c.watermark(2, 11, key="a")
    c.idle(1)
    c.done(2)
    data = json.loads(json.dumps(c.snapshot()))
    assert data == {
        "version": 1,
        "inputs": 3,
        "idle": [1],
        "done": [2],
        "keys": {"a": {"watermarks": [10, 12, 11], "output": 10}},
    }
    restored = Coalescer.from_snapshot(data)
    assert restored.snapshot() == c.snapshot()
    assert restored.is_idle(1) and restored.is_done(2) and restored.output("a") == 10
    assert restored.watermark(0, 13, key="a") == 13


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": 2}, "snapshot version 2 is not 1"),
        ({"inputs": 0}, "inputs=0 must be a positive int"),
        ({"idle": [5]}, r"snapshot idle=\[5\] must be a list of input indices in 0\.\.1"),
        ({"idle": [0], "done": [0]}, r"snapshot inputs \[0\] are both idle and done"),
        ({"keys": []}, "snapshot keys=.* must map each key"),
        ({"keys": {"a": {"watermarks": [1], "output": None}}}, "snapshot key 'a'"),
        ({"keys": {"a": {"watermarks": [1, None], "output": "x"}}}, "snapshot key 'a'"),
    ],
)
def test_a_bad_snapshot_is_rejected(change, message):
    data = {**Coalescer(2).snapshot(), **change}
    with pytest.raises(ValueError, match=message):
        Coalescer.from_snapshot(data)


# --- properties ---------------------------------------------------------------------------------------------

KEYS = ("a", "b")
RAW_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("wm"), st.integers(0, 3), st.sampled_from(KEYS), st.integers(1, 6)),
        st.tuples(st.sampled_from(["idle", "idle", "event", "done"]), st.integers(0, 3)),
    ),
    max_size=60,
)
POLICIES = st.sampled_from(["highest", "wait"])  # the one-shot rule's; a Coalescer always uses "highest"


def valid_ops(inputs, raw):
    """Raw ops made valid: inputs modulo ``inputs``, watermark steps turned into strictly increasing values
    per (input, key), and nothing after an input's done."""
    ops = []
    last: dict[tuple[int, str], int] = {}
    done: set[int] = set()
    for op in raw:
        input = op[1] % inputs
        if input in done:
            continue
        if op[0] == "wm":
            value = last.get((input, op[2]), 0) + op[3]
            last[(input, op[2])] = value
            ops.append(("wm", input, op[2], value))
        else:
            done |= {input} if op[0] == "done" else set()
            ops.append((op[0], input))
    return ops


def apply(c, op):
    """One op; returns what it emitted, per key."""
    if op[0] == "wm":
        value = c.watermark(op[1], op[3], key=op[2])
        return {} if value is None else {op[2]: value}
    if op[0] == "event":
        assert c.event(op[1]) is None
        return {}
    return c.idle(op[1]) if op[0] == "idle" else c.done(op[1])


def run(c, ops):
    return [apply(c, op) for op in ops]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), RAW_OPS)
def test_every_emission_is_strictly_increasing_and_bounded_by_the_active_inputs(inputs, raw):
    """Each emitted output is higher than the key's last, and equal to the minimum of the non-idle, not-done
    inputs' current watermarks (so at most each of them); in the all-idle case it is the highest observed."""
    c = Coalescer(inputs)
    last: dict[str, int] = {}
    for op in valid_ops(inputs, raw):
        for key, value in apply(c, op).items():
            assert key not in last or value > last[key]
            last[key] = value
            assert c.output(key) == value
            currents = [c.current(i, key) for i in range(inputs)]
            active = [currents[i] for i in range(inputs) if not c.is_idle(i) and not c.is_done(i)]
            if c.all_idle:
                assert value == max(w for w in currents if w is not None)
            else:
                assert None not in active
                assert all(value <= w for w in active)
                assert value == min(active)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), RAW_OPS)
def test_the_output_is_never_behind_and_the_state_is_always_settled(inputs, raw):
    """After every op, re-applying the rule emits nothing, and the output is at least the minimum of the
    active inputs when they all have a watermark (at least the highest observed when all are idle)."""
    c = Coalescer(inputs)
    for op in valid_ops(inputs, raw):
        apply(c, op)
        for key in c.keys:
            assert not c.status(key).emitted
            currents = [c.current(i, key) for i in range(inputs)]
            active = [currents[i] for i in range(inputs) if not c.is_idle(i) and not c.is_done(i)]
            if active and None not in active:
                assert c.output(key) is not None and c.output(key) >= min(active)
            if c.all_idle:
                assert c.output(key) is not None and c.output(key) >= max(w for w in currents if w is not None)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), RAW_OPS)
def test_keys_are_independent(inputs, raw):
    """Interleaving two keys gives per key the same outputs, at the same steps, as running that key alone,
    where the other key's watermarks are only events of their input (they clear its idleness)."""
    ops = valid_ops(inputs, raw)
    together = run(Coalescer(inputs), ops)
    for key in KEYS:
        alone_ops = [op if op[0] != "wm" or op[2] == key else ("event", op[1]) for op in ops]
        alone = run(Coalescer(inputs), alone_ops)
        assert [step.get(key) for step in together] == [step.get(key) for step in alone]
        assert all(set(step) <= {key} for step in alone)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), RAW_OPS, st.integers(0, 60))
def test_a_snapshot_round_trip_preserves_behaviour(inputs, raw, cut):
    ops = valid_ops(inputs, raw)
    cut = min(cut, len(ops))
    original = Coalescer(inputs)
    run(original, ops[:cut])
    restored = Coalescer.from_snapshot(json.loads(json.dumps(original.snapshot())))
    assert restored.snapshot() == original.snapshot()
    assert run(restored, ops[cut:]) == run(original, ops[cut:])
    assert restored.snapshot() == original.snapshot()
    assert (restored.all_idle, restored.all_done) == (original.all_idle, original.all_done)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from("pqrst"), st.none() | st.integers(-5, 20), min_size=1),
    st.sets(st.sampled_from("pqrst")),
    st.sets(st.sampled_from("pqrst")),
    st.none() | st.integers(-5, 20),
    POLICIES,
)
def test_coalesce_never_goes_back(watermarks, idle, done, last, policy):
    idle, done = idle & set(watermarks), (done & set(watermarks)) - idle
    result = coalesce(watermarks, idle, last, policy, done=done)
    if result.emitted:
        assert result.value is not None and (last is None or result.value > last)
    else:
        assert result.value == last
    assert set(result.excluded) == idle | done
    assert result.all_idle == (bool(idle) and len(idle) + len(done) == len(watermarks))


# ------------------------------------------------------------------- the sensor's decision per poke

MINUTE = 60_000


def watermark(lower: int, advanced: int) -> dict:
    return {"lower_ms": lower, "computed_at_ms": advanced}


def test_the_rule_waits_for_the_slowest_input_and_for_inputs_without_a_watermark():
    check = check_watermarks({"a": watermark(30, 30), "b": watermark(20, 20)}, 25)
    assert (check.watermark_ms, check.passed, check.idle, check.all_idle) == (20, False, [], False)
    records = {"a": watermark(30, 30), "b": None}
    check = check_watermarks(records, 25, idle_timeout_ms=1)
    assert (check.watermark_ms, check.passed, check.waiting, check.idle) == (None, False, ["b"], [])
    assert check.inputs["b"] == InputSeen(None, None, False)


def test_the_rule_leaves_out_inputs_that_have_not_advanced_for_the_idle_timeout():
    reference = 100 * MINUTE
    records = {"a": watermark(reference + 1, reference - MINUTE), "b": watermark(5, reference - 10 * MINUTE)}
    check = check_watermarks(records, reference, idle_timeout_ms=10 * MINUTE)
    assert (check.watermark_ms, check.passed, check.idle) == (reference + 1, True, ["b"])
    assert check == WatermarkCheck(
        reference + 1,
        reference,
        False,
        ["b"],
        [],
        {"a": InputSeen(reference + 1, reference - MINUTE, False), "b": InputSeen(5, reference - 10 * MINUTE, True)},
    )
    # one millisecond younger than the timeout: not idle, it holds the output back
    records["b"] = watermark(5, reference - 10 * MINUTE + 1)
    assert check_watermarks(records, reference, idle_timeout_ms=10 * MINUTE).watermark_ms == 5
    # the reference time is the run's logical time, not the threshold, when given
    assert check_watermarks(records, reference, reference_ms=reference + 1, idle_timeout_ms=10 * MINUTE).idle == ["b"]
    # without an idle timeout nothing is idle
    assert check_watermarks(records, reference).idle == []


@pytest.mark.parametrize(("policy", "expected"), [("wait", None), ("highest", 300)])
def test_when_every_input_is_idle_the_policy_decides(policy, expected):
    records = {"a": watermark(300, 0), "b": watermark(200, 0)}
    check = check_watermarks(records, 100, reference_ms=10 * MINUTE, idle_timeout_ms=MINUTE, when_all_idle=policy)
    assert (check.watermark_ms, check.all_idle, check.idle) == (expected, True, ["a", "b"])
    assert check.passed is (expected is not None)
