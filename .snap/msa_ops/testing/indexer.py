"""Checks of the decode-indexer contract (shared/SPEC.md §4 and §6), shared by the CPU and CUDA tests.

* :func:`assert_scores_close`: every page score against the reference, abs/rel 1e-4; ``-inf`` exactly where
  the reference has it (pages not visible); NaN exactly where the reference has it (a visible NaN key), so
  an unwritten (NaN-poisoned) position fails.
* :func:`assert_topk_contract`: TopK structure exact; the history set equals the exact top set except among
  scores tied within ``tie_rtol`` (relative to the row's largest finite history score magnitude).
* :func:`assert_topk_equal`: two TopK tensors equal, history entries compared as sets (their order is not
  part of the contract).
"""

from __future__ import annotations

import math

import torch

from ..reference.indexer import PAGE_SIZE

__all__ = ["poison_scores", "poison_topk", "assert_scores_close", "assert_topk_contract", "assert_topk_equal"]

TOPK_POISON = -7  # never a valid page id nor the -1 padding


def poison_scores(heads: int, tokens: int, max_pages: int, device) -> torch.Tensor:
    """A float32 ``[H, T, max_pages]`` scores buffer full of NaN (every position must be written)."""
    return torch.full((heads, tokens, max_pages), math.nan, dtype=torch.float32, device=device)


def poison_topk(heads: int, tokens: int, topk: int, device) -> torch.Tensor:
    """An int32 ``[H, T, topk]`` TopK buffer full of -7 (every position must be written)."""
    return torch.full((heads, tokens, topk), TOPK_POISON, dtype=torch.int32, device=device)


def assert_scores_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4,
                        what: str = "scores") -> None:
    actual = actual.detach().cpu()
    expected = expected.detach().cpu()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == torch.float32, f"{what}: dtype {actual.dtype}"
    nan = actual.isnan() & ~expected.isnan()
    if bool(nan.any()):
        first = tuple(nan.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(nan.sum())} positions are NaN (unwritten?), first at {first} "
                             f"(expected {expected[first].item()})")
    lost_nan = expected.isnan() & ~actual.isnan()
    if bool(lost_nan.any()):
        first = tuple(lost_nan.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(lost_nan.sum())} positions should be NaN (a NaN key is visible), first at "
                             f"{first}: got {actual[first].item()}")
    inf_mismatch = (actual == -math.inf) != (expected == -math.inf)
    if bool(inf_mismatch.any()):
        first = tuple(inf_mismatch.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(inf_mismatch.sum())} positions differ in being -inf, first at {first}: "
                             f"got {actual[first].item()}, expected {expected[first].item()}")
    finite = expected.isfinite()
    diff = (actual - expected).abs()
    bad = finite & ~(diff <= atol + rtol * expected.abs())
    if bool(bad.any()):
        first = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {int(bad.sum())} of {int(finite.sum())} finite scores off by more than "
                             f"atol {atol} + rtol {rtol}; max abs diff {diff[finite].max().item():.3g}; first at "
                             f"{first}: got {actual[first].item()!r}, expected {expected[first].item()!r}")


def _expected_structure(pos: int, topk: int, init_blocks: int, local_blocks: int):
    """(forced front, number of history entries, forced back) of a row, or None for a padding row."""
    if pos < 0:
        return None
    local = pos // PAGE_SIZE
    if local + 1 <= topk:
        return list(range(local + 1)), 0, []
    return (list(range(init_blocks)), topk - init_blocks - local_blocks,
            list(range(local - local_blocks + 1, local + 1)))


def assert_topk_contract(actual: torch.Tensor, scores: torch.Tensor, positions: torch.Tensor, topk: int = 16,
                         init_blocks: int = 0, local_blocks: int = 1, tie_rtol: float = 1e-5,
                         what: str = "topk") -> None:
    """``actual`` int32 ``[H, T, topk]`` against the (reference) ``scores`` ``[H, T, max_pages]`` and ``positions``."""
    actual = actual.detach().cpu()
    scores = scores.detach().cpu().float()
    positions = positions.detach().cpu().tolist()
    heads, tokens, _ = scores.shape
    assert actual.shape == (heads, tokens, topk), f"{what}: shape {tuple(actual.shape)}"
    assert actual.dtype == torch.int32, f"{what}: dtype {actual.dtype}"
    for t in range(tokens):
        structure = _expected_structure(positions[t], topk, init_blocks, local_blocks)
        for h in range(heads):
            row = actual[h, t].tolist()
            where = f"{what}[{h}, {t}] (pos {positions[t]}): {row}"
            if structure is None:
                assert row == [-1] * topk, f"{where}: a padding row must be all -1"
                continue
            front, history, back = structure
            n = len(front) + history + len(back)
            assert row[n:] == [-1] * (topk - n), f"{where}: entries past {n} must be -1"
            assert row[:len(front)] == front, f"{where}: must start with {front}"
            assert row[n - len(back):n] == back, f"{where}: must end with {back}"
            if history == 0:
                continue
            chosen = row[len(front):len(front) + history]
            lo, hi = len(front), back[0]  # history candidates: pages [lo, hi)
            assert len(set(chosen)) == history, f"{where}: history pages repeat"
            assert all(lo <= p < hi for p in chosen), f"{where}: history pages must lie in [{lo}, {hi})"
            cand = scores[h, t, lo:hi]
            cand = torch.where(cand.isnan(), torch.full_like(cand, -math.inf), cand)
            threshold = torch.sort(cand, descending=True).values[history - 1].item()
            finite = cand[cand.isfinite()]
            tol = tie_rtol * (finite.abs().max().item() if finite.numel() else 0.0)
            chosen_scores = cand[torch.tensor(chosen) - lo]
            assert bool((chosen_scores >= threshold - tol).all()), (
                f"{where}: selected a page scoring {chosen_scores.min().item()} below the top-{history} "
                f"threshold {threshold} (tie tolerance {tol:.3g})")
            must = ((cand > threshold + tol).nonzero().flatten() + lo).tolist()
            missing = sorted(set(must) - set(chosen))
            assert not missing, f"{where}: missed pages {missing} that score above the threshold {threshold}"


def assert_topk_equal(actual: torch.Tensor, expected: torch.Tensor, topk: int = 16, init_blocks: int = 0,
                      local_blocks: int = 1, positions: torch.Tensor | None = None, what: str = "topk") -> None:
    """Equal TopK tensors, the history part of each row compared as a set (given ``positions``) or exactly."""
    actual = actual.detach().cpu()
    expected = expected.detach().cpu()
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
        f"{what}: {tuple(actual.shape)} {actual.dtype} vs {tuple(expected.shape)} {expected.dtype}")
    if positions is None:
        if not torch.equal(actual, expected):
            bad = (actual != expected).any(-1).nonzero()[0].tolist()
            raise AssertionError(f"{what}: rows differ, first {bad}: {actual[bad[0], bad[1]].tolist()} vs "
                                 f"{expected[bad[0], bad[1]].tolist()}")
        return
    a, e = actual.clone(), expected.clone()
    for t, pos in enumerate(positions.detach().cpu().tolist()):
        structure = _expected_structure(pos, topk, init_blocks, local_blocks)
        if structure is None or structure[1] == 0:
            continue
        lo, hi = len(structure[0]), len(structure[0]) + structure[1]
        a[:, t, lo:hi] = a[:, t, lo:hi].sort(dim=-1).values
        e[:, t, lo:hi] = e[:, t, lo:hi].sort(dim=-1).values
    assert_topk_equal(a, e, what=what + " (history as sets)")
