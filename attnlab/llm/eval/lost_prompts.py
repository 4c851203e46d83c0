"""Why a method loses a prompt that full attention answers: the heads that read the needle, and what the method let
them read at that step.

For each prompt p of an eval folder with score_full(p) = 1 and score_M(p) = 0 (the folder's own task builder and
settings rebuild p exactly):

    v = encode(full's answer up to the value's end)
        the answer as the model writes it (" " + expected where full's answer does not hold it: ": 8574954" for
        Gemma-3, " 8574954" for SmolLM2); t = its first token that begins the value
    q = n − 1 + t
        the row that predicts v_t (teacher-forced: prompt ‖ v_<t; t = 1 for a tokenizer that writes the space apart,
        the first decoding step; ``row="first"``: t = 0, the prompt's last row, that predicts the answer's first token;
        ``row="parted"``: t = the first x with a_x ≠ v_x, a = encode(method's answer): the step where the method's
        answer leaves the value, teacher-forced on v_<t)
    V = {j : token j of the needle carries a character of the value}    (every statement of it: a key said twice)
    m_lh = Σ_{j ∈ V} A^full_lh[q, j]      the mass head (l, h) puts on the value under full attention
    S^M_lh(q)
        the keys the method lets that head read at row q: the prefill's support (band, columns, diagonals, key
        blocks, tail) when q is a prompt row, else the decoding step's (band or whole cache, columns, held blocks,
        voted keys, pages read back), each on its own cache after the method's compaction
    verdict_lh = |V ∩ S^M_lh(q)| / |V|, by part
        a value key not read: evicted, in the store and not read back, or kept (for another head of its KV group)
        and not read

and m^M_lh, the mass the head puts on V under the method at that step.  The top heads by m_lh are "the heads that read
the needle"; their verdicts say which keys the method kept.  Where the method's answer holds the value of a needle not
asked (a multi-key distractor, ``Sample.others``), the row names it — the needle confused, not dropped — and the heads
whose mass on that value grows most from full attention to the method (``confused_heads``: g_lh = m'^M_lh − m'_lh,
m' = Σ_{j ∈ O} A[q, j], O the copied value's positions), each with its mass on the asked value under both.  ``explain``
writes ``lost-prompts.jsonl`` (one row per lost prompt) into the folder; ``attnlab eval-why`` is its command.  What a
head reads, under full attention and under the method, is measured by ``lost_reads``; this module reads the folder,
rebuilds the prompts and writes the rows (torch loads only there: a bad folder or method is refused before it).
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

from attnlab.atomic import write_text_atomic
from attnlab.errors import UserError
from attnlab.llm.methods import REFERENCE, is_registered
from attnlab.llm.methods.base import PLAN_FIELDS
from attnlab.progress import SILENT, Progress

__all__ = ["FILE", "ROWS", "answer_row", "calibration_path", "explain", "lost_pairs", "method_of", "read_folder",
           "summary_line", "value_positions"]

FILE = "lost-prompts.jsonl"


# ---- the folder -----------------------------------------------------------------------------------------------------
def read_folder(out, method: str):
    """(settings, answer rows) of the eval folder ``out`` with rows of ``method`` and of full attention; one-line
    UserError otherwise (no folder, not an eval folder, a method it has not run, no full rows)."""
    from attnlab.llm.eval.eval_settings import EvalSettings
    from attnlab.schemas import eval_config
    from attnlab.schemas.result_row import LOST, ROW, read_rows

    out = Path(out)
    if not out.is_dir():
        raise UserError(f"--out {out}: no such folder (an attnlab eval run folder)")
    for name in ("config.json", "results.jsonl"):
        if not (out / name).is_file():
            raise UserError(f"--out {out}: no {name} (not an attnlab eval run folder)")
    cfg = eval_config.load(out / "config.json", "--out").model_dump()    # the folder's settings, through their schema
    names = {f.name for f in fields(EvalSettings)}
    settings = EvalSettings(**{k: v for k, v in cfg.items() if k in names})
    rows = [r for r in read_rows(out / "results.jsonl", ROW, "--out") if r["kind"] == "answer"]   # the file untouched
    if (out / FILE).is_file():
        read_rows(out / FILE, LOST, "--out")        # the rows a run keeps (other methods'): checked before any model
    if method == REFERENCE:
        raise UserError(f"--method {method}: full attention is the reference the other methods are compared with")
    if not any(r.get("method") == REFERENCE for r in rows):
        raise UserError(f"--out {out}: results.jsonl holds no full-attention rows (nothing to compare {method} with)")
    if not any(r.get("method") == method for r in rows):
        ran = sorted({str(r.get("method")) for r in rows} - {REFERENCE})
        raise UserError(f"--method {method}: not in {out / 'results.jsonl'} (its methods: {', '.join(ran) or 'none'})")
    return settings, rows


def lost_pairs(rows: list[dict], method: str) -> list[tuple[dict, dict]]:
    """(full's row, the method's row) of each prompt full answered (score 1) and the method did not (score 0)."""
    def prompt(r):
        return r["task"], r["n"], r.get("depth"), r["sample"]

    full = {prompt(r): r for r in rows if r["method"] == REFERENCE}
    return [(full[prompt(r)], r) for r in rows if r["method"] == method and float(r["score"]) == 0.0
            and prompt(r) in full and float(full[prompt(r)]["score"]) == 1.0]


# ---- the needle and the row that reads it ---------------------------------------------------------------------------
def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids


def value_positions(tokenizer, sample, values: list[str], fallback: bool = True) -> list[int]:
    """The token positions of every statement of a value inside the prompt's inserted pieces (sorted): where its tokens
    (``encode(value)``, or those of ``encode(" " + value)`` from the first holding a value character) occur there;
    none found (tokenized otherwise there): the pieces' whole spans (``fallback``), else none."""
    found = set()
    for value in values:
        spaced = _encode(tokenizer, " " + value)
        t = next((x for x in range(len(spaced)) if tokenizer.decode(spaced[x : x + 1]).strip()), 0)
        for v in {tuple(_encode(tokenizer, value)), tuple(spaced[t:])}:
            for a, b in sample.spans:
                found |= {a + k + x for k in range(b - a - len(v) + 1) if tuple(sample.ids[a + k : a + k + len(v)]) == v
                          for x in range(len(v))}
    return sorted(found) or (sorted(j for a, b in sample.spans for j in range(a, b)) if fallback else [])


