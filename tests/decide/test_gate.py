"""Gates on constructed data: pass / fail / inconclusive, margins, floors, JUnit."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.core.gates import GateCheck, GateSpec, parse_max_drop
from evalq.core.values import PerQuery
from evalq.decide.drop_evidence import MIN_QUERIES
from evalq.decide.gate import decide, decide_gates, decide_variant
from evalq.plan.gates import GateConfig, gate_spec, validate_gate
from evalq.report.junit import to_junit


def drop_gate(max_drop: str | float, metric: str = "nDCG@10",
              column: str | None = None) -> GateSpec:
    value, relative = parse_max_drop(max_drop)
    return GateSpec(metric=metric, against="qrels", max_drop=value, relative=relative,
                    column=column)


def reference_values(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.2, 0.8, size=n)


# ----------------------------------------------------------------- parsing and validation


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1%", (0.01, True)),
        (" 2.5 % ", (0.025, True)),
        ("0.01", (0.01, False)),
        (0.01, (0.01, False)),
        (0, (0.0, False)),
        ("1e-3", (0.001, False)),
    ],
)
def test_parse_max_drop(text: str | float, expected: tuple[float, bool]) -> None:
    value, relative = parse_max_drop(text)
    assert value == pytest.approx(expected[0])
    assert relative is expected[1]


@pytest.mark.parametrize("text", ["", "abc", "-1%", "-0.01", "1%%", "150%", True, None, "nan"])
def test_parse_max_drop_rejects(text: object) -> None:
    with pytest.raises(InputError) as info:
        parse_max_drop(text)  # type: ignore[arg-type]
    assert info.value.field == "gates.max_drop"
    assert info.value.fix


def test_spec_validation() -> None:
    with pytest.raises(InputError, match="reference value to drop from"):
        GateSpec(metric="overlap@10", against="reference", max_drop=0.01)
    with pytest.raises(InputError, match="exactly one"):
        GateSpec(metric="nDCG@10", against="qrels")
    with pytest.raises(InputError, match="exactly one"):
        GateSpec(metric="nDCG@10", against="qrels", max_drop=0.01, min=0.3)
    with pytest.raises(InputError, match="floors only"):
        GateSpec(metric="nDCG@10", against="qrels", max_drop=0.01, stat="p1")
    with pytest.raises(InputError, match="confidence"):
        GateSpec(metric="nDCG@10", against="qrels", max_drop=0.01, confidence=1.0)
    with pytest.raises(InputError, match="relative"):
        GateSpec(metric="overlap@10", against="reference", min=0.9, relative=True)
    with pytest.raises(InputError, match="against"):
        GateSpec(metric="nDCG@10", against="judgments", max_drop=0.01)  # type: ignore[arg-type]


def test_validate_gate_against_the_registry() -> None:
    assert validate_gate(drop_gate("1%", metric="ndcg_cut_10")).name == "nDCG@10"
    with pytest.raises(InputError, match="against: reference"):
        validate_gate(GateSpec(metric="overlap@10", against="qrels", max_drop=0.01))
    with pytest.raises(InputError, match="against: qrels"):
        validate_gate(GateSpec(metric="nDCG@10", against="reference", min=0.3))
    with pytest.raises(InputError, match="no measure family"):
        validate_gate(GateSpec(metric="nDGC@10", against="qrels", max_drop=0.01))


def test_labels() -> None:
    assert drop_gate("1%").label == "nDCG@10 vs qrels max_drop 1%"
    assert drop_gate("0.02").label == "nDCG@10 vs qrels max_drop 0.02"
    floor = GateSpec(metric="cosine", against="reference", min=0.99, stat="p1")
    assert floor.label == "cosine p1 vs reference min 0.99"


# ----------------------------------------------------------------- allowed drop


def test_identical_runs_pass_under_the_historical_rule() -> None:
    ref = reference_values(200)
    spec = GateSpec(metric="nDCG@10", against="qrels", max_drop=0.01, relative=True,
                    method="percentile", min_nonzero=0)
    check = decide(spec, ref.copy(), ref)
    assert (check.passed, check.verdict) == (True, "pass")
    assert check.figures["delta"] == 0.0
    assert check.figures["p_value"] == 1.0
    # the percentile rule passes identical runs even on tiny samples
    assert decide(spec, ref[:3].copy(), ref[:3]).verdict == "pass"


def test_identical_runs_need_enough_queries_to_certify_the_margin() -> None:
    """200 identical queries do not show that at most 0.5% of all queries differ (exact
    binomial bound at 97.5%: 1.8%); 1,000 do, so the drop is certified within 0.005."""
    ref = reference_values(1000)
    margin = 0.01 * ref[:200].mean()
    few = decide(drop_gate("1%"), ref[:200].copy(), ref[:200])
    assert few.verdict == "inconclusive"
    assert few.figures["nonzero"] == 0
    assert few.figures["sparse_low"] == pytest.approx(-(1 - 0.025 ** (1 / 200)))
    needed = math.ceil(math.log(0.025) / math.log1p(-margin))
    assert few.figures["queries_to_certify"] == needed
    assert f"about {needed} would certify the margin" in few.reason
    many = decide(drop_gate("1%"), ref.copy(), ref)
    assert (many.passed, many.verdict) == (True, "pass")
    assert "exact bound" in many.reason


def test_sparse_differences_are_not_trusted_to_an_interval() -> None:
    """Eight non-zero differences of 300: every interval method would pass this (tiny
    spread), the sparse-data rule does not."""
    ref = reference_values(300)
    cand = ref.copy()
    cand[:8] += 0.001
    for method in ("percentile", "t", "bca", "bootstrap-t"):
        raw = GateSpec(metric="nDCG@10", against="qrels", max_drop=0.01, relative=True,
                       method=method, min_nonzero=0)
        assert decide(raw, cand, ref).verdict == "pass"
    check = decide(drop_gate("1%"), cand, ref)
    assert check.verdict == "inconclusive"
    assert "only 8 of 300" in check.reason
    # queries_needed respects what a pass needs: 10 non-zero at the observed rate 8/300
    assert check.figures["queries_needed"] >= math.ceil(10 * 300 / 8)


def test_clear_drop_fails() -> None:
    ref = reference_values(300)
    cand = ref - 0.1 + np.random.default_rng(1).normal(0.0, 0.05, size=300)
    check = decide(drop_gate("1%"), cand, ref)
    assert (check.passed, check.verdict) == (False, "fail")
    assert check.figures["ci_high"] < -check.figures["margin"]  # type: ignore[operator]
    assert "beyond the margin" in check.reason
    assert check.figures["p_value"] < 0.001  # type: ignore[operator]


def test_small_noisy_sample_is_inconclusive_with_mde() -> None:
    rng = np.random.default_rng(2)
    ref = reference_values(30, seed=2)
    cand = ref + rng.normal(0.0, 0.15, size=30)
    cand += -(cand - ref).mean() + 0.001  # point estimate just above zero
    check = decide(drop_gate("0.01"), cand, ref)
    assert (check.passed, check.verdict) == (False, "inconclusive")
    assert check.figures["delta"] > -0.01  # type: ignore[operator]
    assert check.figures["ci_low"] < -0.01  # type: ignore[operator]
    mde = check.figures["mde"]
    assert isinstance(mde, float) and mde > 0.01  # n=30 cannot certify a 0.01 margin
    needed = check.figures["queries_needed"]
    assert isinstance(needed, int) and needed > 30
    assert "minimum detectable effect" in check.reason
    assert f"about {needed} queries" in check.reason


def test_too_few_varying_queries_never_pass() -> None:
    ref = reference_values(MIN_QUERIES - 1)
    cand = ref + np.random.default_rng(3).normal(0.0, 1e-4, size=ref.size)
    check = decide(drop_gate("10%"), cand, ref)
    assert check.verdict == "inconclusive"
    assert "too few queries" in check.reason
    assert decide(drop_gate("10%"), np.array([]), np.array([])).verdict == "inconclusive"


def test_relative_versus_absolute_margin() -> None:
    rng = np.random.default_rng(4)
    ref = np.clip(0.5 + rng.normal(0.0, 0.1, size=400), 0, 1)
    cand = ref - 0.004 + rng.normal(0.0, 0.0005, size=400)
    relative = decide(drop_gate("1%"), cand, ref)  # margin 1% of ~0.5 = ~0.005
    assert relative.figures["margin"] == pytest.approx(0.01 * ref.mean())
    assert relative.verdict == "pass"
    absolute = decide(drop_gate("0.001"), cand, ref)  # margin 0.001 < drop 0.004
    assert absolute.figures["margin"] == 0.001
    assert absolute.verdict == "fail"


def test_nan_values_fail_loudly() -> None:
    ref = reference_values(50)
    cand = ref.copy()
    cand[7] = np.nan
    check = decide(drop_gate("1%"), cand, ref)
    assert (check.passed, check.verdict) == (False, "fail")
    assert "NaN" in check.reason and check.figures["nan_candidate"] == 1


def test_verdict_is_deterministic() -> None:
    ref = reference_values(60)
    cand = ref + np.random.default_rng(5).normal(-0.003, 0.02, size=60)
    first = decide(drop_gate("1%"), cand, ref)
    assert decide(drop_gate("1%"), cand.copy(), ref.copy()) == first


# ----------------------------------------------------------------- floors


def test_mean_floor_pass_fail_inconclusive() -> None:
    rng = np.random.default_rng(6)
    good = np.clip(rng.normal(0.96, 0.02, size=200), 0, 1)
    gate = GateSpec(metric="overlap@10", against="reference", min=0.9)
    assert decide(gate, good).verdict == "pass"
    bad = np.clip(rng.normal(0.85, 0.05, size=200), 0, 1)
    check = decide(gate, bad)
    assert check.verdict == "fail" and "below the floor" in check.reason
    borderline = np.clip(rng.normal(0.905, 0.1, size=20), 0, 1)
    borderline += 0.905 - borderline.mean()
    assert decide(gate, borderline).verdict == "inconclusive"
    assert decide(gate, np.ones(3)).verdict == "pass"  # constant values decide themselves


def test_p1_and_min_floors_on_cosines() -> None:
    cosines = np.full(1000, 0.999)
    cosines[:5] = 0.95  # five bad texts: 0.5% of them
    p1 = GateSpec(metric="cosine", against="reference", min=0.99, stat="p1")
    low = GateSpec(metric="cosine", against="reference", min=0.99, stat="min")
    assert decide(p1, cosines).verdict == "pass"  # the 1st percentile ignores 0.5%
    check = decide(low, cosines)
    assert check.verdict == "fail" and check.figures["below_floor"] == 5
    with_nan = cosines.copy()
    with_nan[-1] = np.nan
    assert decide(p1, with_nan).verdict == "fail"


# ----------------------------------------------------------------- variants, stored values


def test_gate_spec_names_the_measure_column() -> None:
    """The decisions never parse a metric: the recipe's builder names the per-query column
    (the canonical measure name), and the label keeps the recipe's spelling."""
    spec = gate_spec(GateConfig(metric="ndcg_cut_10", max_drop="1%"), 0.95)
    assert spec.column == "nDCG@10" and spec.label == "ndcg_cut_10 vs qrels max_drop 1%"
    ids = tuple(f"q{i}" for i in range(20))
    values = PerQuery(ids, {"nDCG@10": reference_values(20)})
    assert decide_gates([spec], values, values).checks[0].figures["n"] == 20


