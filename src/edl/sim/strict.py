"""The base of every scenario section and the scalar types they share."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = ["Quantity", "Seconds", "Strict"]


def _check_quantity(value: str | int | float) -> str:
    """Keep quantities as Kubernetes strings, but reject what the cluster could not parse."""
    from edl.api.quantity import QuantityError, parse_quantity

    text = str(value)
    try:
        number = parse_quantity(text)
    except QuantityError as error:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from error
    if number < 0:
        raise ValueError(f"quantity must not be negative: {text!r}")
    return text


Quantity = Annotated[str | int | float, AfterValidator(_check_quantity)]
Seconds = Annotated[float, Field(ge=0)]

class Strict(BaseModel):
    """Base for every scenario section: unknown keys and type coercion are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