ROWS = ("value", "first", "parted")   # the row that predicts the value's first token, the answer's first token (n − 1),
                                      # or the token where the method's answer leaves the value


def answer_row(tokenizer, ids: list[int], value: str, row: str = "value", answer: str = "",
               full_answer: str = "") -> tuple[list[int], int, int]:
    """(prompt ‖ v_<t ‖ v_t, the row q = n − 1 + t that predicts v_t, v_t): v = full attention's ``full_answer`` up to
    the value's end, encoded (what full decoded before and through the value: ``": 8574954"`` where the model answers
    so; ``" " + value`` where full's answer does not hold it), t its first token that begins the value (``row``
    "first": t = 0, the prompt's last row; "parted": the first t where the method's ``answer``, encoded, differs from
    v — the step its copy went wrong)."""
    if row not in ROWS:
        raise UserError(f"--row: expected one of {', '.join(ROWS)}, got {row!r}")
    start = full_answer.find(value)
    v = _encode(tokenizer, full_answer[: start + len(value)] if start >= 0 else " " + value)
    if row == "parted":
        a = _encode(tokenizer, answer)
        t = next((x for x in range(len(v)) if x >= len(a) or a[x] != v[x]), len(v) - 1)
    elif row == "first":
        t = 0
    else:                                  # the first token that begins the value, else the first one not blank
        pieces = [tokenizer.decode(v[x : x + 1]).strip() for x in range(len(v))]
        t = next((x for x, p in enumerate(pieces) if p and value.startswith(p)),
                 next((x for x, p in enumerate(pieces) if p), 0))
    return list(ids) + v[: t + 1], len(ids) - 1 + t, v[t]


