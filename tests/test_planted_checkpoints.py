"""The torch checkpoint reader of `checkpoints` without torch installed: a NumPy stand-in for the
few torch calls it makes, so that the rows it returns, and their order, are checked on every
machine (the real-torch test skips where torch is absent)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from ctx_staircase import checkpoints


class _Tensor:
    """The part of ``torch.Tensor`` the reader uses, over a NumPy array."""

    def __init__(self, array):
        self.array = np.asarray(array)
        self.dtype = self.array.dtype
        self.shape = self.array.shape

    def detach(self):
        return self

    def __getitem__(self, index):
        return _Tensor(self.array[index.array if isinstance(index, _Tensor) else index])

    def float(self):
        return _Tensor(self.array.astype(np.float32))

    def numpy(self):
        return self.array


def _fake_torch(state) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.Tensor = _Tensor
    torch.bfloat16, torch.float16 = object(), np.dtype(np.float16)
    torch.from_numpy = _Tensor
    torch.empty = lambda size, dtype: _Tensor(np.empty(size, dtype))
    torch.load = lambda path, **kwargs: state
    return torch


@pytest.mark.parametrize("stored", [np.float64, np.float16])
def test_a_torch_state_dict_gives_the_rows_asked_for_in_their_order(tmp_path, monkeypatch, stored):
    """The embedding of a (wrapped) state dict is found by name among its tensors, has the
    stored shape, and ``rows`` returns exactly the rows asked for, in the order asked, half
    precision as float32."""
    W = (np.arange(15.0).reshape(5, 3) * 1.5).astype(stored)
    state = {"state_dict": {"model.embed_tokens.weight": _Tensor(W), "lm_head.bias": _Tensor([0])}}
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(state))
    path = tmp_path / "model.pt"
    path.write_bytes(b"")
    embedding = checkpoints.load_embedding(path)
    assert embedding.key == "model.embed_tokens.weight" and embedding.vocab_rows == 5
    assert embedding.W_E.shape == (5, 3)
    ids = np.array([4, 0, 3, 0])
    rows = embedding.rows(ids)
    assert rows.dtype == (np.float32 if stored == np.float16 else np.float64)
    np.testing.assert_array_equal(rows, W[ids].astype(rows.dtype))
    np.testing.assert_array_equal(np.asarray(embedding.W_E), W.astype(rows.dtype))
