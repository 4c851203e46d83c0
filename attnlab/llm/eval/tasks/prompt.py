"""A prompt of an exact length in the model's tokens, with pieces inserted at chosen depths.

    ids = head ‖ hay[0:p₁] ‖ piece₁ ‖ hay[p₁:p₂] ‖ piece₂ ‖ … ‖ hay[p_k:N] ‖ tail,   |ids| = length

head = the chat template's opening (``--template chat``, or where the model has one) + the task's
instruction; tail = the question + the chat template's closing + the answer prefix (``--question before``:
the question ends the head instead, the tail is the closing + the answer prefix);
N = length − |head| − Σ|pieceᵢ| − |tail|
haystack tokens.  A piece at depth d ∈ [0, 1] goes at the last sentence or line end of the haystack at
or before ⌊d·N⌋ (Kamradt's needle test: depth = where in the context the fact sits).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from attnlab.errors import UserError
from attnlab.llm.eval.tasks.haystack import Haystack

__all__ = ["PromptFormat", "Sample", "assemble", "chat_parts", "sample_key"]

TEMPLATES = ("auto", "chat", "none")   # auto: the chat template where the model has one (the earlier behaviour)
QUESTIONS = ("after", "before")


@dataclass(frozen=True)
class PromptFormat:
    """How a task's pieces are laid out: ``template`` chat | none | auto, the question ``after`` or ``before`` the
    context."""

    template: str = "auto"
    question: str = "after"

    def opening_closing(self, tokenizer) -> tuple[str, str]:
        """The chat template's (opening, closing), or ("", "") for plain text; chat without a template is refused."""
        if self.template == "none":
            return "", ""
        if self.template == "chat" and not getattr(tokenizer, "chat_template", None):
            raise UserError("--template chat: the model's tokenizer has no chat template (use --template none)")
        try:
            return chat_parts(tokenizer)
        except UserError as err:   # the template's refusal, said with the --template this run was given
            raise UserError(str(err).replace("--template:", f"--template {self.template}:", 1)) from None


@dataclass
class Sample:
    """One prompt: ``ids`` (exactly ``length`` tokens), the strings the answer must contain, where the pieces sit."""

    task: str
    length: int
    depth: float | None
    index: int
    ids: list[int]
    answers: list[str]
    spans: list[tuple[int, int]] = field(default_factory=list)  # token [start, end) of each inserted piece
    max_new: int = 32
    others: list[str] = field(default_factory=list)             # values of the needles not asked (multi-key decoys)

    @property
    def key(self) -> str:
        return sample_key(self.task, self.length, self.depth, self.index)


def sample_key(task: str, length: int, depth: float | None, index: int) -> str:
    """A prompt's key in results files, known before the prompt is made: ``task|length|depth|index``."""
    d = "-" if depth is None else f"{depth:.4f}"
    return f"{task}|{length}|{d}|{index}"


def chat_parts(tokenizer) -> tuple[str, str]:
    """(opening, closing) of the model's chat template around one user message; ("", "") without one.

    The template is the model's own code (Jinja): one that does not compile, that calls ``raise_exception``, that
    renders to nothing or that drops the message is refused in one line naming the model and ``--template`` (the
    prompt would be plain text recorded as chat, or a traceback of the template engine)."""
    if not getattr(tokenizer, "chat_template", None):
        return "", ""
    mark = "\x00CONTENT\x00"
    model = getattr(tokenizer, "name_or_path", "") or "the model"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": mark}], add_generation_prompt=True,
                                             tokenize=False)
    except Exception as err:  # noqa: BLE001 - any failure of the model's template code is the model's, said in one line
        said = " ".join(str(err).split())[:200] or type(err).__name__
        raise UserError(f"--template: the chat template of {model} fails to render a user message "
                        f"({type(err).__name__}: {said}); use --template none") from None
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"--template: the chat template of {model} renders a user message as empty text; "
                        "use --template none")
    if mark not in text:
        raise UserError(f"--template: the chat template of {model} leaves out the user's message; use --template none")
    before, _, after = text.partition(mark)
    return before, after


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids if text else []


def assemble(tokenizer, hay: Haystack, length: int, instruction: str, question: str, answer_prefix: str,
             pieces: list[tuple[float, str]], start: int = 0, task: str = "task",
             fmt: PromptFormat | None = None) -> tuple[list[int], list[tuple[int, int]]]:
    """(ids of exactly ``length`` tokens, token spans of the pieces in the order given): ``pieces`` = [(depth, text)].

    ``start``: where in the haystack stream its tokens begin (a different stretch per sample); ``fmt``: the
    template and the question's place (default: the model's chat template, the question after the context).
    """
    fmt = fmt or PromptFormat()
    opening, closing = fmt.opening_closing(tokenizer)
    if fmt.question == "before":
        instruction, question = instruction + question, ""
    head = _encode(tokenizer, opening + instruction)
    if not opening and tokenizer.bos_token_id is not None:
        head = [tokenizer.bos_token_id] + head
    tail = _encode(tokenizer, question + closing) + _encode(tokenizer, answer_prefix)
    order = sorted(range(len(pieces)), key=lambda x: pieces[x][0])                   # pieces by depth
    coded = [(pieces[x][0], _encode(tokenizer, "\n" + pieces[x][1])) for x in order]
    N = length - len(head) - len(tail) - sum(len(c) for _, c in coded)
    if N < 0:
        raise UserError(f"--lengths: {length} tokens cannot hold the {task} prompt ({length - N} tokens without "
                        f"haystack)")
    hay_ids = hay.tokens(N, start)
    ends = hay.boundaries(hay_ids, tokenizer)
    ids, spans, last = list(head), [], 0
    for d, c in coded:
        p = ends[max(0, bisect.bisect_right(ends, int(d * N)) - 1)]
        p = max(p, last)
        ids += hay_ids[last:p]
        spans.append((len(ids), len(ids) + len(c)))
        ids += c
        last = p
    ids += hay_ids[last:] + tail
    assert len(ids) == length, (len(ids), length)
    by_input = [None] * len(pieces)
    for x, span in zip(order, spans):
        by_input[x] = span
    return ids, by_input
