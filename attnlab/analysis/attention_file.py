"""Reading the heads to analyse from a file: ``.npy``, ``.npz`` or an attnlab attention file.

    .npy / .npz      an array (n, n) (one head) or (H, n, n); more leading axes
                     (e.g. (L, H, n, n)) are flattened to heads.  A ``.npz``
                     holds one array, or names it ``attention`` or ``weights``.
    .safetensors     an ``AttentionMaps`` file (``attnlab.analysis.attention_maps``),
                     or a folder holding one: the encoder self-attention of its
                     first sentence (decoder self-attention for decoder-only
                     models), layers × heads flattened to heads.

A file that is none of these, or unreadable, raises ``UserError`` naming it.
No array is validated here (``attnlab.analysis.inputs`` does it).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from attnlab.errors import UserError

__all__ = ["load_heads"]


def _maps_file(path: Path) -> Path:
    if path.is_dir():
        found = sorted(path.glob("*.safetensors"))
        if len(found) != 1:
            raise UserError(f"{path}: expected one attention .safetensors file in the folder, found {len(found)}")
        return found[0]
    return path


def load_heads(path: str | os.PathLike) -> tuple[np.ndarray, list[str]]:
    """Heads ``(H, n, m)`` float64 and their labels (``"3"``, or ``"L0.H3"`` for attention files)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if path.is_dir() or suffix == ".safetensors":
        from attnlab.analysis.attention_maps import AttentionMaps  # lazy: only for attnlab files

        maps = AttentionMaps.load(_maps_file(path))
        kind = next((k for k in ("encoder", "decoder") if k in maps.kinds), None)
        if kind is None:
            raise UserError(f"{path}: no self-attention (encoder or decoder) in this attention file")
        w = np.asarray(maps.weights(0, kind), dtype=np.float64)  # (L, H, n, n)
        L, H = w.shape[:2]
        return w.reshape(L * H, *w.shape[2:]), [f"L{l}.H{h}" for l in range(L) for h in range(H)]
    if suffix not in (".npy", ".npz"):
        raise UserError(f"{path}: not a .npy/.npz array nor an attnlab attention file (.safetensors)")
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise UserError(f"{path}: cannot read the array ({err})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            keys = list(data.keys())
            key = keys[0] if len(keys) == 1 else next((k for k in ("attention", "weights") if k in keys), None)
            if key is None:
                raise UserError(f"{path}: {len(keys)} arrays ({', '.join(keys) or 'none'}); expected one, "
                                "or one named 'attention' or 'weights'")
            arr = data[key]
    else:
        arr = data
    if arr.dtype.kind not in "fiub":
        raise UserError(f"{path}: expected a numeric array, got dtype {arr.dtype}")
    if arr.ndim < 2:
        raise UserError(f"{path}: expected an array of shape (n, n) or (H, n, n), got {arr.shape}")
    if arr.size == 0:
        raise UserError(f"{path}: empty array of shape {arr.shape}")
    arr = arr.astype(np.float64).reshape(-1, *arr.shape[-2:])
    return arr, [str(h) for h in range(arr.shape[0])]
