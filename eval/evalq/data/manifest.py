"""Dataset manifests (``datasets/*.yaml``) and the one entry point that loads any dataset.

A manifest names a dataset once: where it comes from (``source``: beir, trec, hf, pydocs),
which split and revision, how titles are handled, and, when known, the fingerprint the
loaded data must have. A recipe names a manifest (``scifact``) or gives the same fields
inline. Checking the fingerprint on every load is what makes "the same dataset" mean the
same bytes: if a file changed under a manifest, loading fails instead of silently
measuring something else.

Fingerprints are checked on the *full* data, before any ``max_queries``/``max_docs``
slice, so sliced runs are verified too. A fingerprint can be one string, or a mapping from
environment to fingerprint for sources whose content depends on the machine (``pydocs``
depends on the Python and numpy versions; its ``source["environment"]`` is the key). An
environment missing from the mapping is loaded unverified, and says so in ``source``.

Relative paths in a manifest are resolved from the manifest's own folder; in an inline
spec, from ``base_dir`` (the recipe's folder, by default the current directory).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evalq.core.dataset import Dataset
from evalq.core.errors import InputError
from evalq.core.locations import dataset_search_dirs, expand_user
from evalq.core.names import PathName, check_path_name
from evalq.data.assemble import AssemblyOptions, TextRecord, assemble_dataset
from evalq.data.beir import check_layout, load_beir, read_jsonl_records
from evalq.data.hf import HFSpec, load_hf
from evalq.data.pydocs import build_from_raw, collect_raw
from evalq.data.slicing import slice_dataset
from evalq.data.streamed import StreamOptions, open_streamed
from evalq.data.trec import iter_text_lines, read_qrels

Source = Literal["beir", "trec", "hf", "pydocs"]


class TrecFiles(BaseModel):
    """A TREC-style collection: corpus JSONL, queries (JSONL or ``qid<TAB>text``), qrels."""

    model_config = ConfigDict(extra="forbid")

    corpus: str
    queries: str
    qrels: str


class DatasetSpec(BaseModel):
    """The fields of a manifest (and of an inline spec in a recipe)."""

    model_config = ConfigDict(extra="forbid")

    name: PathName | None = None  # a folder name in the results (evalq.core.names)
    description: str = ""
    source: Source
    path: str | None = None
    split: PathName = "test"  # a file name too: qrels/<split>.tsv
    revision: str | None = None
    use_titles: bool = True
    allow_empty_texts: bool = False
    keep_unjudged_queries: bool = False
    fingerprint: str | dict[str, str] | None = None
    max_queries: int | None = None
    max_docs: int | None = None
    hf: HFSpec | None = None
    trec: TrecFiles | None = None
    # Keep the corpus on disk and read it block by block (evalq.data.streamed).
    stream: StreamOptions | None = None

    @field_validator("stream")
    @classmethod
    def _stream_reads_files(cls, value: StreamOptions | None,
                            info: ValidationInfo) -> StreamOptions | None:
        source = info.data.get("source")
        if value is not None and source not in ("beir", "trec"):
            raise ValueError(f"`stream` reads a corpus file (sources 'beir' and 'trec'); "
                             f"source {source!r} is loaded whole: remove `stream`")
        return value

    @model_validator(mode="after")
    def _fields_for_source(self) -> DatasetSpec:
        needed = {"beir": "path", "hf": "hf", "trec": "trec"}.get(self.source)
        if needed is not None and getattr(self, needed) is None:
            raise ValueError(f"source {self.source!r} needs the field `{needed}`")
        for other in ("hf", "trec"):
            if other != self.source and getattr(self, other) is not None:
                raise ValueError(f"`{other}` only applies to source {other!r}")
        if self.source == "pydocs" and self.path is not None:
            raise ValueError("source 'pydocs' is built in and takes no `path`")
        return self


class ManifestInfo(NamedTuple):
    """One row of ``evalq datasets``."""

    name: str
    source: str
    location: str
    split: str
    fingerprint: str
    description: str
    file: str
    origin: str = ""  # ./datasets, recipe folder, checkout, built in (evalq.core.locations)
    shadows: str = ""  # the file of a same-named manifest further down the search order


def default_search_dirs() -> list[Path]:
    """``./datasets``, the checkout's ``datasets/`` and the built-in manifests
    (search order: :mod:`evalq.core.locations`)."""

    return [d.path for d in dataset_search_dirs()]


def _fields_at(loc: Sequence[Any]) -> list[str]:
    """The fields of the block an unknown key sits in (``stream:``, ``hf:``, ...)."""
    model: Any = DatasetSpec
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        inner = [field.annotation, *getattr(field.annotation, "__args__", ())] if field else []
        model = next((t for t in inner if isinstance(t, type) and issubclass(t, BaseModel)), 0)
        if not model:
            return list(DatasetSpec.model_fields)
    return list(model.model_fields)


def _validation_error(exc: ValidationError, file: str | Path | None) -> InputError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    problem = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        allowed = _fields_at(first["loc"][:-1])
        guess = difflib.get_close_matches(str(first["loc"][-1]), allowed, n=1)
        problem = "unknown field" + (f"; did you mean '{guess[0]}'?" if guess else "")
        fix = f"remove it; allowed fields: {', '.join(allowed)}"
    else:
        fix = "see datasets/README or an existing manifest for the expected fields"
    more = f" (and {len(exc.errors()) - 1} more problems)" if len(exc.errors()) > 1 else ""
    return InputError(f"{problem}{more}", file=file, field=field, fix=fix)


def parse_spec(data: Any, file: str | Path | None = None) -> DatasetSpec:
    if not isinstance(data, Mapping):
        raise InputError(
            f"a dataset spec must be a mapping of fields, got {type(data).__name__}",
            file=file,
            fix="write `name: ...`, `source: ...` and the other fields as a YAML mapping",
        )
    try:
        return DatasetSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise _validation_error(exc, file) from None


def read_manifest(path: str | Path) -> DatasetSpec:
    """Parse one manifest file; a bad one is an InputError naming the file and field."""
    path = Path(path)
    text = "\n".join(t for _n, t in iter_text_lines(path))
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(
            f"invalid YAML: {getattr(exc, 'problem', None) or exc}",
            file=path,
            line=mark.line + 1 if mark is not None else None,
            fix="fix the YAML syntax",
        ) from None
    spec = parse_spec(data, path)
    if spec.name is None:
        spec = spec.model_copy(update={"name": path.stem})
    return spec


def dataset_name(spec: DatasetSpec, file: Path | None = None) -> str:
    """The one check of a dataset's name, for ``evalq validate`` / ``run`` (the plan) and the
    Python API's :func:`load_dataset` alike: its ``name:``, else its manifest's file name,
    else its source, as a safe file name, since it becomes a folder in the results
    (:mod:`evalq.core.names`)."""
    name = spec.name or (file.stem if file is not None else spec.source)
    return check_path_name(name, what=f"dataset '{name}'", file=file,
                           field=None if file is None else "name",
                           fix="give the dataset a `name:` of letters, digits, '.', '_' and "
                           "'-' (it becomes a folder in the results), or rename its manifest")


def _manifest_files(search_dirs: Sequence[str | Path]) -> list[Path]:
    files: list[Path] = []
    for folder in search_dirs:
        folder = Path(folder)
        files.extend(sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")))
    return files


def find_manifests(search_dirs: Sequence[str | Path]) -> dict[str, tuple[Path, DatasetSpec]]:
    """Manifests by name; the first search folder wins a name clash."""
    found: dict[str, tuple[Path, DatasetSpec]] = {}
    for file in _manifest_files(search_dirs):
        spec = read_manifest(file)
        assert spec.name is not None
        found.setdefault(spec.name, (file, spec))
    return found


def _location(spec: DatasetSpec) -> str:
    if spec.source == "pydocs":
        return "(built in)"
    if spec.source == "hf" and spec.hf is not None:
        return spec.hf.corpus.describe()
    if spec.source == "trec" and spec.trec is not None:
        return spec.trec.corpus
    return spec.path or ""


def _fingerprint_text(value: str | dict[str, str] | None) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, str):
        return value
    return "; ".join(f"{env}: {fp}" for env, fp in sorted(value.items()))


def list_datasets(
    search_dirs: Sequence[str | Path] | None = None, *, recipe_path: str | Path | None = None
) -> list[ManifestInfo]:
    """Rows for ``evalq datasets``, sorted by name, each saying where it comes from."""

    located = dataset_search_dirs(recipe_path)
    dirs = [d.path for d in located] if search_dirs is None else [Path(d) for d in search_dirs]
    origins = {d.path.resolve(): d.origin for d in located}
    names = {f: read_manifest(f).name or f.stem for f in _manifest_files(dirs)}
    rows = []
    for name, (file, spec) in find_manifests(dirs).items():
        later = [f for f, n in names.items() if f != file and n == name]
        rows.append(ManifestInfo(
            name=name,
            source=spec.source,
            location=_location(spec),
            split="-" if spec.source == "pydocs" else spec.split,
            fingerprint=_fingerprint_text(spec.fingerprint),
            description=spec.description,
            file=str(file),
            origin=origins.get(file.parent.resolve(), str(file.parent)),
            shadows=str(later[0]) if later else "",
        ))
    return sorted(rows, key=lambda row: row.name)


def _resolve(base: Path, value: str) -> Path:
    path = expand_user(value)
    return path if path.is_absolute() else base / path


def _read_queries_file(path: Path) -> list[TextRecord]:
    if path.suffix.lower() in (".jsonl", ".json"):
        return read_jsonl_records(path, id_field="_id", text_field="text", title_field=None)
    records: list[TextRecord] = []
    for number, text in iter_text_lines(path):
        if not text.strip():
            continue
        qid, sep, body = text.partition("\t")
        if not sep or not qid.strip():
            raise InputError(
                "expected `query-id<TAB>text`",
                file=path,
                line=number,
                fix="write one query per line as id, a tab, then the text (or use JSONL)",
            )
        records.append(TextRecord(qid.strip(), "", body, str(path), number))
    return records


def _trec_files(spec: DatasetSpec, base: Path) -> tuple[Path, Path, Path, dict[str, Any]]:
    """A trec dataset's corpus, queries and qrels paths and its ``source`` record (the
    loaded and the streamed corpus alike)."""
    assert spec.trec is not None
    corpus_path = _resolve(base, spec.trec.corpus)
    queries_path = _resolve(base, spec.trec.queries)
    qrels_path = _resolve(base, spec.trec.qrels)
    source = {"source": "trec", "corpus": str(corpus_path), "queries": str(queries_path),
              "qrels": str(qrels_path), "use_titles": spec.use_titles}
    return corpus_path, queries_path, qrels_path, source


def _assembly(spec: DatasetSpec) -> AssemblyOptions:
    return AssemblyOptions(allow_empty_texts=spec.allow_empty_texts,
                           keep_unjudged_queries=spec.keep_unjudged_queries)


def _load_trec(spec: DatasetSpec, base: Path, name: str) -> Dataset:
    corpus_path, queries_path, qrels_path, source = _trec_files(spec, base)
    docs = read_jsonl_records(
        corpus_path,
        id_field="_id",
        text_field="text",
        title_field="title" if spec.use_titles else None,
    )
    return assemble_dataset(
        name,
        docs,
        _read_queries_file(queries_path),
        read_qrels(qrels_path),
        corpus_file=corpus_path,
        qrels_file=qrels_path,
        source=source,
        options=_assembly(spec),
    )


def _open_streamed(spec: DatasetSpec, base: Path, name: str, max_queries: int | None,
                   max_docs: int | None) -> tuple[Dataset, str]:
    """A beir or trec dataset whose corpus stays on disk (``stream:``)."""

    assert spec.stream is not None
    if spec.source == "trec":
        corpus_path, queries_path, qrels_path, source = _trec_files(spec, base)
        queries = _read_queries_file(queries_path)
    else:
        assert spec.path is not None
        folder = _resolve(base, spec.path)
        corpus_path, queries_path, qrels_path = check_layout(folder, spec.split)
        queries = read_jsonl_records(queries_path, id_field="_id", text_field="text",
                                     title_field=None)
        source = {"source": "beir", "path": str(folder), "split": spec.split,
                  "use_titles": spec.use_titles}
    return open_streamed(
        name, corpus_path, queries, read_qrels(qrels_path), qrels_file=qrels_path,
        use_titles=spec.use_titles, options=spec.stream, assembly=_assembly(spec),
        source=source, max_queries=max_queries, max_docs=max_docs)


def _load_full(spec: DatasetSpec, base: Path, name: str) -> Dataset:
    if spec.source == "pydocs":
        return build_from_raw(collect_raw(), name=name)
    if spec.source == "beir":
        assert spec.path is not None
        return load_beir(
            _resolve(base, spec.path),
            split=spec.split,
            name=name,
            use_titles=spec.use_titles,
            allow_empty_texts=spec.allow_empty_texts,
            keep_unjudged_queries=spec.keep_unjudged_queries,
        )
    if spec.source == "trec":
        return _load_trec(spec, base, name)
    assert spec.hf is not None
    hf_spec = spec.hf
    if not spec.use_titles:
        hf_spec = hf_spec.model_copy(
            update={"columns": hf_spec.columns.model_copy(update={"title": None})}
        )
    if spec.revision is not None:
        parts = {
            key: getattr(hf_spec, key).model_copy(update={"revision": spec.revision})
            for key in ("corpus", "queries", "qrels")
            if getattr(hf_spec, key).name is not None and getattr(hf_spec, key).revision is None
        }
        hf_spec = hf_spec.model_copy(update=parts)
    return load_hf(
        hf_spec,
        base_dir=_resolve(base, spec.path) if spec.path else base,
        name=name,
        allow_empty_texts=spec.allow_empty_texts,
        keep_unjudged_queries=spec.keep_unjudged_queries,
    )


def _verify(ds: Dataset, spec: DatasetSpec, file: Path | None,
            actual: str | None = None) -> bool:
    """Check the full data's fingerprint (``actual``, by default ``ds.fingerprint``)
    against the manifest's."""
    actual = actual or ds.fingerprint
    expected = spec.fingerprint
    if isinstance(expected, dict):
        expected = expected.get(str(ds.source.get("environment", "")))
    if expected is None:
        return False
    if expected != actual:
        raise InputError(
            f"the data changed: dataset {ds.name!r} has fingerprint {actual}, "
            f"the manifest expects {expected}",
            file=file,
            field="fingerprint",
            fix="restore the original data, or, if the change is intended, record the new "
            "fingerprint in the manifest (results on the old data are no longer comparable)",
        )
    return True


