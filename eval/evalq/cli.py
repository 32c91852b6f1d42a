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
    gate.add_argument("--method", choices=("percentile", "bootstrap-t", "bca", "t",
                                                   "t-and-bootstrap-t"),
                      help="re-decide with this interval method instead of the stored one")

    cal = sub.add_parser("calibrate", help="simulate the gates' error rates on a results "
                         "folder's per-query differences and a synthetic panel")
    cal.add_argument("results", type=Path, nargs="?", help="results folder (optional)")
    cal.add_argument("--trials", type=int, default=2000)
    cal.add_argument("--json", type=Path, help="also write the table as JSON")

    sub.add_parser("datasets", help="list the dataset manifests")

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
        from evalq.runner import run_recipe_file

        outcome = run_recipe_file(
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

        passed = regate(args.results, junit=args.junit, method=args.method)
        return EXIT_OK if passed else EXIT_GATE_FAILED
    if args.command == "calibrate":
        from evalq.calibration import calibrate_command

        return calibrate_command(args.results, trials=args.trials, json_path=args.json)
    if args.command == "datasets":
        from evalq.datasets.manifest import list_datasets

        rows = list_datasets()
        for row in rows:
            print(f"{row.name:16s} {row.source:7s} {row.location:40s} {row.split:6s} "
                  f"{row.description}")
        if not rows:
            print("no dataset manifests found (looked in ./datasets)")
        return EXIT_OK
    if args.command == "parity":
        from evalq.runner import parity_only

        return EXIT_OK if parity_only(args.recipe, texts=args.texts) else EXIT_GATE_FAILED
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    raise SystemExit(main())
