"""Command line: parses arguments, calls library functions, maps errors to exit codes.

Exit codes: 0 every gate passed (or the command succeeded), 1 a gate failed,
2 bad input (recipe, dataset, arguments, server, full or read-only disk) with a
one-paragraph message, 3 evalq itself failed (traceback in ``logs/``), 130 / 143
interrupted by SIGINT / SIGTERM (see ``evalq.core.failure``). Imports are lazy so
``evalq --help`` stays fast; the backend registry (declarations only: pydantic, numpy,
httpx, no torch or vLLM) is read for ``init --backend``'s choices.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from evalq.app import console
from evalq.app.api import run  # the Python API's run: one code path for both
from evalq.app.compare_command import compare_command
from evalq.app.gate_command import gate_command, stored_sections_of
from evalq.app.metrics_command import metrics_report
from evalq.app.plan_command import print_plan, validate_files
from evalq.app.scaffold import InitAnswers, init_command, parse_trec
from evalq.app.verify_command import certify_command, verify_command
from evalq.core import failure, warnformat
from evalq.core.errors import BackendUnavailableError, InputError
from evalq.core.gates import METHODS
from evalq.core.redact import redact
from evalq.core.version import __version__
from evalq.data.manifest import list_datasets
from evalq.engines.registry import BACKENDS
from evalq.execute.calibrate import calibrate_report, search_calibration_report
from evalq.execute.evaluate import parity_only
from evalq.execute.load.command import replan, run_load
from evalq.recipe.plan import build_plan, results_folder
from evalq.recipe.plan_load import check_load
from evalq.recipe.schema import load_recipe_source
from evalq.report.page import write_report

EXIT_OK, EXIT_GATE_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's default exit code is 2 as well
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"evalq: error: {message}\n")


def _whole_number(text: str, least: int, why: str, most: int | None = None) -> int:
    """argparse type body: a whole number >= ``least`` (and <= ``most``; argparse names
    the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value} {why}")
    if most is not None and value > most:
        raise argparse.ArgumentTypeError(f"must be at most {most}, got {value} {why}")
    return value


# Each probe text is encoded twice by certify (in the probe's batch and alone) and kept
# with its vector in the certificate: --probe 10**9 took the whole corpus of the run's
# first dataset, one text at a time.
_PROBE_MOST = 1000


def _probe_count(text: str) -> int:
    """argparse type of ``certify --probe``: half are queries and half documents, so a
    certificate holds at least one of each."""
    return _whole_number(text, 2, "(half queries, half documents; the default is 32)",
                         _PROBE_MOST)


def _positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    return _whole_number(text, 1, "(leave the flag out to use the recipe's value)")


_Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class _Command:
    """One subcommand: its help line, the function that adds its flags, its handler."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: _Handler


# name -> command, in the order ``evalq --help`` lists them. A table instead of an
# if/elif chain so that a command's flags and its handler sit side by side.
_COMMANDS: dict[str, _Command] = {}


def register_command(name: str, help: str,
                     add_arguments: Callable[[argparse.ArgumentParser], None]
                     ) -> Callable[[_Handler], _Handler]:
    """Decorator: register a handler under ``name``; a second command of that name is a bug."""
    def register(handler: _Handler) -> _Handler:
        if name in _COMMANDS:
            raise ValueError(f"evalq command {name!r} is registered twice")
        _COMMANDS[name] = _Command(help=help, add_arguments=add_arguments, handler=handler)
        return handler
    return register


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evalq", description="Is a quantized embedding model safe to deploy?")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    for name, command in _COMMANDS.items():
        cmd = sub.add_parser(name, help=command.help)
        command.add_arguments(cmd)
        cmd.set_defaults(handler=command.handler)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every registered command: what the docs' generated CLI
    reference reads (docs/gen_pages.py), so it cannot drift from what ``evalq`` parses."""
    return _parser()


# Flags whose value may start with '-' (a negative margin): argparse would read "-5%" as an
# unknown option and say only "expected one argument"; attached as --margin=-5% it reaches
# the value check, which names the flag and the fix.
_DASH_VALUE_FLAGS = ("--margin",)


def _dash_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _DASH_VALUE_FLAGS and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = _parser().parse_args(_dash_values(sys.argv[1:] if argv is None else list(argv)))
    if args.version:
        print(f"evalq {__version__}")
        return EXIT_OK
    if not args.command:
        _parser().print_help()
        return EXIT_BAD_INPUT

    warnformat.install()  # evalq's warnings as one clean line, not its source
    console.install()  # the library parts' progress lines (stderr) and result lines (stdout)
    previous = failure.terminate_as_interrupt()
    try:
        return _dispatch_mapped(args)
    finally:
        failure.restore_sigterm(previous)


