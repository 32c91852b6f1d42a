"""`evalq metrics QRELS RUN`: the library function behind it, on real files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import pytrec_eval

from evalq.app.metrics_command import DEFAULT_MEASURES, metrics_report
from evalq.core.errors import InputError


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    rng = np.random.default_rng(11)
    folder = tmp_path_factory.mktemp("metrics")
    qrels = {f"q{i}": {f"d{j}": int(rng.integers(0, 4)) for j in rng.choice(300, 12, False)}
             for i in range(30)}
    run = {f"q{i}": {f"d{j}": float(rng.integers(0, 20)) / 7 for j in rng.choice(300, 150, False)}
           for i in range(28)}  # q28, q29 missing from the run
    run["q_unjudged"] = {"d1": 1.0}
    trec = folder / "qrels.txt"
    trec.write_text("".join(f"{q} 0 {d} {r}\n" for q, docs in qrels.items()
                            for d, r in docs.items()))
    beir = folder / "qrels.tsv"
    beir.write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q}\t{d}\t{r}\n" for q, docs in qrels.items() for d, r in docs.items()))
    run_path = folder / "run.trec"
    lines = []
    for q, docs in run.items():
        ranked = sorted(docs.items(), key=lambda item: -item[1])
        lines += [f"{q} Q0 {d} {r} {s!r} test" for r, (d, s) in enumerate(ranked, start=1)]
    run_path.write_text("\n".join(lines) + "\n")
    # The oracle reads the same text the files hold.
    return trec, beir, run_path, qrels, run


def _pytrec_means(qrels: dict, run: dict) -> dict[str, float]:
    res = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg_cut.10", "recall.100", "map_cut.100", "P.10"}).evaluate(run)
    per_q = {k: [res[q][v] if q in res else 0.0 for q in qrels]
             for k, v in (("nDCG@10", "ndcg_cut_10"), ("R@100", "recall_100"),
                          ("AP@100", "map_cut_100"), ("P@10", "P_10"))}
    return {k: float(np.mean(v)) for k, v in per_q.items()}


@pytest.mark.parametrize("which", [0, 1], ids=["trec-qrels", "beir-qrels"])
def test_json_means_equal_pytrec_eval(files, which: int) -> None:
    qrels_path, run_path, qrels, run = files[which], files[2], files[3], files[4]
    with pytest.warns(UserWarning):
        out = json.loads(metrics_report(qrels_path, run_path, as_json=True))
    assert list(out["measures"]) == list(DEFAULT_MEASURES)
    assert out["num_q"] == 30
    assert out["num_q_missing_from_run"] == 2
    assert out["num_q_unjudged_ignored"] == 1
    for name, value in _pytrec_means(qrels, run).items():
        assert out["measures"][name] == pytest.approx(value, abs=1e-9)


def test_text_output_is_trec_eval_like(files) -> None:
    with pytest.warns(UserWarning) as caught:
        text = metrics_report(files[0], files[2], ["ndcg_cut_10", "P@5"], per_query=True)
    messages = " ".join(str(w.message) for w in caught)
    assert "2 of 30 qrels queries have no results" in messages
    assert "1 run queries have no judgments" in messages
    lines = [line.split("\t") for line in text.splitlines()]
    assert all(len(parts) == 3 for parts in lines)
    assert [p[1] for p in lines].count("all") == 3  # num_q + two measures
    assert lines[-2][0].strip() == "nDCG@10" and lines[-1][0].strip() == "P@5"
    per_query = [p for p in lines if p[1] != "all"]
    assert len(per_query) == 2 * 30
    assert [p.strip() for p in lines[-3]] == ["num_q", "all", "30"]


def test_unknown_measure_is_input_error(files) -> None:
    with pytest.raises(InputError, match="Did you mean"):
        metrics_report(files[0], files[2], ["ndgc@10"])
