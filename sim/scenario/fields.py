"""The field types of the scenario schema: quantities with units (parsed here, once), names, seeds, and the
:class:`Strict` base of every schema object."""

from __future__ import annotations

from typing import Annotated

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError,
                      WithJsonSchema)

from sim.core.units import (PS_PER_S, RATE_PATTERN, SIZE_PATTERN, TIME_PATTERN, UnitError, format_size, format_time,
                            parse_rate, parse_size, parse_time)


def _unit(parser):
    def parse(value):
        try:
            return parser(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
    return BeforeValidator(parse)


def _at_most(limit: int, render, why: str):
    """A per-key upper bound tighter than its dimension's (``render`` writes a value with its unit, ``why``
    says what the key cannot exceed)."""
    def check(value: int) -> int:
        if value > limit:
            raise ValueError(f"{render(value)} is above the maximum of {render(limit)}: {why}")
        return value
    return AfterValidator(check)


def _quantity(pattern: str, *examples: str) -> WithJsonSchema:
    """Editors see a quantity as what the file holds: a string with a unit, matching the parser's ``pattern``."""
    return WithJsonSchema({"type": "string", "pattern": pattern, "examples": list(examples)})


Size = Annotated[int, _unit(parse_size), _quantity(SIZE_PATTERN, "4KiB", "64KB", "4096B")]
Duration = Annotated[int, _unit(parse_time), _quantity(TIME_PATTERN, "600ns", "1.5us")]
Rate = Annotated[float, _unit(parse_rate), _quantity(RATE_PATTERN, "400Gb/s", "55GB/s")]
Name = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$", max_length=64)]
Latency = Annotated[Duration, _at_most(PS_PER_S, format_time, "no hardware latency comes near a second")]
"""A latency of the hardware (a one-way flight, a pipeline stage, a poll)."""
MAX_MESSAGE_B = 2**31
"""InfiniBand's largest message (2^31 bytes; what ibv_query_port reports as max_msg_sz on mlx5)."""
SEED_LIMIT = 2**63
"""Seeds are below 2**63: numpy's SeedSequence and the manifests store them as signed 64-bit integers."""
Seed = Annotated[int, Field(ge=0, lt=SEED_LIMIT)]


def check_seed(value: int) -> int:
    """``value`` if it is a :data:`Seed` (for seeds given on a command line), else ValueError."""
    try:
        return TypeAdapter(Seed).validate_python(value, strict=True)
    except ValidationError:
        raise ValueError(f"a seed is an integer with 0 <= seed < 2**63, got {value!r}") from None


def _positive(value: int) -> int:
    if value <= 0:
        raise ValueError(f"must be positive, got {value}")
    return value


PositiveSize = Annotated[Size, AfterValidator(_positive)]
MessageSize = Annotated[PositiveSize, _at_most(MAX_MESSAGE_B, format_size,
                                                     "an RDMA message is at most 2^31 bytes")]


class Strict(BaseModel):
    """Base of every schema object: unknown keys are rejected, objects are immutable."""

    # strict: a count is an integer, never a boolean, a float or a numeric string
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True,
                              strict=True)
