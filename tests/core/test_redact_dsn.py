"""A database password never reaches what evalq writes: the manifest's stored recipe and
a certificate (which travels) carry the connection string without it, so that a later
``evalq verify`` that reconnects uses libpq's ``PGPASSWORD`` / ``~/.pgpass`` instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalq.core.redact import stored_recipe_form, without_stored_password
from evalq.engines.capability import DeviceInfo
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import load_recipe
from support import recipes


@pytest.mark.parametrize(("dsn", "stored"), [
    ("postgresql://u:s3cret@h:5432/db", "postgresql://u@h:5432/db"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("postgresql://h/db?password=s3cret", "postgresql://h/db"),
    ("postgresql://h/db?sslmode=require&password=s3cret&x=1",
     "postgresql://h/db?sslmode=require&x=1"),
    ("host=h user=u password=s3cret dbname=x", "host=h user=u dbname=x"),
    ("host=h password='s3 cret' dbname=x", "host=h dbname=x"),
])
def test_the_stored_form_leaves_the_password_out(dsn: str, stored: str) -> None:
    assert without_stored_password(dsn) == stored


def test_only_dsn_fields_change() -> None:
    recipe = {"name": "postgresql://u:keep@h/db",
              "candidates": [{"index": {"kind": "pgvector", "dsn": "postgresql://u:pw@h/d"}}],
              "dsn": 3}
    assert stored_recipe_form(recipe) == {
        "name": "postgresql://u:keep@h/db",
        "candidates": [{"index": {"kind": "pgvector", "dsn": "postgresql://u@h/d"}}],
        "dsn": 3}


def test_the_plan_records_no_password(tmp_path: Path) -> None:
    path = recipes.write(tmp_path / "recipe.yaml", recipes.recipe(
        "pw", cache=tmp_path, candidates=[{"name": "pg", "index": {
            "kind": "pgvector", "dsn": "postgresql://evalq:s3cret@db.example:5432/vectors"}}]))
    plan = build_plan(load_recipe(path), path, detect=lambda: DeviceInfo("cpu"))
    text = json.dumps(plan.recorded)
    assert "s3cret" not in text
    assert "postgresql://evalq@db.example:5432/vectors" in text
