"""A calibration as attnlab ships it, read: only the tables the calibrated methods read, at a precision keeping
their plans (written and proved by ``calibration.proof.write_compact``, ``attnlab calibrate``).

    cal = read_compact(path, option)                    # a ``Calibration`` holding those tables
    cal = load_calibration(path, option, known_method)  # either form: the statistics (.npz) or an archive

A table the archive does not hold is refused when a method reads it, in one line naming the file and the table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnlab.errors import UserError
from attnlab.llm.calibration.statistics import Calibration
from attnlab.schemas.calibration import TABLE_SHAPES, load

__all__ = ["PER_OPTION", "CompactCalibration", "compact_of", "load_calibration", "read_compact"]

PER_OPTION = tuple(t for t, dims in TABLE_SHAPES.items() if "Gw" in dims)   # a value per grid option: the large tables


class CompactCalibration(Calibration):
    """A ``Calibration`` read from an archive: the tables it holds; reading another one is a one-line UserError."""

    source = ""

    def __getattr__(self, name: str):
        # only called when the attribute is absent: a table the archive does not keep
        if name in TABLE_SHAPES:
            raise UserError(f"{self.source}: the calibration archive holds no table {name!r} (it keeps what "
                            f"{', '.join(self.made_for)} read); calibrate with --calibrate TEXT for this method")
        raise AttributeError(name)

    def save(self, path) -> Path:
        raise UserError(f"{path}: a compact calibration is written by `attnlab calibrate`, not saved as statistics")


def read_compact(path, option: str | None = None, known_method=None) -> CompactCalibration:
    """The ``Calibration`` an archive holds (``attnlab.schemas.calibration.load``: refused in one line if broken)."""
    from attnlab.schemas.schema_file import where

    return compact_of(load(path, option, known_method), where(path, option))


def compact_of(archive, source: str) -> CompactCalibration:
    """The ``Calibration`` of an archive read already (``CalibrationArchive``: header and tables); ``source``: how a
    message names its file."""
    h = archive.header
    shape = {"num_layers": h.num_layers, "num_heads": h.num_heads, "num_kv_heads": h.num_kv_heads,
             "windows": h.windows}
    cal = CompactCalibration(shape, h.n, [tuple(c) for c in h.candidates], h.err_rows)
    cal.w_grid, cal.g_grid = list(h.w_grid), list(h.g_grid)
    cal.pattern_keys = list(h.pattern_keys)
    for name in TABLE_SHAPES:
        if name in archive.tables:
            setattr(cal, name, archive.tables[name].astype(np.float64))
        else:
            del cal.__dict__[name]
    cal.source, cal.made_for, cal.header = source, list(h.methods), h
    return cal


def load_calibration(path, option: str | None = None, known_method=None) -> Calibration:
    """A calibration file in either form: the statistics ``Calibration.save`` wrote (``.npz``, a zip file) or a
    compact archive (``attnlab calibrate``); ``known_method``: the registry's test of the methods it was made for."""
    import zipfile

    if zipfile.is_zipfile(path):   # False for a folder, a FIFO, a missing file: the archive's reader names each
        return Calibration.load(path, option)
    return read_compact(path, option, known_method)
