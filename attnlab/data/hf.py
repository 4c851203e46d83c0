"""Load a parallel corpus from Hugging Face ``datasets``.

Spec forms (after the ``hf:`` prefix):

- ``hf:NAME:CONFIG`` — a dataset of the hub, e.g. ``hf:opus_books:en-it`` (the
  thesis's corpus), loaded with ``datasets.load_dataset(NAME, CONFIG)``;
- ``hf:DIR`` or ``hf:DIR:SRC-TGT`` — a dataset saved on disk with
  ``Dataset.save_to_disk(DIR)`` / ``DatasetDict.save_to_disk(DIR)``, loaded with
  ``datasets.load_from_disk(DIR)`` (no network).

Rows are either in the translation format of ``opus_books``,
``{"translation": {"en": ..., "it": ...}}``, or have one column per language
(``en``, ``it``).  The language pair comes from ``CONFIG`` (``en-it``) or from the
``src_lang``/``tgt_lang`` arguments.

Splits: if the dataset has the requested split it is used (``dev`` also finds
``validation``); datasets without dev or test (opus_books has only ``train``) are
split deterministically by source sentence, ``b = crc32(src) mod 100``:
``b = 0`` → test, ``b = 1`` → dev, ``b ≥ 2`` → train.  A dataset that is not a
``DatasetDict`` is split the same way.

No reachable hub: a clear :class:`~attnlab.errors.UserError`; the hub is probed
(3 s) before loading, so no slow retries.  Offline, a dataset must be local:
either cached (downloaded once, then ``HF_DATASETS_OFFLINE=1``) or saved with
``save_to_disk`` and named ``hf:DIR``.
"""

from __future__ import annotations

import socket
import zlib
from pathlib import Path
from urllib.parse import urlparse

from attnlab.data.corpus import Pair, ParallelCorpus
from attnlab.errors import UserError

_OFFLINE_HELP = ("the dataset must be local: download it once where the hub is reachable, then "
                 "either set HF_DATASETS_OFFLINE=1 to use the cached copy, or save it with "
                 "datasets.load_dataset(NAME, CONFIG).save_to_disk(DIR) and pass hf:DIR")


def _split_of(src: str) -> str:
    """Deterministic split of a source sentence: crc32 bucket 0 → test, 1 → dev, else train."""
    b = zlib.crc32(src.encode("utf-8")) % 100
    return "test" if b == 0 else "dev" if b == 1 else "train"


def _offline() -> bool:
    import datasets

    return bool(datasets.config.HF_HUB_OFFLINE)


def _hub_unreachable(timeout: float = 3.0) -> str | None:
    """``None`` if a TCP connection to the hub endpoint opens, else the reason."""
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as err:
        return f"{host}:{port}: {err.strerror or err}"


def _parse(spec: str) -> tuple[str, str | None, bool]:
    """``hf:REST`` → (name or directory, config or None, is_local_directory)."""
    rest = spec[3:]
    if not rest:
        raise UserError(f"corpus spec {spec!r}: expected hf:NAME:CONFIG (e.g. hf:opus_books:en-it) or hf:DIR")
    if Path(rest).is_dir():
        return rest, None, True
    head, _, tail = rest.rpartition(":")
    if head and Path(head).is_dir():
        return head, tail, True
    if rest.startswith(("/", "./", "../", "~")):
        raise UserError(f"corpus spec {spec!r}: no saved dataset (directory) at {head or rest}")
    name, _, config = rest.partition(":")
    return name, config or None, False


def _langs(config: str | None, src_lang: str | None, tgt_lang: str | None) -> tuple[str | None, str | None]:
    if config and "-" in config and (src_lang is None or tgt_lang is None):
        a, _, b = config.partition("-")
        src_lang, tgt_lang = src_lang or a, tgt_lang or b
    return src_lang, tgt_lang


def _rows_to_pairs(ds, where: str, src_lang: str | None, tgt_lang: str | None,
                   only: str | None) -> tuple[list[Pair], str, str]:
    """Pairs from a ``datasets.Dataset``; ``only`` keeps pairs of that hash split."""
    columns = ds.column_names
    if "translation" in columns:
        rows = ds["translation"]
        if not rows:
            raise UserError(f"{where}: empty corpus (no rows)")
        if src_lang is None or tgt_lang is None:
            keys = list(rows[0])
            if len(keys) != 2:
                raise UserError(f"{where}: translation rows have languages {keys}; "
                                f"name the pair, e.g. hf:{where}:en-it")
            src_lang, tgt_lang = keys
        try:
            src_col = [r[src_lang] for r in rows]
            tgt_col = [r[tgt_lang] for r in rows]
        except KeyError as err:
            raise UserError(f"{where}: no language {err} in the translation column "
                            f"(has {list(rows[0])})") from None
    else:
        if src_lang is None or tgt_lang is None:
            raise UserError(f"{where}: no 'translation' column (columns: {columns}); "
                            f"name the language columns, e.g. hf:{where}:en-it")
        for lang in (src_lang, tgt_lang):
            if lang not in columns:
                raise UserError(f"{where}: no column {lang!r} (columns: {columns})")
        src_col, tgt_col = ds[src_lang], ds[tgt_lang]
    pairs = []
    for number, (src, tgt) in enumerate(zip(src_col, tgt_col), start=1):
        src, tgt = (src or "").strip(), (tgt or "").strip()
        if not src or not tgt:
            raise UserError(f"{where}: row {number}: empty {'source' if not src else 'target'} side")
        if only is None or _split_of(src) == only:
            pairs.append(Pair(src, tgt))
    return pairs, src_lang, tgt_lang


def _pick_split(dd, split: str, where: str):
    """(dataset, hash split to keep or None) for the requested split of a DatasetDict."""
    aliases = {"dev": ("dev", "validation", "valid"), "train": ("train",), "test": ("test",)}
    carved = "train" in dd and not all(any(a in dd for a in aliases[s]) for s in ("dev", "test"))
    if split == "train" and carved:  # train gives up the rows carved out for dev/test
        return dd["train"], "train"
    for name in aliases.get(split, (split,)):
        if name in dd:
            return dd[name], None
    if carved and split in ("dev", "test"):
        return dd["train"], split
    raise UserError(f"{where}: no split {split!r} (has {list(dd)})")


def read_hf(spec: str, split: str = "train", src_lang: str | None = None,
            tgt_lang: str | None = None) -> ParallelCorpus:
    """Load ``hf:NAME:CONFIG`` (hub or cache) or ``hf:DIR[:SRC-TGT]`` (``save_to_disk``)."""
    import datasets

    name, config, local = _parse(spec)
    src_lang, tgt_lang = _langs(config, src_lang, tgt_lang)
    if local:
        try:
            loaded = datasets.load_from_disk(name)
        except (FileNotFoundError, ValueError) as err:
            raise UserError(f"{name}: not a dataset saved with save_to_disk ({err})") from None
    else:
        if not _offline():
            reason = _hub_unreachable()
            if reason is not None:
                raise UserError(f"corpus spec {spec!r}: cannot reach the Hugging Face hub "
                                f"({reason}); {_OFFLINE_HELP}")
        try:
            loaded = datasets.load_dataset(name, config)
        except ConnectionError as err:  # offline mode and not in the cache
            raise UserError(f"corpus spec {spec!r}: not in the local cache and the hub is "
                            f"not reachable ({' '.join(str(err).split())}); {_OFFLINE_HELP}") from None
        except (FileNotFoundError, ValueError) as err:
            raise UserError(f"corpus spec {spec!r}: {' '.join(str(err).split())[:300]}") from None
    if isinstance(loaded, datasets.DatasetDict):
        ds, only = _pick_split(loaded, split, name)
    else:
        ds, only = loaded, (split if split in ("train", "dev", "test") else None)
    pairs, src_lang, tgt_lang = _rows_to_pairs(ds, name, src_lang, tgt_lang, only)
    if not pairs:
        raise UserError(f"{spec}: empty corpus for split {split!r}")
    return ParallelCorpus(pairs, name=spec, split=split, src_lang=src_lang, tgt_lang=tgt_lang)


