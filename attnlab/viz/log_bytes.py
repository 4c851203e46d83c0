"""Arrays of non-negative shares as compact text for an HTML page: log-quantised bytes, deflated, base64.

    q = 0                                             where x < 10^lo   (0, masked, or below the floor)
    q = 1 + round(254 · (log10 x − lo) / (hi − lo))   otherwise, clipped to 1..255

decoded as x̂ = 10^(lo + (q − 1)(hi − lo)/254): a relative error of at most
10^((hi − lo)/508) − 1 (±3.7 % for lo = −8, hi = 0), the same at every scale — what a
log colour scale needs, and the page says values are approximate.  The bytes are
deflated (zlib, what the browser's ``DecompressionStream("deflate")`` reads) and
base64-encoded; ``encode_log_bytes`` returns the JSON-ready record the page decodes.
``log_quantise`` / ``log_dequantise`` are the byte step alone (a capture file stores its maps so).
"""

from __future__ import annotations

import base64
import zlib

import numpy as np

__all__ = ["encode_log_bytes", "decode_log_bytes", "log_quantise", "log_dequantise"]


def log_quantise(x: np.ndarray, lo: float = -8.0, hi: float = 0.0) -> np.ndarray:
    """q (uint8, the shape of ``x``) for ``x`` ≥ 0 (module docstring)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore"):
        t = (np.log10(np.maximum(x, 1e-300)) - lo) / (hi - lo)
    return np.where(x >= 10.0**lo, 1 + np.clip(np.round(254 * t), 0, 254), 0).astype(np.uint8)


def log_dequantise(q: np.ndarray, lo: float = -8.0, hi: float = 0.0) -> np.ndarray:
    """x̂ = 10^(lo + (q − 1)(hi − lo)/254) for q > 0, else 0 (float64)."""
    return np.where(q > 0, 10.0 ** (lo + (q.astype(np.float64) - 1) * (hi - lo) / 254), 0.0)


def encode_log_bytes(x: np.ndarray, lo: float = -8.0, hi: float = 0.0) -> dict:
    """``{"shape", "lo", "hi", "data"}`` for ``x`` ≥ 0 (module docstring); ``data`` is base64 of deflated uint8."""
    # x: any shape, values in [0, 10^hi]
    q = log_quantise(x, lo, hi)
    return {"shape": list(q.shape), "lo": lo, "hi": hi,
            "data": base64.b64encode(zlib.compress(q.tobytes(), 9)).decode("ascii")}


def decode_log_bytes(rec: dict) -> np.ndarray:
    """The inverse of ``encode_log_bytes`` up to the quantisation (for tests and reading pages back)."""
    q = np.frombuffer(zlib.decompress(base64.b64decode(rec["data"])), dtype=np.uint8).reshape(rec["shape"])
    return log_dequantise(q, rec["lo"], rec["hi"])
