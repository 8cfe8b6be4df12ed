"""Base model for spec objects: frozen, camelCase on the wire, unknown fields refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Spec(BaseModel):
    """A frozen spec fragment. Field names are snake_case here and camelCase in YAML.

    The CRD schema (crds/*.yaml) is the source of truth for the wire format; these
    models mirror it so the renderer can work with typed values. A unit test checks
    that both name the same fields.
    """

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )
