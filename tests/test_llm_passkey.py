"""The pass-key task (Mohtashami & Jaggi 2023) and its variants, the prompt format options, and a calibration that
never sees the evaluation's phrasings or seeds."""

from __future__ import annotations

import pytest

from attnlab.errors import UserError
from attnlab.llm.eval.tasks import TASKS, Haystack, PromptFormat
from attnlab.llm.eval.tasks.passkey import CALIBRATION_INSTRUCTIONS, CALIBRATION_PHRASINGS, EVAL_INSTRUCTIONS, EVAL_PHRASINGS

from test_llm_eval import text_file, tiny  # noqa: F401 - fixtures: a 2-layer Llama with a one-character tokenizer (no chat template), a text

N = 600


def text(tok, ids) -> str:
    return "".join(tok.convert_ids_to_tokens(ids))


def test_the_papers_prompt(tiny):
    _, _, tok = tiny
    s = TASKS["passkey"].make(tok, Haystack.noise(tok), N, 0.5, 0, seed=3)
    key = s.answers[0]
    assert len(s.ids) == N and len(key) == 5 and key.isdigit()
    t = text(tok, s.ids)
    assert t.startswith((tok.bos_token or "") + "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
                        "I will quiz you about the important information there.")
    assert "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again." in t
    assert f"The pass key is {key}. Remember it. {key} is the pass key." in text(tok, s.ids[slice(*s.spans[0])])
    assert t.endswith("What is the pass key? The pass key is")


def test_variants_once_bare_and_varied(tiny):
    _, _, tok = tiny
    hay = Haystack.noise(tok)
    once = TASKS["passkey-once"].make(tok, hay, N, 0.5, 0, seed=3)
    assert text(tok, once.ids[slice(*once.spans[0])]).count(once.answers[0]) == 1
    bare = text(tok, TASKS["passkey-bare"].make(tok, hay, N, 0.5, 0, seed=3).ids)
    assert "important info" not in bare and bare.endswith("The pass key is")
    drawn = [TASKS["passkey-varied"].make(tok, hay, N, 0.5, i, seed=3) for i in range(24)]
    needles = [text(tok, s.ids[slice(*s.spans[0])]) for s in drawn]
    said = {p for n in needles for p in EVAL_PHRASINGS if p.once.format(key="X").split("X")[0] in n}
    assert len(said) >= 3                                                         # several phrasings drawn
    assert {n.count(s.answers[0]) for n, s in zip(needles, drawn)} == {1, 2}      # once and twice
    heads = {any(i in text(tok, s.ids[:200]) for i in EVAL_INSTRUCTIONS) for s in drawn}
    assert heads == {True, False}                                                 # with and without an instruction
    again = TASKS["passkey-varied"].make(tok, hay, N, 0.5, 5, seed=3)
    assert again.ids == drawn[5].ids                                              # seeded


def test_question_before_or_after_the_context(tiny, text_file):
    _, _, tok = tiny
    hay = Haystack.file(tok, text_file)
    for name in ("passkey", "niah"):
        after = TASKS[name].make(tok, hay, N, 0.5, 0, 1, PromptFormat("none", "after"))
        before = TASKS[name].make(tok, hay, N, 0.5, 0, 1, PromptFormat("none", "before"))
        ask = "What is the pass key?" if name == "passkey" else "What is the special magic number"
        assert len(before.ids) == len(after.ids) == N
        assert text(tok, after.ids).index(ask) > after.spans[0][1]
        assert text(tok, before.ids).index(ask) < before.spans[0][0]


def test_template_chat_without_one_is_refused_and_none_is_plain(tiny):
    _, _, tok = tiny
    hay = Haystack.noise(tok)
    with pytest.raises(UserError, match="--template chat"):
        TASKS["passkey"].make(tok, hay, N, 0.5, 0, 1, PromptFormat("chat"))
    assert TASKS["passkey"].make(tok, hay, N, 0.5, 0, 1, PromptFormat("none")).ids == TASKS["passkey"].make(tok, hay, N, 0.5, 0, 1).ids


def test_template_none_drops_a_models_chat_template(tiny, monkeypatch):
    from attnlab.llm.eval.tasks import prompt

    _, _, tok = tiny
    monkeypatch.setattr(tok, "chat_template", "x", raising=False)
    monkeypatch.setattr(prompt, "chat_parts", lambda tokenizer: ("USER: ", " ASSISTANT:"))
    hay = Haystack.noise(tok)
    chat = text(tok, TASKS["passkey"].make(tok, hay, N, 0.5, 0, 1, PromptFormat("chat")).ids)
    plain = text(tok, TASKS["passkey"].make(tok, hay, N, 0.5, 0, 1, PromptFormat("none")).ids)
    assert chat.startswith("USER: There is") and "ASSISTANT: The pass key is" in chat
    assert "USER" not in plain and "ASSISTANT" not in plain


def test_the_calibration_never_sees_the_evaluations_phrasings_or_seeds(tiny, text_file):
    from attnlab.llm.calibration.mix import MIX_SEED, mix_windows

    _, _, tok = tiny
    said = lambda p: {p.once.format(key="#").split("#")[0].strip(), p.question, p.answer.strip()}   # noqa: E731
    evals = set().union(*map(said, EVAL_PHRASINGS)) | set(EVAL_INSTRUCTIONS)
    cals = set().union(*map(said, CALIBRATION_PHRASINGS)) | set(CALIBRATION_INSTRUCTIONS)
    assert not evals & cals and not any(e in c or c in e for e in evals for c in cals)
    windows = mix_windows(tok, Haystack.file(tok, text_file, N), N, [("passkey-varied", 6), ("passkey", 2)])
    seen = [text(tok, w.ids[0].tolist()) for w in windows]
    assert len(seen) == 8
    for t in seen:
        assert not any(e in t for e in evals), t[-200:]                            # none of the evaluation's words
        assert any(c in t for c in cals)                                           # the calibration's own
    eval_keys = {TASKS["passkey-varied"].make(tok, Haystack.file(tok, text_file), N, 0.5, i, seed).answers[0]
                 for i in range(2) for seed in range(4)}
    assert MIX_SEED > 10**6 and not any(k in t for k in eval_keys for t in seen)   # other seeds: other keys


def test_eval_cli_refuses_a_template_the_model_has_not(tiny, tmp_path, capsys):
    from attnlab_cli import run_main

    folder, _, _ = tiny
    out = tmp_path / "run"
    code, _, err = run_main(["eval", "--hf", str(folder), "--task", "passkey", "--lengths", "600", "--depths", "1",
                             "--samples", "1", "--haystack", "noise", "--template", "chat", "--out", str(out)], capsys)
    lines = [l for l in err.strip().splitlines() if l.strip() and not (l.startswith("attnlab: ") and not l.startswith("attnlab: error: "))]
    # (the progress lines said before a refusal that comes after the model has loaded are not error lines)
    assert code == 2 and len(lines) == 1 and "--template chat" in lines[0] and not out.exists(), err
