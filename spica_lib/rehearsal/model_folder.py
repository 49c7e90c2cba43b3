"""A model folder a live mocker can serve, built offline: nothing is downloaded.

Dynamo's mocker and frontend read a model folder (`--model-path`): `config.json` (the mocker's KV bytes per
token, and the frontend's model card), `tokenizer.json` (the frontend tokenises every prompt) and
`tokenizer_config.json` (the frontend refuses a model without a chat template). The perf model times each
step by the model's aiconfigurator name (`aic_model_path` in the engine arguments), not by this folder.

- `config.json` is aiconfigurator's own bundled config of the model (the facts the perf DB was built with);
- `tokenizer.json` is a word-level tokenizer over the config's vocabulary, one word per token: `w0 w1 ...`
  split on whitespace. A prompt of n words is exactly n tokens on `/v1/completions`, and two prompts that
  share their first words share their first KV blocks, as the trace's shared prefixes do;
- `tokenizer_config.json` names the tokenizer and a plain chat template (the chat endpoint adds its words).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }} {% endfor %}"
UNKNOWN = "<unk>"


def bundled_config(model: str) -> Path:
    """aiconfigurator's bundled `config.json` of `model` (a Hugging Face name, e.g. Qwen/Qwen3-32B)."""
    import aiconfigurator_core

    path = Path(aiconfigurator_core.__file__).parent / "model_configs" / f"{model.replace('/', '--')}_config.json"
    if not path.is_file():
        raise ValueError(f"aiconfigurator ships no config.json for {model!r}: a live mocker cannot serve it here")
    return path


def vocabulary_size(folder: Path) -> int:
    """The words the folder's tokenizer knows (`w0` ... `w{n-1}`), the unknown word aside."""
    return int(json.loads((folder / "config.json").read_text(encoding="utf-8"))["vocab_size"]) - 1


def write_model_folder(model: str, folder: str | Path) -> Path:
    """`folder` holding config.json, tokenizer.json and tokenizer_config.json for `model`; returns the folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bundled_config(model), folder / "config.json")
    words = vocabulary_size(folder)
    vocabulary = {f"w{i}": i for i in range(words)} | {UNKNOWN: words}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token=UNKNOWN))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNKNOWN,
        "eos_token": UNKNOWN,
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=1), encoding="utf-8")
    return folder
