#!/usr/bin/env python3
"""Writes core/util/tied_weights.inc: the weights each transformers model class ties, as the installed
transformers (5.12 in the PyTorch 2.14 root) declares them, for ckptscope's tie rule (util/tied_pairs.h).

    scripts/torch2-python.sh scripts/gen-tied-weights.py OUT.inc

transformers 5.x decides ties in PreTrainedModel.get_expanded_tied_weights_keys (modeling_utils.py):
a class attribute `_tied_weights_keys = {target: source}` applies when the model's config has
`tie_word_embeddings` true (`getattr(self.config, "tie_word_embeddings", False)`: a config class
without the attribute ties nothing); save_pretrained (remove_tied_weights_from_state_dict) drops the
targets and keeps the sources, and from_pretrained's tie_weights sets each target to its source. For
each model class the library exports this records:
- the tie_word_embeddings its config class gives when config.json does not say (`Config()`), and
  whether the config class overrides what config.json says (T5Config sets it true whatever it is
  given): "default-true", "default-false", "always";
- the mapping, as `target=source` pairs joined by ';' (names, or module names that stand for every
  parameter under them): the class's own, then those of each PreTrainedModel its __init__ builds,
  under that attribute's name, as post_init gathers them into all_tied_weights_keys (checked against
  a real model built on the meta device for a few classes before anything is written); or "pattern"
  when a key is a regular expression matched against the model's own parameter names (which a file
  does not list); or "dynamic" when the class sets `_tied_weights_keys` in __init__ from its config.
  A submodel's pairs are decided by the top-level config here, as they are wherever a class hands its
  config to its submodel (BartForConditionalGeneration's `model`).
Classes that tie nothing are listed too, so the rule can tell "ties nothing" from "not known".
A check in tests/torch2 runs this again and compares with the checked-in file.
"""
import inspect
import re
import sys

import torch
import transformers
from transformers import PreTrainedModel

PLAIN = re.compile(r"^[A-Za-z0-9_.]+$")


def config_tie(config_class):
    """How the config class decides tie_word_embeddings: default-true, default-false, always, never."""
    if config_class is None:
        return "default-false"
    try:
        default = bool(getattr(config_class(), "tie_word_embeddings", False))
        given_false = bool(getattr(config_class(tie_word_embeddings=False), "tie_word_embeddings", False))
        given_true = bool(getattr(config_class(tie_word_embeddings=True), "tie_word_embeddings", False))
    except Exception:  # a config class that needs arguments: read its declared default
        default = bool(getattr(config_class, "tie_word_embeddings", False))
        return "default-true" if default else "default-false"
    if given_false and given_true:
        return "always"
    if not given_false and not given_true:
        return "never"
    return "default-true" if default else "default-false"


ASSIGN = re.compile(r"self\.(\w+)\s*=\s*(\w+)\s*\(")


def own_mapping(cls):
    """The class's own _tied_weights_keys: a dict, or "dynamic" when __init__ or a property sets it."""
    init = inspect.getsource(cls.__init__) if "__init__" in vars(cls) else ""
    tied = inspect.getattr_static(cls, "_tied_weights_keys", None)
    if "_tied_weights_keys" in init or not (tied is None or isinstance(tied, dict)):
        return "dynamic"
    return dict(tied or {})


def full_mapping(cls, depth=0):
    """What PreTrainedModel.post_init gathers into all_tied_weights_keys: the class's own pairs, then
    each PreTrainedModel its __init__ builds (`self.model = BartModel(config)`), its pairs under the
    attribute's name (found in the source; a submodel built through AutoModel is not seen)."""
    own = own_mapping(cls)
    if own == "dynamic":
        return "dynamic"
    pairs = dict(own)
    try:
        source = inspect.getsource(cls.__init__)
    except (OSError, TypeError):
        source = ""
    module = sys.modules.get(cls.__module__)
    for attr, name in ASSIGN.findall(source) if depth < 4 else []:
        sub = getattr(module, name, None)
        if not inspect.isclass(sub) or not issubclass(sub, PreTrainedModel) or sub is cls:
            continue
        inner = full_mapping(sub, depth + 1)
        if inner == "dynamic":
            return "dynamic"
        for k, v in inner.items():
            pairs.setdefault(f"{attr}.{k}", f"{attr}.{v}")
    return pairs


def mapping_text(cls):
    tied = full_mapping(cls)
    if tied == "dynamic":
        return "dynamic"
    if not tied:
        return ""
    if not all(PLAIN.match(k) and PLAIN.match(v) for k, v in tied.items()):
        return "pattern"
    return ";".join(f"{k}={v}" for k, v in tied.items())


def self_check():
    """The source scan against what a model really gathers (all_tied_weights_keys, built on the meta
    device from a small config that ties), for classes with submodels of their own."""
    small = dict(vocab_size=64, d_model=16, hidden_size=16, n_embd=16, num_layers=1, num_hidden_layers=1,
                 encoder_layers=1, decoder_layers=1, num_heads=2, num_attention_heads=2, encoder_attention_heads=2,
                 decoder_attention_heads=2, n_layer=1, n_head=2, d_ff=32, d_kv=8, intermediate_size=32,
                 encoder_ffn_dim=32, decoder_ffn_dim=32, tie_word_embeddings=True)
    for name in ("BartForConditionalGeneration", "T5ForConditionalGeneration", "GPT2LMHeadModel",
                 "MBartForConditionalGeneration", "PegasusForConditionalGeneration", "LlamaForCausalLM"):
        cls = getattr(transformers, name)
        keys = inspect.signature(cls.config_class.__init__).parameters
        config = cls.config_class(**{k: v for k, v in small.items() if k in keys or hasattr(cls.config_class, k)})
        with torch.device("meta"):
            model = cls(config)
        want = dict(model.all_tied_weights_keys)
        got = full_mapping(cls)
        if want != got:
            raise SystemExit(f"{name}: the source scan gives {got}, the model gathers {want}")


def main(out_path):
    self_check()
    rows = {}
    names = [n for n in dir(transformers) if n[:1].isupper() and ("Model" in n or "For" in n or "LMHead" in n)]
    for name in names:
        try:
            cls = getattr(transformers, name)
        except Exception:
            continue
        if not inspect.isclass(cls) or not issubclass(cls, PreTrainedModel) or cls.__name__ != name:
            continue
        mapping = mapping_text(cls)
        tie = config_tie(getattr(cls, "config_class", None)) if mapping else "default-false"
        rows[name] = (tie, mapping)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(f"// Generated by scripts/gen-tied-weights.py from transformers {transformers.__version__}: each model\n"
                "// class, how its config decides tie_word_embeddings, and its _tied_weights_keys (target=source;...,\n"
                "// \"pattern\": regular expressions over the model's parameter names, \"dynamic\": set in __init__).\n"
                "// clang-format off\n")
        for name in sorted(rows):
            tie, mapping = rows[name]
            kind = {"default-true": "DefaultTrue", "default-false": "DefaultFalse", "always": "Always",
                    "never": "Never"}[tie]
            f.write(f'{{"{name}", TieConfig::{kind}, "{mapping}"}},\n')
        f.write("// clang-format on\n")
    print(f"{len(rows)} classes, {sum(1 for t, m in rows.values() if m)} with ties, transformers "
          f"{transformers.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
