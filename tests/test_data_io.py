"""Corpus readers and the spec dispatch: TSV, Moses, Hugging Face datasets; every bad input."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.data import group_references, load_corpus, reference_streams
from attnlab.errors import UserError

TATOEBA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tatoeba-en-it"
REPO = Path(__file__).resolve().parents[1]


def write(path: Path, text: str | bytes, gz: bool = False) -> Path:
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_tsv_plain_and_gz(tmp_path, gz):
    f = write(tmp_path / ("c.tsv.gz" if gz else "c.tsv"),
              "Hi.\tCiao.\nI'm here.\tSono qui.\textra column\n\nWhy?\tPerché?\n", gz)
    c = load_corpus(str(f))
    assert [(p.src, p.tgt) for p in c] == [("Hi.", "Ciao."), ("I'm here.", "Sono qui."), ("Why?", "Perché?")]
    assert c.src_lang == "en" and c.tgt_lang == "it" and c[0].alignment is None


@pytest.mark.parametrize("content, message", [
    ("a\tb\nno tab here\n", r"c\.tsv:2: no tab"),
    ("a\tb\nc\td\n\t x\n", r"c\.tsv:3: empty source side"),
    ("a\tb\nc\t  \n", r"c\.tsv:2: empty target side"),
    (b"a\tb\nc\td\ne\t\xe8 bad latin-1\n", r"c\.tsv:3: not UTF-8"),
    ("", r"c\.tsv: empty corpus"),
    ("\n\n", r"c\.tsv: empty corpus"),
])
@pytest.mark.parametrize("gz", [False, True])
def test_tsv_bad_input_names_file_and_line(tmp_path, content, message, gz):
    name = "c.tsv.gz" if gz else "c.tsv"
    f = write(tmp_path / name, content, gz)
    with pytest.raises(UserError, match=message.replace("c\\.tsv", name.replace(".", "\\."))) as err:
        load_corpus(str(f))
    assert "\n" not in str(err.value)


def test_tsv_split_rules(tmp_path):
    for split in ("train", "dev", "test"):
        write(tmp_path / f"{split}.tsv.gz", f"{split} one\t{split} uno\n", gz=True)
    assert load_corpus(str(tmp_path), split="dev")[0].src == "dev one"  # directory → file of the split
    assert load_corpus(str(tmp_path / "train.tsv.gz"), split="test")[0].src == "test one"  # sibling
    assert load_corpus(str(tmp_path / "test.tsv.gz"), split="test")[0].src == "test one"
    other = write(tmp_path / "mine.tsv", "a\tb\n")
    assert load_corpus(str(other), split="test")[0].src == "a"  # a plain file is every split
    (tmp_path / "dev.tsv.gz").unlink()
    with pytest.raises(UserError, match="dev.tsv.gz does not exist"):
        load_corpus(str(tmp_path / "train.tsv.gz"), split="dev")
    with pytest.raises(UserError, match="no dev.tsv.gz"):
        load_corpus(str(tmp_path), split="dev")
    with pytest.raises(UserError, match="--split"):
        load_corpus(str(other), split="valid")


def test_moses_pairs(tmp_path):
    write(tmp_path / "train.en", "Hi.\nGood night.\n")
    write(tmp_path / "train.it", "Ciao.\nBuona notte.\n")
    write(tmp_path / "test.en", "Yes.\n")
    write(tmp_path / "test.it", "Sì.\n")
    c = load_corpus(f"{tmp_path}/train.en,{tmp_path}/train.it")
    assert [(p.src, p.tgt) for p in c] == [("Hi.", "Ciao."), ("Good night.", "Buona notte.")]
    assert load_corpus(str(tmp_path / "train"), split="test")[0].tgt == "Sì."  # prefix + languages
    assert load_corpus(f"{tmp_path}/train.en,{tmp_path}/train.it", split="test")[0].src == "Yes."
    write(tmp_path / "bad.en", "a\nb\nc\n")
    write(tmp_path / "bad.it", "x\n\nz\n")
    with pytest.raises(UserError, match=r"bad\.it:2: empty line"):
        load_corpus(str(tmp_path / "bad"))
    write(tmp_path / "short.en", "a\nb\n")
    write(tmp_path / "short.it", "x\n")
    with pytest.raises(UserError, match=r"short\.en has 2 lines but .*short\.it has 1"):
        load_corpus(str(tmp_path / "short"))
    write(tmp_path / "latin.en", "ok\n")
    write(tmp_path / "latin.it", b"caf\xe9\n")
    with pytest.raises(UserError, match=r"latin\.it:1: not UTF-8"):
        load_corpus(str(tmp_path / "latin"))


@pytest.mark.parametrize("spec", ["nonexistent/file.tsv", "synthetic:foo=1", "synthetic:n=abc", "", "hf:"])
def test_unknown_spec(spec):
    with pytest.raises(UserError) as err:
        load_corpus(spec)
    assert "\n" not in str(err.value)


def test_hf_local_dataset(tmp_path):
    import datasets

    rows = {"translation": [{"en": f"I see {i} cats.", "it": f"Vedo {i} gatti."} for i in range(400)]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "books")
    train = load_corpus(f"hf:{tmp_path}/books:en-it", split="train")
    test = load_corpus(f"hf:{tmp_path}/books", split="test")  # languages read from the rows
    assert train.src_lang == "en" and train.tgt_lang == "it" and test.tgt_lang == "it"
    assert len(train) + len(test) + len(load_corpus(f"hf:{tmp_path}/books", split="dev")) == 400
    assert 0 < len(test) < 40 and not set(train.sources) & set(test.sources)
    assert train[0].tgt.startswith("Vedo ")
    reverse = load_corpus(f"hf:{tmp_path}/books:it-en")
    assert reverse[0].src.startswith("Vedo ")
    # one column per language, an explicit test split
    flat = datasets.DatasetDict({"test": datasets.Dataset.from_dict({"en": ["Hi."], "it": ["Ciao."]}),
                                 "train": datasets.Dataset.from_dict({"en": ["Yes."], "it": ["Sì."]})})
    flat.save_to_disk(tmp_path / "flat")
    assert load_corpus(f"hf:{tmp_path}/flat:en-it", split="test")[0].tgt == "Ciao."
    with pytest.raises(UserError, match="no column 'fr'"):
        load_corpus(f"hf:{tmp_path}/flat:en-fr")
    with pytest.raises(UserError, match="no saved dataset"):
        load_corpus(f"hf:{tmp_path}/missing:en-it")


def test_hf_unreachable_hub_probe(monkeypatch):
    """Without offline mode, an unreachable endpoint fails fast with the how-to."""
    import datasets
    from huggingface_hub import constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(UserError, match="cannot reach the Hugging Face hub.*HF_DATASETS_OFFLINE=1.*hf:DIR"):
        load_corpus("hf:opus_books:en-it")


def test_hf_offline_not_cached_one_line_error(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    code = ("from attnlab.data import load_corpus\n"
            "from attnlab.errors import UserError\n"
            "try:\n    load_corpus('hf:opus_books:en-it')\n"
            "except UserError as e:\n    print('USERERROR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    line = [x for x in out.stdout.splitlines() if x.startswith("USERERROR")]
    assert line, out.stdout + out.stderr
    assert "opus_books" in line[0] and "HF_DATASETS_OFFLINE=1" in line[0] and "save_to_disk" in line[0]


@pytest.mark.skipif(not TATOEBA.is_dir(), reason="shared Tatoeba data not present")
def test_tatoeba_test_split_and_references():
    test = load_corpus(str(TATOEBA / "train.tsv.gz"), split="test")
    assert len(test) == 1646
    sources, refs = group_references(test)
    assert len(sources) < len(test) and sum(len(r) for r in refs) <= len(test)
    assert max(len(r) for r in refs) > 1
    streams = reference_streams(refs)
    assert all(len(s) == len(sources) for s in streams)
    import sacrebleu

    hyp = [r[-1] for r in refs]  # the last reference of each sentence: BLEU 100 with all references
    assert sacrebleu.corpus_bleu(hyp, streams).score == pytest.approx(100.0)
    assert sacrebleu.corpus_bleu(hyp, streams[:1]).score < 100.0


def test_group_references_keeps_order_and_dedupes():
    from attnlab.data import Pair

    ps = [Pair("Kiss Tom.", "Bacia Tom."), Pair("Run!", "Corri!"), Pair("Kiss Tom.", "Baciate Tom."),
          Pair("Kiss Tom.", "Bacia Tom.")]
    assert group_references(ps) == (["Kiss Tom.", "Run!"], [["Bacia Tom.", "Baciate Tom."], ["Corri!"]])
    assert reference_streams([["a", "b"], ["c"]]) == [["a", "c"], ["b", None]]
