"""Chat prompts from a tokenizer's chat template (docs/hf.md, "Chat prompts"): its token ids decode as transformers'
generate() decodes them; its text, encoded again, holds a second BOS, which is warned about; and the mapping that
apply_chat_template returns in transformers 5 is refused saying to pass its input_ids."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from decodekit_hf.model import HFModel

import decodekit as dk

SPECIALS = ["<s>", "</s>", "<|user|>", "<|assistant|>"]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MESSAGES = [{"role": "user", "content": "hi there"}]


def make_tokenizer(adds_bos: bool) -> Any:
    """Lower-case letters and a space, one id per character, after the specials; a BOS before every text where
    `adds_bos`, as a Llama tokenizer adds it (GPT-2's adds none); and a chat template that writes the BOS itself, as
    Llama 3's does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([*SPECIALS, " ", *"abcdefghijklmnopqrstuvwxyz"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="</s>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.add_special_tokens(SPECIALS)
    if adds_bos:
        tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tk.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")  # type: ignore[no-untyped-call]
    tokenizer.chat_template = TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def chat_tokenizer() -> Any:
    return make_tokenizer(adds_bos=True)


def test_the_templates_ids_decode_as_generate_decodes_them(llama: Any, chat_tokenizer: Any) -> None:
    ids = chat_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)["input_ids"]
    assert ids[:2] == [0, 2]  # one BOS, then <|user|>
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = dk.generate(HFModel(llama, chat_tokenizer), ids, chain="greedy", max_new_tokens=8)
    reference = llama.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=8, eos_token_id=None)
    assert out.tokens[0] == reference[0, len(ids) :].tolist()


def test_the_templates_text_encoded_again_starts_with_two_bos_and_says_so(llama: Any, chat_tokenizer: Any) -> None:
    """tokenizer(text) adds a BOS before the template's own, and encode does as tokenizer(text) does: silently, the
    model was handed a prompt it never saw in training (llama.cpp warns of the same)."""
    text = chat_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert chat_tokenizer(text)["input_ids"][:3] == [0, 0, 2]
    said = r"starts with two BOS tokens \('<s>'\).*apply_chat_template\(\.\.\.\)\['input_ids'\]"
    with pytest.warns(UserWarning, match=said):
        out = dk.generate(HFModel(llama, chat_tokenizer), text, chain="greedy", max_new_tokens=2)
    assert out.prompt_tokens[0][:3] == [0, 0, 2]


def test_a_batch_encoding_is_refused_saying_to_pass_its_input_ids(llama: Any, chat_tokenizer: Any) -> None:
    """transformers 5's apply_chat_template returns a BatchEncoding (a mapping), not the list of ids of 4.x."""
    encoding = chat_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    with pytest.raises(dk.ParameterError, match=r"^prompts=.* is a mapping .*: pass its \['input_ids'\]$"):
        dk.generate(HFModel(llama, chat_tokenizer), encoding, max_new_tokens=2)


def test_two_bos_the_text_holds_itself_are_not_warned_about(llama: Any) -> None:
    """A tokenizer that adds no BOS (GPT-2's) passes the text's own ids: nothing was added, so nothing to say."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = dk.generate(HFModel(llama, make_tokenizer(adds_bos=False)), "<s><s>hi", max_new_tokens=1)
    assert out.prompt_tokens[0] == [0, 0, 12, 13]
