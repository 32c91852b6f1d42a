"""TREC-style judgment and run files: read and write.

Qrels come in two shapes in the wild and users should not have to say which:

* TREC: ``qid iter docid rel`` (whitespace separated, ``iter`` is ignored, usually ``0``);
* BEIR: tab-separated with the header ``query-id corpus-id score``.

:func:`read_qrels` detects the shape from the first non-empty line. Ids stay strings
(``"0001"`` must not become ``1``), and relevance is an integer because trec_eval uses the
level as the gain. Any line that does not parse is an :class:`InputError` naming the file,
the line and the field, never a skipped line.

Run files (``qid Q0 docid rank score tag``) are read into ``{qid: {docid: score}}``, the
shape pytrec_eval and ranx take; ordering is left to the scorer (trec_eval re-sorts by
score, then document id descending), so the ``rank`` column is checked but not trusted.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from evalq.core.atomicio import write_text
from evalq.core.dataset import Qrels
from evalq.core.errors import InputError
from evalq.core.ranking import Ranking

BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")

QrelsFormat = Literal["trec", "beir"]


def iter_text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` of a UTF-8 file, 1-based, without line endings.

    Decoding line by line (not the whole file at once) lets a bad byte be reported with
    the line it sits on. A UTF-8 byte-order mark on the first line is dropped.
    """
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise InputError(
            "file not found", file=path, fix="check the path (relative paths are resolved "
            "from the current directory)"
        ) from None
    except IsADirectoryError:
        raise InputError("expected a file, found a folder", file=path) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"bytes that are not UTF-8 at byte {exc.start} of the line "
                    f"({raw[exc.start:exc.start + 4]!r})",
                    file=path,
                    line=number,
                    fix="re-encode the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)",
                ) from None
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield number, text.rstrip("\r\n")


