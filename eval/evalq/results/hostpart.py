"""``host`` of a results file: the machine its numbers were measured on."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class HostPart(BaseModel):
    """``host`` of a manifest, summary or load summary: the machine the numbers were
    measured on (``evalq.core.host.HostFacts``), with what the engines loaded by the run
    said of their own choice. Int8 and bf16 kernels differ by instruction set, so a
    verdict holds for its ``numerics_class``. Absent in folders written before it.
    Closed like every part of ``results.schema``, whose size limit keeps it here."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    cpu_vendor: str | None = None
    cpu_model: str | None = None
    arch: str
    flags: list[str] = Field(default_factory=list)
    numerics_class: str
    isa_caps: dict[str, str] = Field(default_factory=dict)
    cores: int | None = None
    threads: dict[str, str] = Field(default_factory=dict)
    os: str = ""
    engines: dict[str, str | None] = Field(default_factory=dict)
    engine_choices: dict[str, Any] = Field(default_factory=dict)


__all__ = ["HostPart"]
