"""Command line: parses arguments, calls library functions, maps errors to exit codes.

Exit codes: 0 every gate passed (or the command succeeded), 1 a gate failed,
2 bad input (recipe, dataset, arguments) with a one-paragraph message. Imports are lazy so
``evalq --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_OK, EXIT_GATE_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default exit code is 2 as well
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"evalq: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evalq", description="Is a quantized embedding model safe to deploy?")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    run = sub.add_parser("run", help="run a recipe end to end: encode, search, score, gate")
    run.add_argument("recipe", type=Path)
    run.add_argument("-o", "--output", type=Path, help="results folder (default results/<name>)")
    run.add_argument("--max-queries", type=int, help="evaluate the first N queries only")
    run.add_argument("--max-docs", type=int, help="cap the corpus (judged documents kept first)")
    run.add_argument("--only", action="append", metavar="VARIANT",
                     help="run these variants only (the reference always runs); repeatable")
    run.add_argument("--no-cache", action="store_true", help="recompute every embedding")
    run.add_argument("--demo", action="store_true",
                     help="exit 0 when the run completed even if gates failed (make demo)")

    val = sub.add_parser("validate", help="check a recipe without running it")
    val.add_argument("recipe", type=Path, nargs="+")

    met = sub.add_parser("metrics", help="score a TREC run against qrels (like trec_eval)")
    met.add_argument("qrels", type=Path, help="TREC qrels or BEIR qrels .tsv")
    met.add_argument("run", type=Path, help="TREC run file")
    met.add_argument("-m", "--measure", action="append", dest="measures", metavar="MEASURE")
    met.add_argument("--per-query", action="store_true")
    met.add_argument("--json", action="store_true")

    gate = sub.add_parser("gate", help="re-decide the gates of a stored results folder")
    gate.add_argument("results", type=Path)
    gate.add_argument("--junit", type=Path, help="also write a JUnit XML report")

    sub.add_parser("datasets", help="list the dataset manifests")

    ini = sub.add_parser("init", help="write a first recipe for your model and data "
                         "(asks for what the flags leave open)")
    ini.add_argument("-o", "--output", type=Path, help="recipe file (default <name>.yaml)")
    ini.add_argument("--name", help="recipe name (results go to results/<name>)")
    ini.add_argument("--model", help="model folder, pkg:<module> or Hugging Face id")
    data = ini.add_mutually_exclusive_group()
    data.add_argument("--beir", metavar="DIR", help="BEIR folder (corpus, queries, qrels/)")
    data.add_argument("--trec", nargs=3, metavar=("CORPUS", "QUERIES", "QRELS"))
    data.add_argument("--hf", metavar="DATASET", help="BEIR-layout Hugging Face dataset id")
    data.add_argument("--dataset", metavar="NAME", help="a dataset manifest name (pydocs)")
    ini.add_argument("--split", default="test")
    ini.add_argument("--backend", default="inprocess",
                     choices=["inprocess", "vllm", "openai", "tei"])
    ini.add_argument("--quantize", help="comma-separated quantizations to try")
    ini.add_argument("--url", help="server URL for --backend openai/tei")
    ini.add_argument("--route", help="embeddings route on that server (e.g. /embeddings)")
    ini.add_argument("--served-model", help="model name the server expects")
    ini.add_argument("--margin", default="1%", help="allowed nDCG@10 drop (1%% or 0.01)")
    ini.add_argument("--max-queries", type=int, help="slice for a quick first run")
    ini.add_argument("--max-docs", type=int, help="cap the corpus for a quick first run")
    ini.add_argument("--ask", action="store_true", help="prompt even without a terminal")
    ini.add_argument("--force", action="store_true", help="overwrite an existing file")

    par = sub.add_parser("parity", help="compare every variant's backend against the reference")
    par.add_argument("recipe", type=Path)
    par.add_argument("--texts", type=int, default=32)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = _parser().parse_args(argv)
    if args.version:
        from evalq import __version__

        print(f"evalq {__version__}")
        return EXIT_OK
    if not args.command:
        _parser().print_help()
        return EXIT_BAD_INPUT
    from evalq.errors import BackendUnavailableError, InputError

    try:
        return _dispatch(args)
    except InputError as exc:
        print(f"evalq: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BackendUnavailableError as exc:
        print(f"evalq: error: the backend stopped answering: {exc}. Finished embedding "
              "chunks are cached; rerun the same command to resume once it is back.",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("evalq: interrupted; finished embedding chunks are cached, rerun to resume.",
              file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        from evalq.api import run  # the Python API's run: one code path for both

        outcome = run(
            args.recipe, output=args.output, max_queries=args.max_queries,
            max_docs=args.max_docs, only=args.only, use_cache=not args.no_cache,
        )
        if outcome.passed:
            return EXIT_OK
        return EXIT_OK if args.demo else EXIT_GATE_FAILED
    if args.command == "validate":
        from evalq.config import load_recipe

        for path in args.recipe:
            recipe = load_recipe(path)
            print(f"{path}: ok ({len(recipe.candidates)} candidates, {len(recipe.gates)} gates)")
        return EXIT_OK
    if args.command == "metrics":
        from evalq.metrics.cli_report import metrics_report

        print(metrics_report(args.qrels, args.run, args.measures, per_query=args.per_query,
                             as_json=args.json), end="")
        return EXIT_OK
    if args.command == "gate":
        from evalq.regate import regate

        passed = regate(args.results, junit=args.junit)
        return EXIT_OK if passed else EXIT_GATE_FAILED
    if args.command == "datasets":
        from evalq.datasets.manifest import list_datasets

        rows = list_datasets()
        for row in rows:
            print(f"{row.name:16s} {row.source:7s} {row.location:40s} {row.split:6s} "
                  f"{row.description}")
            # Where the name resolves from (evalq.locations: ./datasets first, built-ins last).
            shadows = f"; shadows {row.shadows}" if row.shadows else ""
            print(f"{'':16s} from {row.origin}: {row.file}{shadows}")
        if not rows:
            print("no dataset manifests found (looked in ./datasets)")
        return EXIT_OK
    if args.command == "init":
        from evalq.scaffold import InitAnswers, init_command, parse_trec

        answers = InitAnswers(
            model=args.model, name=args.name, beir=args.beir, split=args.split,
            trec=parse_trec(args.trec), hf=args.hf, dataset=args.dataset,
            backend=args.backend, url=args.url, route=args.route,
            served_model=args.served_model, margin=args.margin, max_queries=args.max_queries,
            max_docs=args.max_docs,
            quantizations=[q for q in (args.quantize or "").split(",") if q],
        )
        init_command(answers, args.output, force=args.force, ask=args.ask)
        return EXIT_OK
    if args.command == "parity":
        from evalq.runner import parity_only

        return EXIT_OK if parity_only(args.recipe, texts=args.texts) else EXIT_GATE_FAILED
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    raise SystemExit(main())
