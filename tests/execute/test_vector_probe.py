"""The probe of a vector file (issue 31): a seeded sample compared with the reference's
vectors of the same documents (or queries); a miss is exit 2 naming the file, the side's
field, the cosine and the ids."""

from __future__ import annotations

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.execute.borrowed import probe_file
from evalq.plan.sides import ProbeOptions


def _unit(rows: int, seed: int = 0) -> np.ndarray:
    m = np.random.default_rng(seed).normal(size=(rows, 16)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


IDS = [f"doc{i}" for i in range(50)]


def test_matching_vectors_pass_and_are_recorded() -> None:
    ref = _unit(50)
    record = probe_file(ref + 1e-6, ref, IDS, ProbeOptions(), file="v.npy",
                        where="candidates.0")
    assert record["passed"] and record["texts"] == 16 and record["rows"] == 50
    assert record["lowest_cosine"] > 0.9999 and record["max_norm_difference"] < 1e-4


def test_one_drifted_row_in_the_sample_fails_with_the_ids() -> None:
    ref = _unit(50)
    sample = np.sort(np.random.default_rng(0).choice(50, size=16, replace=False))
    mine = ref.copy()
    mine[sample[3]] = _unit(1, seed=9)[0]  # another text's vector: cosine far below 0.999
    with pytest.raises(InputError) as caught:
        probe_file(mine, ref, IDS, ProbeOptions(), file="v.npy", where="candidates.0")
    text = str(caught.value)
    assert "v.npy" in text and "lowest cosine" in text and IDS[sample[3]] in text
    assert "candidates.0.documents.probe" in text and "min_cosine" in text
    # a stated, lower tolerance accepts it (and says so in the record)
    record = probe_file(mine, ref, IDS, ProbeOptions(min_cosine=-1.0), file="v.npy",
                        where="candidates.0")
    assert record["min_cosine"] == -1.0 and record["lowest_ids"][0] == IDS[sample[3]]


def test_unnormalized_vectors_fail_on_their_norms() -> None:
    ref = _unit(50)
    with pytest.raises(InputError, match=r"norms differ by up to 1\.0000"):
        probe_file(ref * 2.0, ref, IDS, ProbeOptions(), file="v.npy", where="candidates.0")


def test_a_queries_file_is_probed_and_refused_under_its_own_field() -> None:
    ref = _unit(50)
    ids = [f"q{i}" for i in range(50)]
    record = probe_file(ref, ref, ids, ProbeOptions(), file="q.npy", where="candidates.1",
                        side="queries")
    assert record["side"] == "queries" and record["passed"]
    with pytest.raises(InputError) as caught:
        probe_file(_unit(50, seed=4), ref, ids, ProbeOptions(), file="q.npy",
                   where="candidates.1", side="queries")
    text = str(caught.value)
    assert "candidates.1.queries.probe" in text and "sampled queries" in text
    assert "re-embed the queries" in text and "queries: {path: ..., ids: ..., probe:" in text