# ---- the command ----------------------------------------------------------------------------------------------------
def explain(model, tokenizer, out, method_name: str, top: int = 5, calibration=None, row: str = "value",
            layers: bool = False, heads: int = 0, progress: Progress = SILENT) -> list[dict]:
    """Every prompt of ``out`` that full attention answered and ``method_name`` lost, explained (module docstring) at
    the ``row`` of ``answer_row``; with ``layers``, also each layer restored to full attention
    (``lost_layers.restored``: ``restored_layers``; with ``heads`` = k, each planned head of the k layers that close
    most of the gap, alone: ``restored_layers["heads"]``); writes ``out/lost-prompts.jsonl`` (this method's rows
    replaced, other methods' kept) and returns its rows."""
    import torch

    from attnlab.llm.calibration.archive import load_calibration
    from attnlab.llm.eval.lost_reads import full_row, method_row
    from attnlab.llm.eval.tasks import TASKS, Haystack
    from attnlab.schemas.result_row import LOST, read_rows

    out = Path(out)
    settings, rows = read_folder(out, method_name)
    pairs = lost_pairs(rows, method_name)
    hay = None
    made, done = {}, []
    bar = progress.start("lost prompts", total=len(pairs), unit="prompts")
    for full, lost in pairs:
        n, budget = int(lost["n"]), float(lost["budget"])
        if (n, budget) not in made:
            m = method_of(settings, method_name, budget)
            path = calibration_path(out, method_name, n, calibration)
            m.prepare(model, n, load_calibration(path, known_method=is_registered) if path else None)
            made[(n, budget)] = m
        m = made[(n, budget)]
        if hay is None:
            hay = (Haystack.noise(tokenizer) if settings.haystack == "noise"
                   else Haystack.file(tokenizer, settings.haystack, max(settings.lengths)))
        d = lost.get("depth")
        smp = TASKS[lost["task"]].make(tokenizer, hay, n, d if d is not None else 0.0, int(lost["sample"]),
                                       settings.seed, settings.format())
        if len(smp.ids) != lost.get("prompt_tokens", len(smp.ids)) or list(smp.answers) != list(lost["expected"]):
            raise UserError(f"--out {out}: the prompt of {lost['key']} rebuilt differs from the run's (expected "
                            f"{lost['expected']}, rebuilt {smp.answers}): made by another version of the task")
        needle = value_positions(tokenizer, smp, smp.answers)
        forced, q, nxt = answer_row(tokenizer, smp.ids, smp.answers[0], row, lost["answer"], full["answer"])
        A, full_next, full_first = full_row(model, forced, q, n)                           # (L, H, q + 1)
        mass = A[:, :, needle].sum(-1)                                                    # (L, H)
        other = other_value(lost["answer"], smp.others)
        whole = replace(smp, spans=[(0, len(smp.ids))])
        O = (value_positions(tokenizer, whole, [other], fallback=False)   # the value the method copied, where its
             if other else [])                                            # needle says it
        verdicts, method_next, method_first = method_row(model, m, forced, q, n, needle, O)
        order = torch.argsort(mass.flatten(), descending=True)[:top].tolist()
        H = mass.shape[1]
        readers = [{"layer": x // H, "head": x % H, "mass": round(float(mass.flatten()[x]), 4),
                    **verdicts[(x // H, x % H)]} for x in order]
        for hd in readers:
            for k in ("mass_method", "mass_other_method"):
                if k in hd:
                    hd[k] = round(hd[k], 4)
        confused = _confused_heads(A, mass, verdicts, O, top)
        desc = m.describe()
        differs = [f"{k} {desc[k]} (run: {lost[k]})" for k in PLAN_FIELDS
                   if k in lost and k in desc and desc[k] != lost[k]]
        why = {"method": method_name, "budget": budget, "task": lost["task"], "n": n, "depth": d,
               "sample": lost["sample"], "key": lost["key"], "expected": lost["expected"], "answer": lost["answer"],
               "full_answer": full["answer"], "other_value": other, "other_needle": O, "confused_heads": confused,
               "needle": needle, "needle_text": tokenizer.decode([smp.ids[j] for j in needle]), "row": row,
               "query_row": q,
               "predicts": tokenizer.decode([nxt]), "full_next": tokenizer.decode([full_next]),
               "method_next": tokenizer.decode([method_next]), "first": tokenizer.decode(forced[n : n + 1]),
               "full_first": tokenizer.decode([full_first]),
               "method_first": tokenizer.decode([method_first]), "heads": readers, "plan_differs": differs}
        if layers or heads:
            from attnlab.llm.eval.lost_layers import restored

            why["restored_layers"] = restored(model, m, forced, q, n, nxt, top=top, heads=heads, progress=lambda i, L,
                                              what="layer": bar.update(len(done), note=f"depth {d} sample "
                                                                       f"{lost['sample']}: {what} {i} of {L} restored"))
        why["summary"] = summary_line(why)
        done.append(why)
        bar.update(len(done), note=f"depth {d} sample {lost['sample']}")
    bar.close()
    path = out / FILE
    keep = [r for r in read_rows(path, LOST, "--out") if r["method"] != method_name]   # other methods' rows, checked
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in keep + done))
    return done


def _confused_heads(A, mass, verdicts: dict, O: list[int], top: int) -> list[dict]:
    """The heads whose mass on the copied value (another needle's, positions O) grows most from full attention to the
    method at the row: g_lh = m'^M_lh − m'_lh, m' = Σ_{j ∈ O} A[q, j]; each with its mass on the asked value under
    both."""
    import torch

    if not O:
        return []
    other = A[:, :, O].sum(-1)                                                           # (L, H) under full
    H = other.shape[1]
    under = torch.tensor([[verdicts[(l, h)]["mass_other_method"] for h in range(H)] for l in range(other.shape[0])])
    order = torch.argsort((under - other).flatten(), descending=True)[:top].tolist()
    return [{"layer": x // H, "head": x % H, "mass_other": round(float(other.flatten()[x]), 4),
             "mass_other_method": round(float(under.flatten()[x]), 4), "mass": round(float(mass.flatten()[x]), 4),
             "mass_method": round(verdicts[(x // H, x % H)]["mass_method"], 4)} for x in order]


def other_value(answer: str, others) -> str | None:
    """The value of a needle not asked that ``answer`` holds (the method copied another key's value), else None."""
    return next((v for v in others if v in answer), None)


def method_of(settings, name: str, budget: float):
    """The method a row of the folder names (``eval``'s spelling: NAME[:key=value…], or ``plan``: its plan file)."""
    from attnlab.llm import methods as registry
    from attnlab.llm.eval.eval_settings import parse_method

    base, opts = parse_method(name)
    return registry.get(base, budget, plan_file=settings.plan, **opts)


def calibration_path(out, method_name: str, n: int, calibration=None) -> Path | None:
    """The calibration the method runs on at n: ``calibration``, else the folder's ``calibration-n.npz`` (the archive
    attnlab ships when the eval ran without ``--calibrate``); None for a method without one; a one-line UserError when
    it is missing."""
    settings, _ = read_folder(out, method_name)
    if not method_of(settings, method_name, 1.0).calibrated:
        return None
    path = Path(calibration) if calibration else Path(out) / f"calibration-{n}.npz"
    if not calibration and not settings.calibrate:   # the eval ran on the calibration attnlab ships
        from attnlab.llm.calibration.shipped import shipped

        path = shipped(settings.model, n) or path
    if not path.is_file():
        raise UserError(f"--calibration {path}: no such file (the calibration {method_name} ran on at n = {n}; give "
                        f"--calibration FILE)")
    return path


def restored_text(got: dict, token: str) -> str:
    """``restored_layers`` in words: the gap in log-probability, the layers that close most of it, the set R."""
    def share(x):
        return "–" if x["share"] is None else f"{x['share']:.2f}"

    text = (f"log p({token!r}) full {got['logp_full']:.2f}, method {got['logp_method']:.2f}; one layer restored to "
            "full attention closes " + ", ".join(f"L{x['layer']} {share(x)}" for x in got["layers"]) + " of the gap"
            + f" ({got['half']} of {got['of']} layers close half or more)")
    R = got["together"]
    if R:
        both = "together bring" if len(R["layers"]) > 1 else "alone brings"
        text += f"; L{', L'.join(map(str, R['layers']))} restored {both} {token!r} back"
    elif got["tried"]:
        text += f"; the {got['tried']} first of them restored together do not bring {token!r} back"
    H = got.get("heads")
    if H:
        text += (f"; one head of L{', L'.join(map(str, H['in_layers']))} restored closes " + ", ".join(
            f"L{x['layer']}.H{x['head']} ({x['plan']}) {share(x)}" for x in H["top"])
            + f" ({H['half']} of their {H['of']} planned heads close half or more)")
    return text


def summary_line(row: dict) -> str:
    """One line: the prompt, the first tokens each attention predicts, what each top head read under full attention
    and what the method let it read (its role's first two parts, the value keys read and why not, its mass there)."""
    def head(hd):
        role = ", ".join(hd["role"].split(", ")[:2])
        parts = ", ".join([f"{c} {k}" for k, c in hd["read_by"].items()]
                          + [f"{c} {k}" for k, c in hd["not_read"].items()])
        return (f"L{hd['layer']}.H{hd['head']} {hd['mass']:.2f} ({role}: {hd['read']}/{len(row['needle'])} read — "
                f"{parts}; mass {hd['mass_method']:.2f} under the method)")

    d = "–" if row["depth"] is None else f"{row['depth']:g}"
    other = f" (another key's value, {row['other_value']})" if row.get("other_value") else ""
    first = "" if row["query_row"] < row["n"] else (f"first token {row['first']!r} (full {row['full_first']!r}, method "
                                                     f"{row['method_first']!r}); ")
    text = (f"{row['method']} β={row['budget']:g} {row['task']} n={row['n']} depth {d} sample {row['sample']}: "
            f"expected {', '.join(row['expected'])}, answered {row['answer'][:32]!r}{other}; {first}at row "
            f"{row['query_row']} (→ {row['predicts']!r}: full {row['full_next']!r}, method {row['method_next']!r}) "
            "the value is read under full by "
            + ", ".join(head(hd) for hd in row["heads"]))
    if row.get("confused_heads"):
        text += ("; the other key's value, under full → the method: " + ", ".join(
            f"L{c['layer']}.H{c['head']} {c['mass_other']:.2f} → {c['mass_other_method']:.2f} (the asked value "
            f"{c['mass']:.2f} → {c['mass_method']:.2f})" for c in row["confused_heads"][:3]))
    if row.get("restored_layers"):
        text += "; " + restored_text(row["restored_layers"], row["predicts"])
    if row["plan_differs"]:
        text += f" — note: the plan rebuilt differs from the run's: {', '.join(row['plan_differs'])}"
    return text