def test_decide_gates_pairs_by_query_id() -> None:
    qids = tuple(f"q{i}" for i in range(100))
    ref = reference_values(100)
    cand = ref - 0.001
    overlap = np.full(100, 0.95)
    candidate = PerQuery(qids, {"nDCG@10": cand, "overlap@10": overlap})
    order = np.random.default_rng(7).permutation(100)
    reference = PerQuery(tuple(qids[i] for i in order), {"nDCG@10": ref[order]})
    specs = [
        drop_gate("1%", metric="ndcg_cut_10", column="nDCG@10"),  # as recipe.gates builds it
        GateSpec(metric="overlap@10", against="reference", min=0.9),
        GateSpec(metric="cosine", against="reference", min=0.99, stat="min"),
    ]
    extra = {"cosine": np.array([0.999, 0.98])}
    gate = decide_gates(specs, candidate, reference, extra_values=extra)
    assert [c.verdict for c in gate.checks] == ["pass", "pass", "fail"]
    assert not gate.passed
    assert gate.checks[0].figures["delta"] == pytest.approx(-0.001)
    assert decide_gates(specs, candidate, reference, extra_values=extra) == gate
    with pytest.raises(InputError, match="add R@100"):
        decide_gates([drop_gate("1%", metric="R@100")], candidate, reference)


