"""An approval's JSON Schema rendered as a form, and the form read back into a payload.

Only what a form can say plainly is rendered as fields: a top-level object whose
properties are strings, integers, numbers, booleans, enums or constants. Anything
else (nested objects, arrays, combinators) keeps the raw JSON editor, which is
always there as the fallback. The schema is still the judge: whatever the form
builds is validated against it by the approvals service.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..services.approvals import describe_limits

PREFIX = "field."
SIMPLE_TYPES = ("string", "integer", "number", "boolean")


class FieldError(ValueError):
    """A form value cannot be read as its field's type; `str()` says why, `field` where."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


@dataclass
class Field:
    name: str
    kind: str  # string, integer, number, boolean, enum, const
    value: Any
    title: str
    help: str
    limits: str
    required: bool
    choices: list[Any]
    minimum: Any = None
    maximum: Any = None
    max_length: int | None = None
    display: str = ""  # "cents": show the amount in currency units beside it

    @property
    def input_name(self) -> str:
        return PREFIX + self.name

    @property
    def amount(self) -> str:
        if self.display == "cents" and isinstance(self.value, int):
            # Exact at any size (a float is not past 2**53 cents), as app.js shows it.
            return f"{Decimal(self.value).scaleb(-2):,.2f}"
        return ""


def fields_for(schema: Any, payload: Any) -> list[Field] | None:
    """The form's fields, or None when the schema is more than a form can express."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return None
    values = payload if isinstance(payload, dict) else {}
    required = set(schema.get("required") or [])
    fields = []
    for name, spec in properties.items():
        field = _field(str(name), spec, values.get(name), name in required)
        if field is None:
            return None
        fields.append(field)
    return fields


def _field(name: str, spec: Any, value: Any, required: bool) -> Field | None:
    if not isinstance(spec, dict):
        return None
    if "const" in spec:
        kind, choices = "const", [spec["const"]]
    elif isinstance(spec.get("enum"), list):
        kind, choices = "enum", list(spec["enum"])
    elif spec.get("type") in SIMPLE_TYPES:
        kind, choices = spec["type"], []
    else:
        return None
    return Field(
        name=name,
        kind=kind,
        value=spec["const"] if kind == "const" else value,
        title=str(spec.get("title") or name.replace("_", " ").capitalize()),
        help=str(spec.get("description") or ""),
        limits=describe_limits(spec),
        required=required,
        choices=choices,
        minimum=spec.get("minimum"),
        maximum=spec.get("maximum"),
        max_length=spec.get("maxLength"),
        display=str(spec.get("x-display") or ""),
    )


def payload_from(fields: list[Field], data: Any, original: Any) -> dict[str, Any]:
    """The edited payload: the shown payload with each form field read as its type.

    Keys the schema does not describe keep their shown values, so a form edit
    never silently drops what the reviewer could not see as a field.
    """
    payload = dict(original) if isinstance(original, dict) else {}
    for field in fields:
        raw = data.get(field.input_name)
        if field.kind == "boolean":
            payload[field.name] = raw == "on"
        elif raw == "" and not field.required:
            payload.pop(field.name, None)
        elif raw is not None:
            payload[field.name] = _read(field, raw)
    return payload


def _read(field: Field, raw: str) -> Any:
    if field.kind in ("enum", "const"):
        for choice in field.choices:
            if str(choice) == raw:
                return choice
        raise FieldError(field.name, "choose one of the listed values")
    if field.kind == "integer":
        try:
            return int(raw.strip().replace(",", "").replace("_", ""))
        except ValueError:
            raise FieldError(field.name, f"{raw[:40]!r} is not a whole number") from None
    if field.kind == "number":
        try:
            number = float(raw.strip().replace(",", ""))
        except ValueError:
            raise FieldError(field.name, f"{raw[:40]!r} is not a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise FieldError(field.name, "must be a finite number")
        return number
    return raw


def as_typed(fields: list[Field], data: Any, original: Any) -> dict[str, Any]:
    """The payload with each field as the reviewer typed it, text unread: what a refused
    form shows again, so the reviewer corrects their value rather than retype it."""
    payload = dict(original) if isinstance(original, dict) else {}
    for field in fields:
        raw = data.get(field.input_name)
        if field.kind == "boolean":
            payload[field.name] = raw == "on"
        elif raw is not None:
            payload[field.name] = raw
    return payload


def as_shown(fields: list[Field], original: Any) -> Any:
    """The payload the untouched form reads back as (what a browser submits for it,
    see templates/durableruns/inbox.html), so "did the reviewer change anything" is
    not fooled by a select showing its first choice or an unset checkbox."""
    try:
        return payload_from(fields, {f.input_name: v for f in fields if (v := _shown(f))}, original)
    except FieldError:  # a recorded value the form cannot show as its type
        return original


def _shown(field: Field) -> str | None:
    if field.kind == "boolean":
        return "on" if field.value else None
    if field.kind == "enum" and field.value not in field.choices:
        return str(field.choices[0]) if field.choices else ""
    return "" if field.value is None else str(field.value)
