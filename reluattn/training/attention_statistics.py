"""What a run's attention looks like, measured on a fixed batch at every validation (metrics.jsonl's "attention").

    stats = attention_statistics([[weights_block_0, weights_block_1, ...], ...])   # chunks of (B, H, T, L)
    stats = measure_attention(engine.attention_weights, images, config.model)       # the loop's call,
                    # images = the first statistics_images(...) validation images, the same at every validation

Per block (lists indexed by block), over every row (image, head, query) of the weights w (B, H, T, L):

    row_sum_mean, row_sum_std  mean and standard deviation of sum_j w_ij (softmax: 1; relu / L: ~0.4 at init)
    entropy_ratio              mean over rows of H(p_i) / log L, p_i = |w_i| / sum_j |w_ij| (1: uniform rows)
    zero_fraction              the fraction of weights that are exactly 0 (relu's inactive scores)
    top_share                  mean over rows of the share of sum_j |w_ij| held by its top 0.2 % of entries:
                               max(1, round(0.002 L)) entries, as in notebook 05 (reluattn.attention_maps;
                               with L = 65 that is the largest weight of the row, with L = 1025 the top 2)
    regulariser                mean over rows of the model's r_i (numpy_backend/regulariser.py: ReLUFormer's
                               row-sum + entropy regulariser, a secondary reading), c = entropy_margin, of |w|
                               (w itself for non-negative kinds), as a number to watch whether or not it is
                               trained with
    alpha, gamma               per block, per head: the learned length exponent alpha_h and gamma_h =
                               exp(-beta_h) (beta_h = attn.length.log_scale), when the model learns them

Rows whose weights are all zero (relu rows can be) have no distribution: they count in the row sums and the
zero fraction and are left out of entropy_ratio and top_share. |w| makes the entropy defined for kinds with
negative weights (identity, gelu); for non-negative kinds it is w itself. Everything is NumPy: element-wise
in float32, sums and the statistics in float64.
"""

from __future__ import annotations

import math

import numpy as np

from ..attention_maps import top_share
from ..numpy_backend.regulariser import regulariser_rows

TOP_FRACTION = 0.002     # "top 0.2 %" of a row's entries
STATISTICS_IMAGES = 256  # the fixed batch: the first this many validation images ...
TOTAL_ELEMENTS = 2 ** 28  # ... or fewer, so that all their weights (images * depth * H * T * L) stay below this
CHUNK_ELEMENTS = 2 ** 25  # at most this many weights (B * depth * H * T * L) held at once


def _row_values(weights, entropy_margin: float) -> dict:
    """Per-row values of one block's weights (B, H, T, L), flattened over (B, H, T). Element-wise work in
    float32 (the weights' precision), sums over a row in float64."""
    w = np.asarray(weights, dtype=np.float32)  # (B, H, T, L)
    length = w.shape[-1]
    sums = w.sum(axis=-1, dtype=np.float64)  # (B, H, T), signed
    mass = np.abs(w) if w.min(initial=0.0) < 0 else w  # (B, H, T, L)
    total = mass.sum(axis=-1, dtype=np.float64)  # (B, H, T)
    live = total > 0  # (B, H, T): rows with a distribution
    # H(p) = log S - sum_j m_j log m_j / S with S = sum_j m_j (0 log 0 = 0), one log over the weights.
    mlogm = (mass * np.log(np.where(mass > 0, mass, 1.0))).sum(axis=-1, dtype=np.float64)  # (B, H, T)
    safe_total = np.where(live, total, 1.0)  # (B, H, T)
    entropy = np.where(live, np.log(safe_total) - mlogm / safe_total, 0.0)  # (B, H, T)
    top = top_share(mass, TOP_FRACTION)  # (B, H, T), notebook 05's definition of "the top 0.2 %"
    log_length = math.log(length)
    regulariser = regulariser_rows(mass.astype(np.float64), entropy_margin)[0]  # (B, H, T, 1), the model's r_i
    return {"row_sum": sums.ravel(), "entropy_ratio": (entropy[live] / log_length if length > 1 else entropy[live]),
            "top_share": top[live], "regulariser": regulariser.ravel(),
            "zeros": int(np.count_nonzero(w == 0)), "entries": int(w.size)}


