"""Parse-time argument checks for mapped tasks (``Operator.partial(...).expand(...)``).

Airflow builds the instances of a mapped task only when they run, so the checks an operator's ``__init__``
makes would fail each instance at run time, not the DAG when it is parsed. :class:`ChecksMappedArguments`
makes ``expand`` build, first, the task of every combination of literal values (as the instances will be),
in a DAG of their own with the real DAG's ``default_args``, and discard them: a bad argument given to
``partial`` or ``expand`` fails the DAG's parse with the operator's own message, and a note naming the
mapped values. Values that come from an upstream task (an ``XComArg``) are known only at run time; their
instances are checked then.

Example: ``WindowedAggregateOperator.partial(task_id="w", window="5 minutes", ...).expand(pipeline=["a"])``
fails at parse time with ``window='5 minutes' must be ...`` and the note ``in the mapped task 'w' with
pipeline='a'``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from airflow.sdk import DAG
from airflow.sdk.definitions.mappedoperator import MappedOperator, OperatorPartial
from airflow.sdk.definitions.xcom_arg import XComArg

__all__ = ["MAX_CHECKED_INSTANCES", "CheckedPartial", "ChecksMappedArguments"]

MAX_CHECKED_INSTANCES = 1000
"""How many combinations of mapped values ``expand`` builds at most to check them (the first ones)."""


@attrs.define(kw_only=True, repr=False)
class CheckedPartial(OperatorPartial):
    """Airflow's ``OperatorPartial`` whose ``expand`` first checks the arguments (module docstring). ``given``:
    the arguments given to ``partial``, as its operator's ``partial`` passed them on."""

    given: dict[str, Any] = attrs.field(factory=dict)

    def expand(self, **mapped_kwargs: Any) -> MappedOperator:
        self._expand_called = True  # a check that fails is the DAG's error, not a partial never mapped
        literal = all(_is_literal_list(values) for values in mapped_kwargs.values())
        if mapped_kwargs and literal:
            names = list(mapped_kwargs)
            combinations = itertools.product(*(mapped_kwargs[name] for name in names))
            for values in itertools.islice(combinations, MAX_CHECKED_INSTANCES):
                self._check(dict(zip(names, values, strict=True)))
        return super().expand(**mapped_kwargs)

    def expand_kwargs(self, kwargs: Any, *, strict: bool = True) -> MappedOperator:
        self._expand_called = True
        if isinstance(kwargs, Sequence) and all(
            isinstance(item, Mapping) and all(_is_literal(value) for value in item.values()) for item in kwargs
        ):
            for item in itertools.islice(kwargs, MAX_CHECKED_INSTANCES):
                self._check(dict(item))
        return super().expand_kwargs(kwargs, strict=strict)

    def _check(self, mapped: dict[str, Any]) -> None:
        """Build the task of one combination in a DAG of its own (not the real one), with the real DAG's and task
        group's ``default_args``."""
        arguments = {name: value for name, value in self.given.items() if name not in ("dag", "task_group")}
        dag, group = self.kwargs.get("dag"), self.kwargs.get("task_group")
        default_args = {**(getattr(dag, "default_args", None) or {}), **(getattr(group, "default_args", None) or {})}
        probe = DAG(dag_id="wm_mapped_argument_check", schedule=None, default_args=default_args)
        try:
            self.operator_class(**arguments, **mapped, dag=probe)
        except (ValueError, TypeError) as error:
            shown = ", ".join(f"{name}={value!r}" for name, value in mapped.items())
            error.add_note(f"in the mapped task {self.given.get('task_id')!r} with {shown}")
            raise


class ChecksMappedArguments:
    """Mixed into an operator before ``BaseOperator``: its ``partial`` returns a :class:`CheckedPartial`."""

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        made: OperatorPartial = super().partial(**kwargs)  # type: ignore[misc]
        made._expand_called = True  # replaced by the checked one below: no "never mapped" warning for it
        return CheckedPartial(operator_class=made.operator_class, kwargs=made.kwargs, params=made.params, given=kwargs)


def _is_literal(value: Any) -> bool:
    """A value known at parse time: no ``XComArg`` in it (a template is checked by the operator as it is)."""
    if isinstance(value, XComArg):
        return False
    if isinstance(value, Mapping):
        return all(_is_literal(item) for item in value.values())
    if isinstance(value, (list, tuple, set)):
        return all(_is_literal(item) for item in value)
    return True


def _is_literal_list(values: Any) -> bool:
    return isinstance(values, (list, tuple)) and _is_literal(values)