def load_dataset(
    name_or_spec: str | Mapping[str, Any] | DatasetSpec,
    *,
    search_dirs: Sequence[str | Path] | None = None,
    base_dir: str | Path | None = None,
    max_queries: int | None = None,
    max_docs: int | None = None,
) -> Dataset:
    """Load a dataset by manifest name, manifest path, or inline spec, then slice it.

    ``max_queries``/``max_docs`` override the spec's own limits. The fingerprint is
    verified on the full data (module docstring). ``source`` records the manifest, the
    verification, and the slice.
    """
    file: Path | None = None
    if isinstance(name_or_spec, DatasetSpec):
        spec = name_or_spec
    elif isinstance(name_or_spec, Mapping):
        spec = parse_spec(name_or_spec)
    elif Path(name_or_spec).suffix in (".yaml", ".yml") and Path(name_or_spec).is_file():
        file = Path(name_or_spec)
        spec = read_manifest(file)
    else:
        dirs = default_search_dirs() if search_dirs is None else search_dirs
        manifests = find_manifests(dirs)
        if name_or_spec not in manifests:
            close = difflib.get_close_matches(name_or_spec, list(manifests), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InputError(
                f"no dataset manifest named {name_or_spec!r} in "
                f"{', '.join(str(d) for d in dirs) or '(no search folders)'}.{hint} "
                f"Known: {', '.join(sorted(manifests)) or 'none'}",
                field="dataset",
                fix="use a listed name (`evalq datasets`), a path to a manifest, "
                "or an inline spec",
            )
        file, spec = manifests[name_or_spec]
    base = file.parent if file is not None else Path(base_dir or ".")
    name = dataset_name(spec, file)
    if spec.stream is not None:
        streamed, full_fp = _open_streamed(
            spec, base, name, max_queries if max_queries is not None else spec.max_queries,
            max_docs if max_docs is not None else spec.max_docs)
        source = dict(streamed.source)
        source.update(manifest=str(file) if file else None, description=spec.description,
                      fingerprint_verified=_verify(streamed, spec, file, full_fp))
        return Dataset(name=streamed.name, corpus=streamed.corpus, queries=streamed.queries,
                       qrels=streamed.qrels, fingerprint=streamed.fingerprint, source=source)
    full = _load_full(spec, base, name)
    verified = _verify(full, spec, file)
    source = dict(full.source)
    source.update(
        manifest=str(file) if file else None,
        description=spec.description,
        fingerprint_verified=verified,
    )
    full = Dataset(
        name=full.name,
        corpus=full.corpus,
        queries=full.queries,
        qrels=full.qrels,
        fingerprint=full.fingerprint,
        source=source,
    )
    return slice_dataset(
        full,
        max_queries if max_queries is not None else spec.max_queries,
        max_docs if max_docs is not None else spec.max_docs,
    )


def load_datasets(specs: Sequence[Any], recipe_path: Path, max_queries: int | None,
                  max_docs: int | None) -> list[Any]:
    """A recipe's ``datasets:`` (names or inline specs) loaded and sliced, in order; an
    inline spec's error points at the recipe, and two datasets may not share a name."""
    loaded = []
    search_dirs = [d.path for d in dataset_search_dirs(recipe_path)]
    for i, spec in enumerate(specs):
        try:
            loaded.append(load_dataset(spec, search_dirs=search_dirs,
                                       base_dir=recipe_path.resolve().parent,
                                       max_queries=max_queries, max_docs=max_docs))
        except InputError as exc:
            if exc.file is None:  # an inline spec: point at the recipe
                exc.file = recipe_path
                exc.field = f"datasets.{i}" + (f".{exc.field}" if exc.field else "")
            raise
    names = [d.name for d in loaded]
    if len(set(names)) != len(names):
        raise InputError(message=f"two datasets share a name ({', '.join(names)})",
                         file=recipe_path, field="datasets",
                         fix="give inline datasets distinct 'name' fields")
    return loaded
