"""Reading single fields of raw Kubernetes objects: paths, integers, quantities, times,
and the GPUs of a pod template. Every failure is a `BadField` whose message names the
field; the callers (read/parse/, the job kinds) turn it into a reason.

The codec of our measured-restart-cost annotation lives here too (`measured_value`
writes what `read_measured` reads): the actuator writes that value and parse reads it,
so both import it from this one place below them, and act/ needs nothing of parse."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from autoscaler.core.resources import OUT_OF_RANGE, quantity, rfc3339

MAX_REPLICAS = 100_000  # far above any real job; guards arithmetic against hostile values


class BadField(ValueError):
    """A field that cannot be used; str() is the message for the user."""


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]..., None where a step is missing or not a mapping."""
    for key in path:
        # JSON gives plain dicts (and the caches dict subclasses): test them first, the
        # abstract Mapping check costs ten times more and this runs ~40 times a job
        if not (type(obj) is dict or isinstance(obj, Mapping)):
            return None
        obj = obj.get(key)
    return obj


def int_field(value: Any, field: str, *, minimum: int = 0, maximum: int = MAX_REPLICAS) -> int:
    # bool is an int subclass: `replicas: true` is garbage, not 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadField(f"{field} must be an integer, got {show(value)}")
    if value < minimum or value > maximum:
        raise BadField(f"{field} must be between {minimum} and {maximum}, got {value}")
    return value


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


MAX_GPUS = 1_000_000


def parse_quantity(value: Any, field: str) -> int:
    """A whole-number Kubernetes quantity of an extended resource (GPUs come whole).

    Accepts the API's quantity grammar (`8`, `1e3`, `2k`, `4000m`); the message says what
    the value means when it is not a whole number of GPUs."""

    if isinstance(value, bool):
        raise BadField(f"{field} must be a quantity (a number of GPUs), got {show(value)}")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise BadField(f"{field} must be a finite number of GPUs, got {show(value)}")
        number = Decimal(repr(value))
    elif isinstance(value, str) and len(value) <= 64 and (parsed := quantity(value)) is not None:
        if parsed is OUT_OF_RANGE:
            raise BadField(f"{field} is out of range: {show(value)}")
        number = parsed
    else:
        raise BadField(f"{field} must be a Kubernetes quantity such as 2 or 1e3, got {show(value)}")
    if number < 0:
        raise BadField(f"{field} must not be negative, got {show(value)}")
    if number > MAX_GPUS:
        raise BadField(f"{field} is out of range: {show(value)} is more than {MAX_GPUS} GPUs")
    if number != number.to_integral_value():
        raise BadField(
            f"{field} must be a whole number of GPUs, got {show(value)} (= {number.normalize():f})"
        )
    return int(number)


MAX_RESTART_SECONDS = 86_400.0  # a day: far above any real restart


MAX_RUNTIME_SECONDS = 366 * 86_400.0  # a year: a declared run time beyond is a typo


def seconds_field(value: Any, field: str, most: float = MAX_RESTART_SECONDS) -> float:
    """A duration in seconds (a number, or a string of one), finite, 0 to `most` (a day
    unless said)."""
    if isinstance(value, bool):
        raise BadField(f"{field} must be a number of seconds, got {show(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadField(f"{field} must be a number of seconds, got {show(value)}") from None
    if not math.isfinite(number) or not 0 <= number <= most:
        raise BadField(f"{field} must be between 0 and {most:.0f} seconds, got {show(value)}")
    return number


def fraction_field(value: Any, field: str) -> float:
    """A fraction from 0 to 1: a number, or a string of one, or a percentage ("40%")."""
    text = value.strip() if isinstance(value, str) else value
    scale = 1.0
    if isinstance(text, str) and text.endswith("%"):
        text, scale = text[:-1], 100.0
    try:
        if isinstance(text, bool):
            raise TypeError
        number = float(text) / scale
    except (TypeError, ValueError):
        raise BadField(
            f"{field} must be a fraction 0 to 1 or a percentage, got {show(value)}"
        ) from None
    if not math.isfinite(number) or not 0 <= number <= 1:
        raise BadField(f"{field} must be between 0 and 1 (0% and 100%), got {show(value)}")
    return number


def parse_time(value: Any, field: str) -> datetime:
    if not isinstance(value, str) or not value:
        raise BadField(f"{field} must be an RFC 3339 time, got {show(value)}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise BadField(f"{field} must be an RFC 3339 time, got {show(value)}") from None
    if parsed.tzinfo is None:
        raise BadField(f"{field} must carry a time zone (RFC 3339), got {show(value)}")
    return parsed.astimezone(UTC)


def gpus_per_worker(template: Any, resource_names: Iterable[str], field: str) -> int:
    """GPUs one worker pod asks for: per container, limits (else requests) of every
    configured resource name, summed over containers. Init containers run before, not
    beside, the main ones, so they do not add to what a running worker holds."""

    containers = dig(template, "spec", "containers")
    if not isinstance(containers, list) or not containers:
        raise BadField(f"{field}.spec.containers is missing")
    total = 0
    for i, container in enumerate(containers):
        resources = dig(container, "resources")
        limits = dig(resources, "limits") or {}
        requests = dig(resources, "requests") or {}
        if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
            raise BadField(f"{field}.spec.containers[{i}].resources must be a mapping")
        for name in resource_names:
            where = f"{field}.spec.containers[{i}].resources"
            limit = (
                parse_quantity(limits[name], f"{where}.limits[{name}]") if name in limits else None
            )
            request = (
                parse_quantity(requests[name], f"{where}.requests[{name}]")
                if name in requests
                else None
            )
            # Kubernetes refuses a pod whose extended-resource request and limit differ:
            # such a worker never runs, and planning its GPUs would promise phantom ones.
            if limit is not None and request is not None and limit != request:
                raise BadField(
                    f"{where}.limits[{name}]={limit} differs from "
                    f"{where}.requests[{name}]={request}: Kubernetes rejects such a pod"
                )
            total += limit if limit is not None else (request or 0)
    return total


# ---- our measured restart cost: the annotation value the actuator writes, parse reads ----


def read_measured(value: Any) -> tuple[float, datetime] | None:
    """Our own `<seconds>@<resize time>`; anything else is ignored (and measured again)."""
    if not isinstance(value, str) or "@" not in value:
        return None
    seconds, _, when = value.partition("@")
    try:
        return seconds_field(seconds, "measured"), parse_time(when, "measured")
    except BadField:
        return None


def measured_value(seconds: float, resized: datetime) -> str:
    """The annotation value `read_measured` reads back."""
    return f"{seconds:.0f}@{rfc3339(resized)}"
