"""One strict base for every recipe block: pipelines, load tests, scale-out and batch
sensitivity refuse ``true`` where a number belongs, as the recipe's own blocks always did
(pydantic's lax mode reads ``true`` as 1, and before the shared base only the recipe's own
blocks checked)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from evalq.encode.options import ExecutorSpec
from evalq.plan.load import CapacitySection
from evalq.plan.pipelines import PipelineGate
from evalq.plan.sensitivity import BatchSensitivity
from evalq.retrieve.ann import FaissOptions
from evalq.retrieve.firststage import Bm25Options


@pytest.mark.parametrize(("model", "data", "field"), [
    (PipelineGate, {"metric": "nDCG@10", "against": "qrels", "max_drop": 0.01,
                    "depth": True}, "depth"),
    (Bm25Options, {"k1": True}, "k1"),
    (FaissOptions, {"factory": "HNSW32", "train_size": True}, "train_size"),
    (ExecutorSpec, {"type": "ray", "replicas": True}, "replicas"),
    (BatchSensitivity, {"shuffles": True}, "shuffles"),
])
def test_a_boolean_is_not_a_number_in_any_block(model, data, field) -> None:
    with pytest.raises(ValidationError, match=f"'{field}' must be a number, not true"):
        model.model_validate(data)


def test_the_load_blocks_share_the_base() -> None:
    with pytest.raises(ValidationError, match="'target_qps' must be a number, not true"):
        CapacitySection.model_validate({"target_qps": True})


def test_unknown_keys_are_still_refused() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Bm25Options.model_validate({"k": 1.0})
