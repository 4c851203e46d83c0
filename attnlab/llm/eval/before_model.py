"""What ``attnlab eval`` refuses before a model loads: texts too short for any tokenizer, methods without their files.

A token of a byte-level or byte-fallback tokenizer (SmolLM2's, Gemma-3's, the tests' one character a token) covers at
least one byte of UTF-8 text, so a text of B bytes gives at most B + 1 tokens whatever the model:

    --calibrate, --ppl   one window of n = max(--lengths) tokens        needs B ≥ n − 1
    --haystack           a prompt of n tokens, the task's own words apart  needs B ≥ n / 8

(the first is exact; the second a bound with room: the instruction, question, needles and chat template of a
task take 345 of 512 tokens with the tests' one-character tokens, far fewer with a real tokenizer, so a prompt
that holds its task at all reads more than n / 8 haystack tokens at the lengths attnlab runs).  These bounds
refuse a one-sentence text in about a second, torch never imported, instead of after the model has loaded; a
text above them is measured exactly in the model's tokens once the tokenizer is there
(``Haystack.tokens``, ``eval_inputs.token_texts``).  A method's own files (DuoAttention's gate file) are checked
by the method itself (``Method.check_inputs``) against nothing but the file system.
"""

from __future__ import annotations

from attnlab.errors import UserError

__all__ = ["check_method_inputs", "check_text_sizes"]

HAYSTACK_SHARE = 8  # a prompt holds at least n / HAYSTACK_SHARE haystack tokens


def _bytes(text: str, n: int) -> int:
    """UTF-8 bytes of the part of ``text`` a prompt of n tokens may read (``Haystack.of_text`` reads 8·n + 1024
    chars)."""
    return len(text[: 8 * n + 1024].encode("utf-8"))


def check_text_sizes(checked) -> None:
    """The texts of ``checked`` (``check_settings``: each file read once) long enough for the longest prompt in any
    tokenizer (``--calibrate`` when a method is calibrated: it is read only then)."""
    from attnlab.llm import methods as registry
    from attnlab.llm.eval.eval_settings import parse_method
    from attnlab.llm.eval.tasks import TASKS

    settings, texts = checked.settings, checked.texts
    n = max(settings.lengths)
    calibrated = any(registry.method_class(parse_method(m)[0]).calibrated for m in settings.methods)
    uses = [t for t in settings.tasks if getattr(TASKS.get(t), "uses_haystack", True)]
    if settings.haystack != "noise" and uses:
        have = _bytes(texts["--haystack"], n)
        if have < n // HAYSTACK_SHARE:
            raise UserError(
                f"--haystack {settings.haystack}: {have} bytes of text, too short for a prompt of {n} tokens "
                f"(--lengths) in any tokenizer (at least {n // HAYSTACK_SHARE} bytes); give a longer text or noise"
            )
    for option, path in (("--calibrate", settings.calibrate if calibrated else None), ("--ppl", settings.ppl)):
        if path:
            have = _bytes(texts[option], n)
            if have < n - 1:
                raise UserError(
                    f"{option} {path}: {have} bytes of text, shorter than the window of {n} tokens (--lengths) "
                    f"in any tokenizer"
                )


def check_method_inputs(specs: list[str]) -> None:
    """Each method's own input files (``Method.check_inputs``): a missing gate file said before the model loads."""
    from attnlab.llm import methods as registry
    from attnlab.llm.eval.eval_settings import parse_method

    for spec in specs:
        name, opts = parse_method(spec)
        registry.get(name, 1.0, **opts).check_inputs()
