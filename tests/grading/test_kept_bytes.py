"""The memory rule's measure (training.memory.kept_bytes) sees a weight's bytes however they are
kept: a tensor, or a storage object with no tensor (torch.UntypedStorage, TypedStorage) in an
attribute, a closure or a container, and what gc.freeze() takes out of the collector's list
where the walk from the model reaches it; and nothing a correct layer holds."""
import gc
import warnings

import pytest
import torch
from torch import nn

from rtp_course.training import memory

FULL = 64 * 64 * 4     # bytes of the full weight each layer below is cut from


@pytest.fixture(autouse=True)
def heap_of_a_rank():
    """The test process's heap before each test set aside (gc.freeze), as a rank's small heap:
    the collector's walks then cost what they cost in a rank, not in a test runner that has
    loaded the whole course. What a test makes is tracked as usual."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def _layer(keep):
    """A Linear whose weight is a cloned half of a full weight; `keep(layer, full)` keeps more."""
    layer = nn.Linear(2, 2, bias=False)
    full = torch.randn(64, 64)
    layer.weight = nn.Parameter(full[:32].clone())
    keep(layer, full)
    return layer


def _kept(keep, roots=True):
    before = memory.live_storages()
    layer = _layer(keep)
    return memory.kept_bytes(before, [list(layer.parameters())], roots=[layer] if roots else ())


def test_a_correct_layer_keeps_nothing():
    assert _kept(lambda layer, full: None) == 0


def test_a_storage_kept_without_a_tensor_counts_wherever_it_is_kept():
    def on_the_module(layer, full):
        layer._keep = full.untyped_storage()

    def copied_in_a_closure(layer, full):
        layer.restore = (lambda kept: (lambda: kept))(full.untyped_storage().clone())

    def in_a_dict_of_tuples(layer, full):
        layer.cache = {"w": (full.untyped_storage(),)}

    def typed(layer, full):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # TypedStorage is deprecated
            layer.typed = full.storage()

    for keep in (on_the_module, copied_in_a_closure, in_a_dict_of_tuples, typed):
        assert _kept(keep) == FULL, keep.__name__
        assert _kept(keep, roots=False) == FULL, keep.__name__   # the collector alone sees it


def test_what_gc_freeze_hides_is_found_from_the_model():
    def frozen(layer, full):
        layer.hidden = [full.untyped_storage(), full.clone()]
        gc.freeze()
    try:
        assert _kept(frozen) == 2 * FULL
    finally:
        gc.unfreeze()
