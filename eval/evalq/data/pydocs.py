"""``pydocs``: a built-in offline retrieval set made of Python and numpy docstrings.

Every machine that runs evalq already has this text, so demos and CI need no download.
Each public module, class, function and method of the standard library and numpy with a
long enough docstring becomes one entry:

* query = the docstring's summary line (the first line after any signature lines,
  continued over at most three lines when it wraps mid-sentence; a first paragraph that
  runs on longer has no summary, and the entry is only a distractor);
* its one relevant document = the rest of that docstring: the signature line
  (``name(params)``, from :func:`inspect.signature`, else the docstring's own signature
  lines) followed by the body. Every other document is a distractor.

Rules (``RULES_VERSION`` changes when they do):

* entries need a summary of >= ``MIN_SUMMARY_CHARS`` and a body of >= ``MIN_BODY_CHARS``;
  entries with a body but a short summary stay in the corpus as distractors only;
* identical documents: the entry with the smallest id keeps it, the others are dropped;
* a summary shared by several entries is ambiguous (which one is *the* relevant document?),
  so those queries are dropped, their documents stay as distractors;
* ids are qualified names (``json.dumps``, ``numpy.ndarray.sum``), query and document of
  an entry share the id; order is by SHA-256 of the id, a fixed pseudo-random order so that
  the first N queries of a slice span many modules rather than ``abc`` .. ``ast``;
* texts never contain memory addresses or environment contents (see the worker).

Imports run in a child interpreter (:mod:`evalq.data.pydocs_worker`) with a fixed hash
seed, so the corpus does not depend on the caller's process, and an import that hangs is
killed. The result depends on the Python and numpy versions and the platform;
``source["environment"]`` names them, and manifests record fingerprints per environment.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from evalq.core.dataset import Corpus, Dataset, Qrels, Queries
from evalq.data.fingerprint import fingerprint
from evalq.data.slicing import slice_dataset

RULES_VERSION = 1
MIN_SUMMARY_CHARS = 20
MIN_BODY_CHARS = 200
MAX_SUMMARY_LINES = 3
WORKER_TIMEOUT_S = 300
_SIGNATURE_START = re.compile(r"^[A-Za-z_][\w.]*\(")
_SENTENCE_END = (".", "!", "?", ":")
_ADDRESS = re.compile(r"\s+at 0x[0-9A-Fa-f]+")


class RawDoc(NamedTuple):
    """One docstring as the worker reports it."""

    id: str
    kind: str  # module | class | function | method
    name: str
    signature: str | None  # inspect.signature text, without the name
    doc: str


class RawCollection(NamedTuple):
    python: str
    numpy: str | None
    platform: str
    docs: tuple[RawDoc, ...]


class DocParts(NamedTuple):
    signature_lines: tuple[str, ...]  # signature lines found at the top of the docstring
    summary: str
    body: str


def _signature_block(lines: list[str], start: int) -> int:
    """End index of one call-signature block starting at ``lines[start]``, or ``start``."""
    if not _SIGNATURE_START.match(lines[start].strip()):
        return start
    depth = 0
    end = start
    while end < len(lines):
        depth += lines[end].count("(") - lines[end].count(")")
        end += 1
        if depth <= 0:
            break
    if depth != 0:
        return start
    tail = lines[end - 1].rsplit(")", 1)[-1].strip()
    return end if not tail or tail.startswith("->") else start


def split_docstring(doc: str) -> DocParts:
    """Split a raw docstring into leading signature lines, summary and body."""
    lines = inspect.cleandoc(doc).splitlines()
    index = 0
    signature: list[str] = []
    while index < len(lines):
        end = _signature_block(lines, index)
        if end == index:
            break
        signature.append(" ".join(line.strip() for line in lines[index:end]))
        index = end
    while index < len(lines) and lines[index].strip() in ("", "--"):
        index += 1
    summary_lines: list[str] = []
    while index < len(lines) and lines[index].strip() and len(summary_lines) < MAX_SUMMARY_LINES:
        summary_lines.append(lines[index].strip())
        index += 1
        if summary_lines[-1].endswith(_SENTENCE_END):
            break
    summary = " ".join(summary_lines)
    ended = summary.endswith(_SENTENCE_END) or index >= len(lines) or not lines[index].strip()
    if not ended:
        # A paragraph running on past MAX_SUMMARY_LINES has no summary line; its text
        # stays in the body (the entry can still serve as a distractor).
        index -= len(summary_lines)
        summary = ""
    body = "\n".join(lines[index:]).strip()
    return DocParts(tuple(signature), summary, body)


def document_text(raw: RawDoc, parts: DocParts) -> str:
    """Signature line (when the object has one) + blank line + body."""
    if raw.signature is not None:
        head = f"{raw.name}{raw.signature}"
    else:
        head = "\n".join(parts.signature_lines)
    text = f"{head}\n\n{parts.body}" if head else parts.body
    return _ADDRESS.sub("", text)


def _order_key(entry_id: str) -> tuple[str, str]:
    return hashlib.sha256(entry_id.encode("utf-8")).hexdigest(), entry_id


def _worker_source() -> str:
    return (Path(__file__).with_name("pydocs_worker.py")).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def collect_raw(python_executable: str | None = None) -> RawCollection:
    """Run the worker in a fresh interpreter and parse its answer (cached per process).

    The child starts from an empty folder (so no local file shadows a stdlib module) with
    ``PYTHONHASHSEED=0`` and UTF-8 I/O; a child that fails or hangs raises RuntimeError,
    since that is an environment fault, not bad user input.
    """
    env = dict(os.environ)
    env.update(PYTHONHASHSEED="0", PYTHONIOENCODING="utf-8", PYTHONWARNINGS="ignore")
    env.pop("PYTHONSTARTUP", None)
    with tempfile.TemporaryDirectory(prefix="evalq-pydocs-") as empty_dir:
        try:
            done = subprocess.run(
                [python_executable or sys.executable, "-c", _worker_source()],
                cwd=empty_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=WORKER_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"pydocs: collecting docstrings took over {WORKER_TIMEOUT_S}s"
            ) from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip()[-2000:]
        raise RuntimeError(f"pydocs: the docstring collector failed: {message}")
    answer = json.loads(done.stdout.decode("ascii"))
    docs = tuple(RawDoc(*entry) for entry in answer["entries"])
    return RawCollection(
        python=answer["python"],
        numpy=answer["numpy"],
        platform=sys.platform,
        docs=docs,
    )


def build_from_raw(raw: RawCollection, name: str = "pydocs") -> Dataset:
    """Apply the module's rules to collected docstrings (pure: same input, same output)."""
    by_id: dict[str, tuple[RawDoc, DocParts, str]] = {}
    for item in sorted(raw.docs, key=lambda d: d.id):
        if item.id in by_id:
            continue
        parts = split_docstring(item.doc)
        if len(parts.body) < MIN_BODY_CHARS:
            continue
        by_id[item.id] = (item, parts, document_text(item, parts))

    doc_owner: dict[str, str] = {}
    for entry_id, (_item, _parts, text) in by_id.items():  # sorted by id: smallest id wins
        doc_owner.setdefault(text, entry_id)
    kept = {i: v for i, v in by_id.items() if doc_owner[v[2]] == i}

    summaries = Counter(
        parts.summary for _item, parts, _text in kept.values()
        if len(parts.summary) >= MIN_SUMMARY_CHARS
    )
    order = sorted(kept, key=_order_key)
    query_ids = [
        i for i in order
        if len(kept[i][1].summary) >= MIN_SUMMARY_CHARS and summaries[kept[i][1].summary] == 1
    ]
    corpus = Corpus(
        ids=tuple(order),
        titles=tuple("" for _ in order),
        texts=tuple(kept[i][2] for i in order),
    )
    queries = Queries(
        ids=tuple(query_ids),
        texts=tuple(_ADDRESS.sub("", kept[i][1].summary) for i in query_ids),
    )
    qrels = Qrels(judgments={i: {i: 1} for i in query_ids})
    environment = f"{raw.platform}-py{raw.python}-numpy{raw.numpy}"
    return Dataset(
        name=name,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        fingerprint=fingerprint(corpus, queries, qrels),
        source={
            "source": "pydocs",
            "rules_version": RULES_VERSION,
            "python": raw.python,
            "numpy": raw.numpy,
            "environment": environment,
            "documents": len(corpus),
            "queries": len(queries),
            "ambiguous_summaries_dropped": sum(n for n in summaries.values() if n > 1),
            "duplicate_documents_dropped": len(by_id) - len(kept),
        },
    )


def load_pydocs(
    *, name: str = "pydocs", max_queries: int | None = None, max_docs: int | None = None
) -> Dataset:
    """Build the pydocs dataset, optionally sliced (see :func:`slice_dataset`)."""
    return slice_dataset(build_from_raw(collect_raw(), name=name), max_queries, max_docs)