def test_decide_variant_and_json() -> None:
    ok = GateCheck("a", True, "pass", "fine", {"ci_low": -0.001})
    bad = GateCheck("b", False, "inconclusive", "wide", {"mde": math.inf, "n": 3})
    assert decide_variant([ok]).passed
    assert decide_variant([]).passed
    variant = decide_variant([ok, bad])
    assert not variant.passed
    data = variant.to_dict()
    assert data["checks"][1]["figures"] == {"mde": None, "n": 3}  # type: ignore[index]


def test_junit_parses_and_counts_failures() -> None:
    ok = GateCheck("nDCG@10 vs qrels max_drop 1%", True, "pass", "non-inferior", {})
    bad = GateCheck("overlap@10 vs reference min 0.9", False, "fail", 'mean 0.8 < 0.9 & "x"', {})
    maybe = GateCheck("nDCG@10 vs qrels max_drop 1%", False, "inconclusive", "wide", {"n": 9})
    xml = to_junit(
        {"bf16": decide_variant([ok, ok]), "dyn-int8": decide_variant([maybe, bad])}, "quick"
    )
    root = ET.fromstring(xml.split("?>", 1)[1])
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "4" and suite.get("failures") == "2"
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == ["quick.bf16"] * 2 + ["quick.dyn-int8"] * 2
    failures = [c.find("failure") for c in cases]
    assert [f is not None for f in failures] == [False, False, True, True]
    assert failures[3].get("message") == 'mean 0.8 < 0.9 & "x"'  # type: ignore[union-attr]
    assert failures[2].get("type") == "inconclusive"  # type: ignore[union-attr]
