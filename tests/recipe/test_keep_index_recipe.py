"""recipes/keep-index.yaml plans as documented (issue 31): the int8 candidate encodes its
queries only, and the binary-documents candidate encodes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalq.app.cli import main
from evalq.recipe.plan import plan_file

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "keep-index.yaml"


def test_the_int8_candidate_reencodes_no_document() -> None:
    plan = plan_file(RECIPE)
    ov = plan.variant("ov-int8-queries").sides
    assert ov.documents == "fp32" and not ov.encodes_documents and ov.encodes_queries
    binary = plan.variant("binary-docs")
    assert not binary.sides.builds_engine
    assert binary.options.vectors.quantize == "binary"
    assert binary.options.vectors.queries == "float"
    assert {g for v in plan.variants for g in v.gates} and len(plan.gates) == 2


def test_evalq_plan_prints_what_is_encoded_and_reused(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert main(["plan", str(RECIPE)]) in (0, None)
    text = capsys.readouterr().out
    ov = text[text.index("candidate ov-int8-queries"):text.index("candidate binary-docs")]
    assert "encodes queries; documents reused from variant fp32 (not encoded)" in ov
    binary = text[text.index("candidate binary-docs"):]
    assert "no engine" in binary and "encodes nothing (no engine is built)" in binary
