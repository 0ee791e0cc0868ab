"""The one exception for bad input: the library's kvplan::InputError, raised by kvplan._core's translator."""

from __future__ import annotations

from collections.abc import Sequence


class InputError(ValueError):
    """Something the caller (or a data file) got wrong; the CLI's exit code 2.

    ``str(error)`` is the CLI's message without its ``kvplan:`` prefix. ``field`` names the option as the
    CLI spells it (``--cache-type-k``) or a data file position (``file.yaml:12``); ``keyword`` is the
    keyword argument of :func:`kvplan.plan` for that option, when there is one.
    """

    field: str
    value: str
    problem: str
    accepted: list[str]
    suggestion: str | None

    def __init__(self, message: str, field: str, value: str, problem: str, accepted: Sequence[str] = (),
                 suggestion: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.problem = problem
        self.accepted = list(accepted)
        self.suggestion = suggestion or None

    @property
    def keyword(self) -> str | None:
        """The keyword argument of kvplan.plan() this error is about (``cache_type_k``), or None."""
        from ._request import KEYWORD_OF_FLAG
        return KEYWORD_OF_FLAG.get(self.field)

    def to_dict(self) -> dict[str, object]:
        """The error as `kvplan --json` prints it on bad input (the "error" of schema/plan.schema.json's $defs/error)."""
        return {"field": self.field, "value": self.value, "problem": self.problem, "accepted": list(self.accepted),
                "suggestion": self.suggestion, "message": str(self)}

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str, str, str, list[str], str]]:
        return (type(self), (str(self), self.field, self.value, self.problem, self.accepted, self.suggestion or ""))