def iter_json_lines(path: Path, lines: Iterable[tuple[int, str]] | None = None,
                    ) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` of a JSON Lines file (or of its ``lines``, already
    read), blank lines skipped: one parser for every JSON Lines format evalq reads, so a
    malformed line is named the same way in each."""
    for number, text in iter_text_lines(path) if lines is None else lines:
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"malformed JSON at column {exc.colno}: {exc.msg}", file=path,
                             line=number,
                             fix="write exactly one JSON object per line (JSON Lines)",
                             ) from None
        yield number, value


def _parse_relevance(value: str, path: Path, line: int, field: str) -> int:
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if math.isfinite(number) and number == int(number):
        return int(number)
    raise InputError(
        f"relevance {value!r} is not an integer",
        file=path,
        line=line,
        field=field,
        fix="use integer relevance levels (0 = not relevant, 1, 2, ... = graded relevance)",
    )


def _is_beir_header(fields: list[str]) -> bool:
    return tuple(f.strip().lower() for f in fields) == BEIR_QRELS_HEADER


def _split_beir(text: str) -> list[str]:
    # BEIR writes tabs; tolerate other whitespace only when there is no tab at all.
    return text.split("\t") if "\t" in text else text.split()


def detect_qrels_format(path: str | Path) -> QrelsFormat:
    """``"beir"`` when the first non-empty line is the BEIR header, else ``"trec"``."""
    path = Path(path)
    for _number, text in iter_text_lines(path):
        if text.strip():
            return "beir" if _is_beir_header(_split_beir(text)) else "trec"
    return "trec"


def _qrels_fields(text: str, fmt: QrelsFormat, path: Path, number: int
                  ) -> tuple[str, str, str, tuple[str, ...]]:
    """One judgment line's query id, document id and level text, plus its field names.

    The names are the format's own (``query-id`` ... for BEIR, ``qid`` ... for TREC) so
    that a bad-input message names the column the user wrote.
    """
    if fmt == "beir":
        fields = _split_beir(text)
        if len(fields) != 3:
            raise InputError(
                f"expected 3 tab-separated fields (query-id, corpus-id, score), "
                f"found {len(fields)}",
                file=path,
                line=number,
                fix="write one judgment per line as `query-id<TAB>corpus-id<TAB>score`",
            )
        qid, docid, rel_text = (f.strip() for f in fields)
        return qid, docid, rel_text, ("query-id", "corpus-id", "score")
    fields = text.split()
    if len(fields) != 4:
        hint = (
            "; a 3-column file looks like BEIR qrels, which need the header line "
            "`query-id\tcorpus-id\tscore`"
            if len(fields) == 3
            else ""
        )
        raise InputError(
            f"expected 4 whitespace-separated fields (qid iter docid rel), "
            f"found {len(fields)}{hint}",
            file=path,
            line=number,
            fix="write TREC qrels as `qid 0 docid rel`, or BEIR qrels with the header "
            "`query-id corpus-id score`",
        )
    qid, _iteration, docid, rel_text = fields
    return qid, docid, rel_text, ("qid", "iter", "docid", "rel")


def read_qrels(path: str | Path) -> Qrels:
    """Read TREC (``qid 0 docid rel``) or BEIR-tsv (``query-id corpus-id score``) qrels.

    Queries and documents keep the order of their first appearance in the file. A pair
    judged twice with the same level is accepted (with a warning); with different levels it
    is an error, since which one wins would be arbitrary. An empty file is an error: a
    qrels file with no judgments cannot score anything.
    """
    path = Path(path)
    judgments: dict[str, dict[str, int]] = {}
    first_seen: dict[tuple[str, str], int] = {}
    fmt: QrelsFormat | None = None
    repeated = 0
    for number, text in iter_text_lines(path):
        if not text.strip():
            continue
        if fmt is None:
            if _is_beir_header(_split_beir(text)):
                fmt = "beir"
                continue
            fmt = "trec"
        qid, docid, rel_text, names = _qrels_fields(text, fmt, path, number)
        for value, name in ((qid, names[0]), (docid, names[-2])):
            if not value:
                raise InputError("empty id", file=path, line=number, field=name,
                                 fix="every judgment needs a query id and a document id")
        rel = _parse_relevance(rel_text, path, number, names[-1])
        per_query = judgments.setdefault(qid, {})
        if docid in per_query:
            if per_query[docid] != rel:
                raise InputError(
                    f"query {qid!r} judges document {docid!r} twice with different levels "
                    f"({per_query[docid]} on line {first_seen[(qid, docid)]}, {rel} here)",
                    file=path,
                    line=number,
                    field=names[-1],
                    fix="keep one judgment per (query, document) pair",
                )
            repeated += 1
            continue
        per_query[docid] = rel
        first_seen[(qid, docid)] = number
    if not judgments:
        raise InputError(
            "no judgments found (the file is empty or holds only a header)",
            file=path,
            fix="point to a qrels file with at least one `qid 0 docid rel` line",
        )
    if repeated:
        warnings.warn(
            f"{path}: {repeated} (query, document) judgments repeated with the same level; "
            "each counted once",
            stacklevel=2,
        )
    return Qrels(judgments=judgments)


def _check_writable_id(value: str, what: str, path: Path) -> None:
    if not value or any(ch.isspace() for ch in value):
        raise InputError(
            f"{what} {value!r} is empty or contains whitespace, which TREC/BEIR files cannot hold",
            file=path,
            fix="use ids without spaces, tabs or newlines",
        )


def write_qrels(qrels: Qrels, path: str | Path, *, fmt: QrelsFormat = "trec") -> None:
    """Write qrels atomically, in TREC (``qid 0 docid rel``) or BEIR-tsv form.

    Order follows the mapping (queries, then documents, as stored), so a read/write round
    trip reproduces the file.
    """
    path = Path(path)
    lines: list[str] = []
    if fmt == "beir":
        lines.append("\t".join(BEIR_QRELS_HEADER))
    for qid, docs in qrels.judgments.items():
        _check_writable_id(qid, "query id", path)
        for docid, rel in docs.items():
            _check_writable_id(docid, "document id", path)
            if fmt == "beir":
                lines.append(f"{qid}\t{docid}\t{int(rel)}")
            else:
                lines.append(f"{qid} 0 {docid} {int(rel)}")
    write_text(path, "\n".join(lines) + "\n")


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a TREC run file (``qid Q0 docid rank score tag``) into ``{qid: {docid: score}}``.

    A document listed twice for one query is an error (trec_eval would silently count it
    twice in some measures). Scores must be finite numbers.
    """
    path = Path(path)
    run: dict[str, dict[str, float]] = {}
    for number, text in iter_text_lines(path):
        if not text.strip():
            continue
        fields = text.split()
        if len(fields) != 6:
            raise InputError(
                f"expected 6 whitespace-separated fields (qid Q0 docid rank score tag), "
                f"found {len(fields)}",
                file=path,
                line=number,
                fix="write one result per line as `qid Q0 docid rank score tag`",
            )
        qid, _q0, docid, rank_text, score_text, _tag = fields
        try:
            int(rank_text)
        except ValueError:
            raise InputError(f"rank {rank_text!r} is not an integer", file=path, line=number,
                             field="rank", fix="the 4th column is the 1-based rank") from None
        try:
            score = float(score_text)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise InputError(f"score {score_text!r} is not a finite number", file=path,
                             line=number, field="score",
                             fix="the 5th column is the retrieval score") from None
        per_query = run.setdefault(qid, {})
        if docid in per_query:
            raise InputError(f"document {docid!r} listed twice for query {qid!r}", file=path,
                             line=number, field="docid",
                             fix="list each document at most once per query")
        per_query[docid] = score
    if not run:
        raise InputError("no results found (the run file is empty)", file=path,
                         fix="point to a TREC run file with `qid Q0 docid rank score tag` lines")
    return run


def write_run(
    run: Mapping[str, Mapping[str, float]], path: str | Path, *, tag: str = "evalq"
) -> None:
    """Write ``{qid: {docid: score}}`` as a TREC run file, atomically.

    Rows are ranked the way trec_eval reads them (score descending, then document id
    descending), so the written ranks agree with how the file will be scored. Scores are
    written with ``repr`` precision so a round trip is exact.
    """
    path = Path(path)
    _check_writable_id(tag, "run tag", path)
    lines: list[str] = []
    for qid, docs in run.items():
        _check_writable_id(qid, "query id", path)
        ranked = sorted(docs.items(), key=lambda item: (item[1], item[0]), reverse=True)
        for rank, (docid, score) in enumerate(ranked, start=1):
            _check_writable_id(docid, "document id", path)
            lines.append(f"{qid} Q0 {docid} {rank} {float(score)!r} {tag}")
    write_text(path, "\n".join(lines) + ("\n" if lines else ""))


_WHITESPACE = re.compile(r"\s")


def read_trec_run(path: str | Path, doc_ids: Sequence[str] | None = None) -> Ranking:
    """Read a TREC run file (``qid Q0 docid rank score tag``) into a :class:`Ranking`.

    The rank column is checked but not trusted: rows are re-sorted the way trec_eval reads
    them. Malformed lines raise :class:`InputError` with the file, line and fix.
    """
    return Ranking.from_dict(read_run(path), doc_ids=doc_ids)


def write_trec_run(ranking: Ranking, path: str | Path, tag: str = "evalq") -> None:
    """Write ``qid Q0 docid rank score tag`` lines (rank 1-based), atomically.

    Scores are written with ``repr`` precision, so reading the file back gives the same
    floats and therefore the same trec_eval order.
    """
    path = Path(path)
    for what, values in (("run tag", [tag]), ("query id", ranking.query_ids),
                         ("document id", ranking.doc_ids)):
        if not all(values) or _WHITESPACE.search("".join(values)):
            raise InputError(
                f"a {what} is empty or contains whitespace, which a TREC run cannot hold",
                file=path,
                fix="use ids and tags without spaces, tabs or newlines",
            )
    doc_ids = ranking.doc_ids
    lines: list[str] = []
    for qid, row_idx, row_sc in zip(ranking.query_ids, ranking.indices.tolist(),
                                    ranking.scores.tolist(), strict=True):
        lines.extend(
            f"{qid} Q0 {doc_ids[i]} {rank} {s!r} {tag}"
            for rank, (i, s) in enumerate(zip(row_idx, row_sc, strict=True), start=1)
            if i >= 0
        )
    write_text(path, "\n".join(lines) + ("\n" if lines else ""))