def _dispatch_mapped(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except InputError as exc:
        print(f"evalq: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BackendUnavailableError as exc:
        text = str(exc).rstrip(".")
        if "resume" not in text:  # say it once
            text += (". Finished embedding chunks are cached; rerun the same command to "
                     "resume once it is back")
        print(redact(f"evalq: error: the backend stopped answering: {text}."), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        term = isinstance(exc, failure.Terminated)
        print(f"evalq: {'terminated (SIGTERM)' if term else 'interrupted'}; finished "
              "embedding chunks are cached, rerun to resume.", file=sys.stderr)
        return failure.EXIT_SIGTERM if term else failure.EXIT_SIGINT
    except (OSError, MemoryError) as exc:
        user = failure.user_os_error(exc) if isinstance(exc, OSError) else InputError(
            message="out of memory", fix="lower max_docs / resamples / batch_tokens")
        if user is not None:
            print(f"evalq: error: {user}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return _bug(exc)
    except Exception as exc:
        return _bug(exc)


def _bug(exc: BaseException) -> int:
    """evalq's own bug: the traceback goes to a crash log, and the exit is 3."""
    log = getattr(exc, "evalq_crash_log", None) or failure.write_crash_log(exc)
    where = f"the traceback is in {log}" if log else "no log could be written"
    print(redact(f"evalq: internal error (a bug in evalq, not in your input): "
                 f"{type(exc).__name__}: {exc}; {where}. Please report it with that file."),
          file=sys.stderr)
    return failure.EXIT_BUG


def _dispatch(args: argparse.Namespace) -> int:
    handler: _Handler = args.handler
    return handler(args)


def _add_run(run: argparse.ArgumentParser) -> None:
    run.add_argument("recipe", type=Path)
    run.add_argument("-o", "--output", type=Path, help="results folder (default results/<name>)")
    run.add_argument("--max-queries", type=_positive_int, help="evaluate the first N queries only")
    run.add_argument("--max-docs", type=_positive_int,
                     help="cap the corpus (judged documents kept first)")
    run.add_argument("--only", action="append", metavar="VARIANT",
                     help="run these variants only (the reference always runs); repeatable")
    run.add_argument("--no-cache", action="store_true", help="recompute every embedding")
    run.add_argument("--executor", choices=["local", "ray"],
                     help="where encoding runs (overrides the recipe's executor)")
    run.add_argument("--address", help="Ray cluster address for --executor ray (e.g. auto)")
    run.add_argument("--demo", action="store_true",
                     help="exit 0 when the run completed even if gates failed (make demo)")
    run.add_argument("--wide", action="store_true",
                     help="print the full metric table instead of one compact row per variant")
    run.add_argument("--yes", action="store_true",
                     help="start a search grid larger than its search.max_combinations")


@register_command("run", "run a recipe end to end: encode, search, score, gate", _add_run)
def _run(args: argparse.Namespace) -> int:
    # api.run prints the console table (stdout) once the run has written its folder.
    outcome = run(
        args.recipe, output=args.output, max_queries=args.max_queries,
        max_docs=args.max_docs, only=args.only, use_cache=not args.no_cache,
        wide=args.wide, executor=args.executor, address=args.address, yes=args.yes,
    )
    if outcome.passed:
        return EXIT_OK
    return EXIT_OK if args.demo else EXIT_GATE_FAILED


def _add_validate(val: argparse.ArgumentParser) -> None:
    val.add_argument("recipe", type=Path, nargs="+")
    val.add_argument("--here", action="store_true",
                     help="also refuse what this machine cannot run (device, capability)")


@register_command("validate", "check a recipe without running it", _add_validate)
def _validate(args: argparse.Namespace) -> int:
    return EXIT_OK if validate_files(args.recipe, here=args.here) else EXIT_BAD_INPUT


def _add_plan(pln: argparse.ArgumentParser) -> None:
    pln.add_argument("recipe", type=Path)
    pln.add_argument("-o", "--output", type=Path, help="results folder (default results/<name>)")
    pln.add_argument("--only", action="append", metavar="VARIANT")


@register_command("plan", "print what a run would load, encode, cache and gate", _add_plan)
def _plan(args: argparse.Namespace) -> int:
    print_plan(args.recipe, output=args.output, only=args.only)
    return EXIT_OK


def _add_metrics(met: argparse.ArgumentParser) -> None:
    met.add_argument("qrels", type=Path, help="TREC qrels or BEIR qrels .tsv")
    met.add_argument("run", type=Path, help="TREC run file")
    met.add_argument("-m", "--measure", action="append", dest="measures", metavar="MEASURE")
    met.add_argument("--per-query", action="store_true")
    met.add_argument("--json", action="store_true")


@register_command("metrics", "score a TREC run against qrels (like trec_eval)", _add_metrics)
def _metrics(args: argparse.Namespace) -> int:
    print(metrics_report(args.qrels, args.run, args.measures, per_query=args.per_query,
                         as_json=args.json), end="")
    return EXIT_OK


def _add_gate(gate: argparse.ArgumentParser) -> None:
    gate.add_argument("results", type=Path)
    gate.add_argument("--junit", type=Path, help="also write a JUnit XML report")
    gate.add_argument("--method", choices=METHODS,
                      help="re-decide with this interval method instead of the stored one")
    gate.add_argument("--markdown", type=Path, help="also write a markdown job summary")


@register_command("gate", "re-decide the gates of a stored results folder", _add_gate)
def _gate(args: argparse.Namespace) -> int:
    passed = gate_command(args.results, junit=args.junit, markdown=args.markdown,
                          method=args.method)
    return EXIT_OK if passed else EXIT_GATE_FAILED


def _add_certify(cert: argparse.ArgumentParser) -> None:
    cert.add_argument("results", type=Path)
    cert.add_argument("--probe", type=_probe_count, default=32,
                      help="query and document texts kept with their vectors, half each "
                      f"(default 32; at least 2, at most {_PROBE_MOST})")


@register_command("certify", "write a certificate per certified candidate of a results "
                  "folder (RESULTS/certificates/)", _add_certify)
def _certify(args: argparse.Namespace) -> int:
    return certify_command(args.results, probe=args.probe)


def _add_verify(ver: argparse.ArgumentParser) -> None:
    ver.add_argument("certificate", type=Path)
    ver.add_argument("--url", help="an OpenAI-compatible endpoint serving the model "
                     "(e.g. http://127.0.0.1:8000/v1) instead of this machine's engine")
    ver.add_argument("--model", help="the model name the endpoint serves (default: the "
                     "certified model's path)")


@register_command("verify", "check that this machine's engine reproduces a certificate "
                  "(exit 1 naming the cause when it does not)", _add_verify)
def _verify(args: argparse.Namespace) -> int:
    return verify_command(args.certificate, url=args.url, model=args.model)


def _add_calibrate(cal: argparse.ArgumentParser) -> None:
    cal.add_argument("results", type=Path, nargs="?", help="results folder (optional)")
    cal.add_argument("--trials", type=int, default=None,
                     help="simulated trials per population (default 2000; not with --search)")
    cal.add_argument("--json", type=Path, help="also write the table as JSON")
    cal.add_argument("--search", action="store_true",
                     help="simulate the grid search's family-wise false-pass rate instead")
    cal.add_argument("--searches", type=int, default=2000,
                     help="simulated searches per population (with --search)")


@register_command("calibrate", "simulate the gates' error rates on a results "
                  "folder's per-query differences and a synthetic panel (--search: the "
                  "grid search's family-wise false-pass rate)", _add_calibrate)
def _calibrate(args: argparse.Namespace) -> int:
    if args.search:
        if args.results is not None:
            raise InputError(message="--search simulates synthetic grids; it reads no "
                             "results folder", field="RESULTS_DIR",
                             fix="run 'evalq calibrate --search' without a folder")
        if args.trials is not None:  # it was silently ignored
            raise InputError(message="--trials sets the gate calibration's trials; --search "
                             "simulates searches", field="--trials",
                             fix=f"use --searches {args.trials} with --search, or drop --search")
        print(search_calibration_report(searches=args.searches, json_path=args.json))
        return EXIT_OK
    sections = stored_sections_of(args.results) if args.results is not None else None
    print(calibrate_report(args.results, sections,
                           trials=2000 if args.trials is None else args.trials,
                           json_path=args.json))
    return EXIT_OK


def _add_report(rep: argparse.ArgumentParser) -> None:
    rep.add_argument("results", type=Path, nargs="+")
    rep.add_argument("-o", "--output", type=Path,
                     help="HTML file (default RESULTS/report.html, or history.html for several)")


@register_command("report", "HTML report of a results folder (several: history)", _add_report)
def _report(args: argparse.Namespace) -> int:
    default = args.results[0] / "report.html" if len(args.results) == 1 else \
        Path("history.html")
    print(f"report written to {write_report(args.results, args.output or default)}")
    return EXIT_OK


def _add_compare(cmp_: argparse.ArgumentParser) -> None:
    cmp_.add_argument("run_a", type=Path)
    cmp_.add_argument("run_b", type=Path)
    cmp_.add_argument("--markdown", action="store_true", help="print a pull-request comment")


@register_command("compare", "paired differences between two runs of a recipe", _add_compare)
def _compare(args: argparse.Namespace) -> int:
    return compare_command(args.run_a, args.run_b, markdown=args.markdown)


def _add_nothing(_: argparse.ArgumentParser) -> None:
    """A command without flags."""


@register_command("datasets", "list the dataset manifests", _add_nothing)
def _datasets(args: argparse.Namespace) -> int:
    rows = list_datasets()
    for row in rows:
        print(f"{row.name:16s} {row.source:7s} {row.location:40s} {row.split:6s} "
              f"{row.description}")
        # Where the name resolves from (evalq.core.locations: ./datasets first, built-ins last).
        shadows = f"; shadows {row.shadows}" if row.shadows else ""
        print(f"{'':16s} from {row.origin}: {row.file}{shadows}")
    if not rows:
        print("no dataset manifests found (looked in ./datasets)")
    return EXIT_OK


def _add_init(ini: argparse.ArgumentParser) -> None:
    ini.add_argument("-o", "--output", type=Path, help="recipe file (default <name>.yaml)")
    ini.add_argument("--name", help="recipe name (results go to results/<name>)")
    ini.add_argument("--model", help="model folder, pkg:<module> or Hugging Face id")
    data = ini.add_mutually_exclusive_group()
    data.add_argument("--beir", metavar="DIR", help="BEIR folder (corpus, queries, qrels/)")
    data.add_argument("--trec", nargs=3, metavar=("CORPUS", "QUERIES", "QRELS"))
    data.add_argument("--hf", metavar="DATASET", help="BEIR-layout Hugging Face dataset id")
    data.add_argument("--dataset", metavar="NAME", help="a dataset manifest name (pydocs)")
    ini.add_argument("--split", default="test")
    ini.add_argument("--backend", default="inprocess", choices=BACKENDS.names("embedding"))
    ini.add_argument("--quantize", help="comma-separated quantizations to try")
    ini.add_argument("--url", help="server URL for --backend openai/tei")
    ini.add_argument("--route", help="embeddings route on that server (e.g. /embeddings)")
    ini.add_argument("--served-model", help="model name the server expects")
    ini.add_argument("--margin", default="1%", help="allowed nDCG@10 drop (1%% or 0.01)")
    ini.add_argument("--max-queries", type=int, help="slice for a quick first run")
    ini.add_argument("--max-docs", type=int, help="cap the corpus for a quick first run")
    ini.add_argument("--ask", action="store_true", help="prompt even without a terminal")
    ini.add_argument("--force", action="store_true", help="overwrite an existing file")


@register_command("init", "write a first recipe for your model and data "
                  "(asks for what the flags leave open)", _add_init)
def _init(args: argparse.Namespace) -> int:
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


def _add_parity(par: argparse.ArgumentParser) -> None:
    par.add_argument("recipe", type=Path)
    par.add_argument("--texts", type=_positive_int, default=32)


@register_command("parity", "compare every variant's backend against the reference", _add_parity)
def _parity(args: argparse.Namespace) -> int:
    loaded = load_recipe_source(args.recipe)  # a file, or a built-in recipe's name
    plan = build_plan(loaded.recipe, loaded.path, use_cache=False, located=loaded.located)
    return EXIT_OK if parity_only(plan, texts=args.texts) else EXIT_GATE_FAILED


def _add_load(load: argparse.ArgumentParser) -> None:
    load.add_argument("recipe", type=Path)
    load.add_argument("-o", "--output", type=Path, help="results folder (default results/<name>)")
    load.add_argument("--only", action="append", metavar="VARIANT",
                      help="drive these variants only; repeatable")
    load.add_argument("--plan-only", action="store_true",
                      help="re-plan capacity from the stored load results (no traffic)")


@register_command("load", "load-test the served variants and plan capacity", _add_load)
def _load(args: argparse.Namespace) -> int:
    loaded = load_recipe_source(args.recipe)  # a file, or a built-in name, as `evalq run`
    if args.plan_only:
        return replan(loaded.recipe.capacity, results_folder(loaded.recipe, args.output))
    chosen = check_load(loaded.recipe, loaded.located, loaded.path, args.only)
    # the cache only for a database stage: its vectors and tables are the run's
    resolved = build_plan(loaded.recipe, loaded.path, output=args.output,
                          located=loaded.located, use_cache=bool(chosen.databases))
    try:
        return run_load(resolved, chosen)
    except KeyboardInterrupt:  # SIGTERM too (failure.Terminated): the steps are kept
        print("evalq: interrupted; the finished steps are in the results' load/ folder.",
              file=sys.stderr)
        return failure.EXIT_SIGINT


if __name__ == "__main__":
    raise SystemExit(main())
