"""A calibration that contains retrieval: real text windows mixed with synthetic retrieval prompts.

A calibration on prose never sees a head copy a fact from far back, so the option errors
(``Calibration.err``) price cutting a retrieval head as cheap.  The mix adds, next to the text
windows, prompts of the retrieval tasks (``attnlab.llm.eval.tasks``) with their answer appended
(teacher-forced), on which the option errors are measured **on the answer rows only**:

    window  = prompt(task, seed') ‖ answer          |window| = n   (the prompt is made n − |answer| tokens long)
    rows    = { |prompt| − 1, …, n − 2 }             the queries that predict the answer tokens

and the knapsack's error of an option is the mean over all windows (text and mixed alike, one
weight each).  Mix spec ``"niah:2,vt:1"`` = 2 NIAH and 1 variable-tracking prompt.  The prompts
never are the evaluation's: another seed (``MIX_SEED`` + index) and the calibration text as
haystack (the evaluation defaults to RULER's noise), at depths spread over the context; a task with
calibration phrasings of its own (``for_calibration``: the pass-key variants) says its needle, question
and instruction in words no evaluation prompt uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.errors import UserError

__all__ = ["MIX_SEED", "MixWindow", "mix_windows", "parse_mix"]

MIX_SEED = 1_000_003  # seeds of the mixed prompts: far from any evaluation seed (eval's default is 0)


@dataclass
class MixWindow:
    """One synthetic calibration window: ``ids`` (1, n) and the ``rows`` the option errors are measured on."""

    task: str
    ids: torch.Tensor
    rows: torch.Tensor


def parse_mix(text: str | None, option: str = "--calibrate-mix") -> list[tuple[str, int]]:
    """``"niah:2,vt:1"`` → [("niah", 2), ("vt", 1)]; an unknown task or a count ≤ 0 is refused in one line."""
    from attnlab.llm.eval.tasks import TASKS
    from attnlab.option_values import items, number

    out = []
    for item in items(text, option, allow_none=True):          # an empty item refused
        name, sep, count = item.partition(":")
        if name not in TASKS:
            raise UserError(f"{option}: unknown task {name!r} (known: {', '.join(TASKS)})")
        if name in (n for n, _ in out):                          # niah:2,niah:2 is not niah:4: say it once
            raise UserError(f"{option}: task {name} given twice, got {text!r} (write {name}:COUNT once)")
        c = number(count, int, f"{option} {item}: the count after ':'") if sep else 1
        if c <= 0:
            raise UserError(f"{option}: {item!r}: the count must be at least 1")
        out.append((name, c))
    return out


def mix_windows(tokenizer, hay, n: int, mix: list[tuple[str, int]]) -> list[MixWindow]:
    """The synthetic windows of ``mix`` at length n, the calibration text as haystack ``hay`` (a ``Haystack`` of at
    least n tokens' text: ``Haystack.file(tokenizer, path, n)``, or ``Haystack.of_text`` of a text read already)."""
    from attnlab.llm.eval.tasks import TASKS

    if not mix:
        return []
    out = []
    for task, count in mix:
        maker = TASKS[task].for_calibration() if hasattr(TASKS[task], "for_calibration") else TASKS[task]
        for x in range(count):
            depth = (x + 0.5) / count                                   # spread over the context
            # the answer's length fixes the prompt's (n − |answer|); a task whose answer changes with the
            # prompt's length (vt) gets the first length's: cut to it, or closed by end-of-text tokens (no rows)
            first = maker.make(tokenizer, hay, n, depth, x, MIX_SEED + x)
            A = len(_answer_ids(tokenizer, first.answers))
            if A >= n // 2:
                raise UserError(f"--calibrate-mix: the {task} answer ({A} tokens) does not fit {n} tokens")
            s = maker.make(tokenizer, hay, n - A, depth, x, MIX_SEED + x)
            answer = _answer_ids(tokenizer, s.answers)[:A]
            R = len(answer)
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else answer[-1]
            answer += [pad] * (A - R)
            ids = torch.tensor([s.ids + answer], dtype=torch.long)           # (1, n)
            rows = torch.arange(len(s.ids) - 1, len(s.ids) - 1 + R)         # the rows that predict the answer
            out.append(MixWindow(task, ids, rows))
    return out


def _answer_ids(tokenizer, answers: list[str]) -> list[int]:
    """The tokens of the answer as the model would write it after the answer prefix."""
    return tokenizer(" " + ", ".join(answers), add_special_tokens=False).input_ids
