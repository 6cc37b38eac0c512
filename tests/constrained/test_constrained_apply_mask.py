"""apply_mask and mask_logits against the plain definition, for every float width."""

from __future__ import annotations

import numpy as np
import pytest

from harmonia.constrained import MASK_WORDS, VOCAB_SIZE, apply_mask, mask_logits, mask_to_bool

LOGITS = 201_088  # gpt-oss's unembedding is one short of the vocabulary


def random_mask(rng: np.random.Generator, density: float) -> np.ndarray:
    bits = np.zeros(MASK_WORDS * 32, dtype=np.bool_)
    bits[:VOCAB_SIZE] = rng.random(VOCAB_SIZE) < density
    return np.packbits(bits, bitorder="little").view("<i4").astype(np.int32)


def expected(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The definition: -inf wherever the bit of the id is clear (or past the mask)."""
    allowed = np.zeros(logits.shape[-1], dtype=np.bool_)
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little").astype(np.bool_)
    n = min(bits.size, allowed.size)
    allowed[:n] = bits[:n]
    return np.where(allowed, logits, np.array(-np.inf, dtype=logits.dtype))


DTYPES = [np.float16, np.float32, np.float64, np.longdouble]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("density", [0.0, 1e-4, 0.5, 0.999, 1.0])
def test_apply_mask_matches_the_definition(dtype: type, density: float) -> None:
    rng = np.random.default_rng(int(density * 1000) + len(DTYPES))
    mask = random_mask(rng, density)
    logits = (rng.standard_normal(LOGITS) * 30).astype(dtype)
    logits[rng.integers(0, LOGITS, 50)] = np.nan  # the model's NaNs: kept only if allowed
    logits[:3] = [np.inf, -np.inf, -0.0]
    want = expected(logits, mask)
    got = apply_mask(logits.copy(), mask)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


def test_apply_mask_in_place_and_copy() -> None:
    rng = np.random.default_rng(1)
    mask = random_mask(rng, 0.3)
    logits = rng.standard_normal(LOGITS).astype(np.float32)
    original = logits.copy()
    copy = apply_mask(logits, mask, copy=True)
    assert copy is not logits
    np.testing.assert_array_equal(logits, original)
    same = apply_mask(logits, mask)
    assert same is logits
    np.testing.assert_array_equal(logits, copy)


def test_apply_mask_on_a_batch_padding_and_a_strided_row() -> None:
    rng = np.random.default_rng(2)
    mask = random_mask(rng, 0.5)
    batch = rng.standard_normal((3, VOCAB_SIZE + 40)).astype(np.float32)
    want = np.stack([expected(row, mask) for row in batch])
    np.testing.assert_array_equal(apply_mask(batch.copy(), mask), want)
    assert np.isneginf(apply_mask(batch.copy(), mask)[:, VOCAB_SIZE:]).all()
    # A column-major batch: each row is strided.
    fortran = np.asfortranarray(batch[:, :LOGITS])
    apply_mask(fortran[1], mask)
    np.testing.assert_array_equal(fortran[1], expected(batch[1, :LOGITS], mask))
    np.testing.assert_array_equal(fortran[0], batch[0, :LOGITS])


def test_apply_mask_on_other_byte_orders() -> None:
    rng = np.random.default_rng(3)
    mask = random_mask(rng, 0.5)
    logits = rng.standard_normal(LOGITS).astype(">f4")
    np.testing.assert_array_equal(apply_mask(logits.copy(), mask), expected(logits, mask))


def test_mask_to_bool_pads_and_cuts() -> None:
    mask = np.array([-1], dtype=np.int32)
    assert mask_to_bool(mask, 40).tolist() == [True] * 32 + [False] * 8
    assert mask_to_bool(mask, 3).tolist() == [True] * 3


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16", "float32", "float64"])
def test_mask_logits_on_torch_matches_masked_fill(dtype_name: str) -> None:
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype_name)
    rng = np.random.default_rng(4)
    mask = random_mask(rng, 0.5)
    logits = torch.from_numpy(rng.standard_normal(LOGITS) * 100).to(dtype)
    allowed = torch.from_numpy(mask_to_bool(mask, LOGITS))
    logits[:2] = torch.tensor([float("nan"), float("inf")], dtype=dtype)
    want = logits.masked_fill(~allowed, float("-inf"))
    got = logits.clone()
    assert mask_logits(got, mask) is got
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))
