"""The fuzzers can fail the right way (issue 32): a parser bug planted in each parser a
fuzzer drives must make that fuzzer fail.

Two bugs are planted in turn (monkeypatched where the fuzzer's check calls the parser):

- *crash on valid input*: the real parser runs, and when it would accept, a KeyError is
  raised instead. A fuzzer whose inputs were all refused would never see it, which is why
  ``fuzzkit.run_fuzzer`` requires accepted inputs.
- *accept garbage*: the parser returns a plausible value for any input. A fuzzer that
  only checks "no other exception" would pass it, which is why ``run_fuzzer`` requires
  refused inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fuzzkit
import numpy as np
import pytest
import test_fuzz
import test_fuzz_surfaces
from fuzzkit import run_fuzzer

EXAMPLES = 60

# (module, the name its check calls, the fuzzer's strategy and check, a garbage answer)
PARSERS: dict[str, tuple[Any, str, str, Callable[..., Any]]] = {
    "BEIR JSONL": (test_fuzz, "read_jsonl_records", "BEIR JSONL", lambda *a, **k: []),
    "TREC qrels": (test_fuzz, "read_qrels", "TREC qrels and runs", lambda *a, **k: {}),
    "TREC runs": (test_fuzz, "read_run", "TREC qrels and runs", lambda *a, **k: {}),
    "OpenAI replies": (test_fuzz, "parse_openai_reply", "HTTP replies",
                       lambda body, n, *a: np.zeros((n, 2), np.float32)),
    "TEI replies": (test_fuzz, "parse_tei_reply", "HTTP replies",
                    lambda body, n, *a: np.zeros((n, 2), np.float32)),
    "load answers": (test_fuzz_surfaces, "count_items", "load answers", lambda *a: None),
    "rerank answers": (test_fuzz_surfaces, "parse_rerank_reply", "rerank answers",
                       lambda body, n, *a: np.zeros(n)),
}


@pytest.fixture(autouse=True)
def _forget_planted_counts() -> Any:
    """A planted run stops early by design: its counts are not the fuzzers' figures
    (test_fuzz_surfaces.test_zz_counts reads the shared tables)."""
    yield
    for table in (fuzzkit.COUNTS, fuzzkit.REFUSED):
        for key in [k for k in table if k[0].startswith("planted")]:
            del table[key]


def _fuzzer(module: Any, name: str) -> tuple[Any, Callable[[Any], None]]:
    table = module.FUZZERS if module is test_fuzz else module.PARSERS
    return table[name]


def _crash_on_accept(real: Callable[..., Any]) -> Callable[..., Any]:
    def planted(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if out is None or (isinstance(out, str) and out == "bad_response"):
            return out  # count_items' refusal is a verdict, not an exception
        raise KeyError("planted: crashes on input the real parser accepts")
    return planted


@pytest.mark.parametrize("parser", list(PARSERS))
def test_a_crash_on_valid_input_fails_the_fuzzer(parser: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    module, attr, fuzzer, _ = PARSERS[parser]
    if attr == "count_items":  # accepted answers are None: crash on those instead
        real = getattr(module, attr)

        def planted(*args: Any) -> Any:
            verdict = real(*args)
            if verdict is None:
                raise KeyError("planted: crashes on an answer the real parser accepts")
            return verdict
        monkeypatch.setattr(module, attr, planted)
    else:
        monkeypatch.setattr(module, attr, _crash_on_accept(getattr(module, attr)))
    strategy, check = _fuzzer(module, fuzzer)
    with pytest.raises(BaseException) as caught:
        run_fuzzer(f"planted crash: {parser}", EXAMPLES, strategy, check)
    assert "planted" in repr(caught.value) or "KeyError" in repr(caught.value)


@pytest.mark.parametrize("fuzzer", sorted({p[2] for p in PARSERS.values()}))
def test_a_parser_that_accepts_garbage_fails_the_fuzzer(fuzzer: str,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Every parser the fuzzer drives accepts anything (a fuzzer that drives two readers
    still sees refusals from the one left intact)."""
    module = None
    for mod, attr, name, garbage in PARSERS.values():
        if name == fuzzer:
            monkeypatch.setattr(mod, attr, garbage)
            module = mod
    strategy, check = _fuzzer(module, fuzzer)
    with pytest.raises(Exception):  # noqa: B017 - the fuzzer fails, by its counts or checks
        run_fuzzer(f"planted garbage: {fuzzer}", EXAMPLES, strategy, check)