def _mean(values) -> float | None:
    return float(np.mean(values)) if len(values) else None  # None, not NaN: metrics.jsonl stays valid JSON


def attention_statistics(chunks, entropy_margin: float = 0.7, params=None) -> dict:
    """The statistics above from `chunks`: an iterable of lists (one (B, H, T, L) array per block), the
    attention weights of successive image batches. `params` (optional) adds the learned alpha / gamma."""
    per_block = None
    for chunk in chunks:
        rows = [_row_values(weights, entropy_margin) for weights in chunk]
        if per_block is None:
            per_block = [[row] for row in rows]
        elif len(rows) != len(per_block):
            raise ValueError(f"a chunk has {len(rows)} blocks of weights, an earlier one {len(per_block)}")
        else:
            for collected, row in zip(per_block, rows):
                collected.append(row)
    if not per_block:
        raise ValueError("attention_statistics needs at least one chunk of weights")
    stats = {"row_sum_mean": [], "row_sum_std": [], "entropy_ratio": [], "zero_fraction": [], "top_share": [],
             "regulariser": []}
    for collected in per_block:
        joined = {name: np.concatenate([row[name] for row in collected])
                  for name in ("row_sum", "entropy_ratio", "top_share", "regulariser")}
        stats["row_sum_mean"].append(float(joined["row_sum"].mean()))
        stats["row_sum_std"].append(float(joined["row_sum"].std()))
        stats["entropy_ratio"].append(_mean(joined["entropy_ratio"]))
        stats["top_share"].append(_mean(joined["top_share"]))
        stats["regulariser"].append(float(joined["regulariser"].mean()))
        stats["zero_fraction"].append(sum(row["zeros"] for row in collected) / sum(row["entries"] for row in collected))
    if params is not None:
        stats.update(learned_length_factors(params))
    return stats


def learned_length_factors(params) -> dict:
    """{"alpha": [[alpha_h per head] per block], "gamma": [[exp(-beta_h)] per block]} from the blocks'
    learned length parameters (attn.length.alpha / attn.length.log_scale), each when present; {} without
    them. Works on NumPy and on device (JAX) trees alike: only these small leaves are copied to the host."""
    blocks = params["blocks"]
    lengths = [block["attn"].get("length") for block in blocks]
    if not lengths or any(length is None for length in lengths):
        return {}
    factors = {}
    if all("alpha" in length for length in lengths):
        factors["alpha"] = [[float(a) for a in np.asarray(length["alpha"], dtype=np.float64)] for length in lengths]
    if all("log_scale" in length for length in lengths):
        factors["gamma"] = [[float(math.exp(-b)) for b in np.asarray(length["log_scale"], dtype=np.float64)]
                            for length in lengths]
    return factors


def _weights_per_image(cfg) -> int:
    return cfg.depth * cfg.heads * cfg.num_tokens * cfg.num_tokens


def statistics_images(cfg, available: int) -> int:
    """How many of the first validation images form the fixed batch: STATISTICS_IMAGES, fewer for long
    sequences (1,025 tokens: 14 images at depth 6 with 3 heads), so one measurement stays a few seconds."""
    return max(1, min(available, STATISTICS_IMAGES, TOTAL_ELEMENTS // _weights_per_image(cfg)))


def chunk_size(cfg, images: int) -> int:
    """Images per call so that one chunk's weights hold at most CHUNK_ELEMENTS numbers."""
    return max(1, min(images, CHUNK_ELEMENTS // _weights_per_image(cfg)))


def measure_attention(attention_weights, images: np.ndarray, cfg, params=None) -> dict:
    """attention_statistics of `attention_weights(images chunk) -> [(b, H, T, L) per block]` over uint8
    `images`, in equal chunks (one compilation); images beyond a whole number of chunks are left out."""
    size = chunk_size(cfg, len(images))
    count = len(images) // size * size
    chunks = (attention_weights(images[start:start + size]) for start in range(0, count, size))
    return attention_statistics(chunks, cfg.attention.entropy_margin, params)


__all__ = ["attention_statistics", "learned_length_factors", "measure_attention", "chunk_size", "statistics_images", "TOP_FRACTION",
           "STATISTICS_IMAGES"]
