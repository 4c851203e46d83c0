"""A row of an eval folder's ``results.jsonl`` (``attnlab eval``, format ``attnlab-eval/1``) and of its ``wall.jsonl``.

    answer   {"key": "METHOD|β|task|n|depth|sample", "kind": "answer", "method", "budget", "task", "n", "depth",
              "sample", "score", "answer", "expected": [str], "prompt_tokens", ...measurements, ...the plan's counts}
    ppl      {"key": "ppl|METHOD|β|n|windows", "kind": "ppl", "method", "budget", "n", "ppl", "windows", "beta",
              "seconds"}
    skipped  {"key": "METHOD|β|skipped|n", "kind": "skipped", "method", "budget", "n", "reason"}
    wall     {"started": "YYYY-MM-DDTHH:MM:SSZ", "seconds", "rows", "reuse"}           (one line per run of the grid)
    lost     {"method", "budget", "task", "n", "depth", "sample", "key", "expected", "answer", "full_answer", "needle",
              "row", "query_row", ..., "heads": [{...}], "summary"}          (lost-prompts.jsonl, ``attnlab eval-why``)

The rules: ``kind`` picks the row's schema; its ``key`` is the one its fields make (``answer_key``, ``ppl_key``: a
resumed grid finds a row by it); score ∈ [0, 1], β ∈ [0, 1] (0: a plan file's own), depth ∈ [0, 1] or null (a task
not placed at a depth), n ≥ 1, sample ≥ 0, perplexity > 0, every count ≥ 0.  An answer row's measurements (β
measured, seconds, KV tokens and bytes, the plan's counts) are absent from rows measured before each existed and
from another library's reference rows (``benchmarks/kvpress_eval.py``: ``reference``, ``press``, ``compression``,
``question``); the report shows them as –.  A lost prompt's row (``lost_prompts.explain``) is read back when
eval-why runs again (the other methods' rows kept) and by ``benchmarks/results.py``: its top-level fields are declared
here, the per-head tables it holds (``heads``, ``confused_heads``, ``restored_layers``) are read as written; rows
made before ``other_value``, ``confused_heads`` and ``restored_layers`` existed lack them.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter, field_validator, model_validator

from attnlab.errors import UserError
from attnlab.schemas.schema_file import Strict, parse, where

__all__ = ["LOST", "ROW", "WALL", "AnswerRow", "LostRow", "PplRow", "SkippedRow", "WallRow", "read_rows"]

Count = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0)]


def _depth(depth: float | None) -> str:
    return "-" if depth is None else f"{depth:.4f}"   # as ``sample_key`` writes it


class KeyedRow(Strict):
    """A row of one (method, β) at length n whose ``key`` is made from its fields (``expected_key``): a hand-edited
    field or key refused."""

    key: str
    method: str = Field(min_length=1)
    budget: float = Field(ge=0, le=1)
    n: int = Field(ge=1)

    def expected_key(self) -> str:
        raise NotImplementedError

    @model_validator(mode="after")
    def _key(self) -> KeyedRow:
        key = self.expected_key()
        if self.key != key:
            raise ValueError(f"field key: {self.key!r} is not the key of its fields, {key!r}")
        return self


class AnswerRow(KeyedRow):
    """One prompt answered by one (method, β)."""

    kind: Literal["answer"]
    task: str = Field(min_length=1)
    depth: float | None = Field(ge=0, le=1)
    sample: int = Field(ge=0)
    score: float = Field(ge=0, le=1)
    answer: str
    expected: list[str] = Field(min_length=1)
    prompt_tokens: int = Field(ge=1)
    # measurements (absent: measured before the field existed, or another library's row)
    prefill_s: Seconds | None = None
    reused_tokens: Count | None = None
    decode_s: Seconds | None = None
    new_tokens: Count | None = None
    beta: float | None = Field(None, ge=0)
    kv_tokens: float | None = Field(None, ge=0)
    kv_bytes: Count | None = None
    kv_read_tokens: float | None = Field(None, ge=0)
    kv_store_tokens: float | None = Field(None, ge=0)
    kv_store_bytes: Count | None = None
    # the plan's counts (``Method.describe``)
    full_heads: Count | None = None
    tail_heads: Count | None = None
    pages: Count | None = None
    slash_heads: Count | None = None
    slashes: Count | None = None
    block_heads: Count | None = None
    blocks: Count | None = None
    kept_heads: Count | None = None
    kept: Count | None = None
    pattern_counts: dict[str, Count] | None = None
    # another library's row run on the same prompts
    reference: str | None = None
    press: str | None = None
    compression: float | None = Field(None, ge=0, le=1)
    question: str | None = None

    def expected_key(self) -> str:
        return f"{self.method}|{self.budget:g}|{self.task}|{self.n}|{_depth(self.depth)}|{self.sample}"


class PplRow(KeyedRow):
    """The perplexity of one (method, β) at length n on the ``--ppl`` windows."""

    kind: Literal["ppl"]
    ppl: float = Field(gt=0)
    windows: int = Field(ge=1)
    beta: float | None = Field(ge=0)
    seconds: Seconds

    def expected_key(self) -> str:
        return f"ppl|{self.method}|{self.budget:g}|{self.n}|{self.windows}"


class SkippedRow(KeyedRow):
    """A (method, β) the method refused at length n (a budget below its cheapest plan): said, not run."""

    kind: Literal["skipped"]
    reason: str = Field(min_length=1)

    def expected_key(self) -> str:
        return f"{self.method}|{self.budget:g}|skipped|{self.n}"


ROW = TypeAdapter(Annotated[Union[AnswerRow, PplRow, SkippedRow], Field(discriminator="kind")])


class WallRow(Strict):
    """One run of the grid on the folder: when it started (UTC, to the second), its seconds, the rows it measured."""

    started: str
    seconds: Seconds
    rows: Count
    reuse: bool

    @field_validator("started")
    @classmethod
    def _utc(cls, started: str) -> str:
        try:
            datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ")
        except ValueError:
            raise ValueError(f"a UTC time YYYY-MM-DDTHH:MM:SSZ, got {started!r}") from None
        return started


WALL = TypeAdapter(WallRow)


class LostRow(KeyedRow):
    """A prompt full attention answered and the method lost, explained (``attnlab.llm.eval.lost_prompts``)."""

    task: str = Field(min_length=1)
    depth: float | None = Field(ge=0, le=1)
    sample: int = Field(ge=0)
    expected: list[str] = Field(min_length=1)
    answer: str
    full_answer: str
    other_value: str | None = None
    other_needle: list[Count] | None = None
    confused_heads: list[dict[str, Any]] | None = None
    needle: list[Count]
    needle_text: str
    row: Literal["value", "first", "parted"]
    query_row: Count
    predicts: str
    full_next: str
    method_next: str
    first: str
    full_first: str
    method_first: str
    heads: list[dict[str, Any]]
    plan_differs: list[str]
    restored_layers: dict[str, Any] | None = None
    summary: str = Field(min_length=1)

    def expected_key(self) -> str:
        return f"{self.method}|{self.budget:g}|{self.task}|{self.n}|{_depth(self.depth)}|{self.sample}"


LOST = TypeAdapter(LostRow)


def read_rows(path, schema=ROW, option: str | None = None, cut_torn: bool = False) -> list[dict]:
    """The rows of the JSON-lines file ``path``, each through ``schema`` (``ROW``: a results row; ``WALL``: a line of
    wall.jsonl); one UserError line naming the file, the line, the field and the rule otherwise.

    A last line without its newline, or not JSON, is a write a kill tore: left out, and with ``cut_torn`` cut off the
    file (a resumed grid appends after it).  A bad line before the last is refused, never cut."""
    path = Path(path)
    name = where(path, option)
    raw = path.read_bytes() if path.exists() else b""
    lines = raw.splitlines(keepends=True)
    rows, good = [], 0
    for k, line in enumerate(lines, 1):
        try:
            doc = json.loads(line) if line.endswith(b"\n") else None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if k < len(lines):
                raise UserError(f"{name} line {k}: not a JSON row ({err})") from None
            doc = None
        if doc is None:   # the torn last line
            break
        parse(doc, schema, f"{name} line {k}")
        rows.append(doc)
        good += len(line)
    if cut_torn and good < len(raw):
        with open(path, "r+b") as f:
            f.truncate(good)
    return rows
