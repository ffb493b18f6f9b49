"""A tiny LLaVA-style vision-language model with random weights, built in code (no hub): a
2-layer CLIP vision tower and a 2-layer Llama, a word-level tokenizer that knows "Yes" and "No",
and a chat template. It answers nonsense, but runs the real transformers path (AutoProcessor,
AutoModelForImageTextToText, batched forward passes) in milliseconds on CPU.
"""

from __future__ import annotations

from pathlib import Path

IMAGE_SIDE = 32
PATCH = 8

# Words the tokenizer knows; anything else is <unk>. "Yes" and "No" are single tokens.
_WORDS = [
    "Yes",
    "No",
    "yes",
    "no",
    "system",
    "user",
    "assistant",
    ":",
    "?",
    ".",
    ",",
    "a",
    "an",
    "the",
    "is",
    "are",
    "there",
    "this",
    "photo",
    "image",
    "in",
    "on",
    "of",
    "Is",
    "Are",
    "Does",
    "show",
    "red",
    "blue",
    "green",
    "yellow",
    "circle",
    "square",
    "triangle",
    "beside",
    "above",
    "Answer",
    "each",
    "question",
    "about",
    "it",
    "with",
    "single",
    "word",
    "or",
    "You",
    "looking",
    "at",
    "one",
]

_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: "
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image> {% else %}{{ part['text'] }} {% endif %}"
    "{% endfor %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def build_tiny_vlm(folder: Path) -> Path:
    """Build and save the tiny model with its processor in `folder` (seeded weights)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    specials = ["<unk>", "<pad>", "<s>", "</s>", "<image>"]
    vocab = {token: i for i, token in enumerate(specials + list(dict.fromkeys(_WORDS)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        extra_special_tokens={"image_token": "<image>"},
    )
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIDE},
        crop_size={"height": IMAGE_SIDE, "width": IMAGE_SIDE},
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # the vision tower's CLS token
        chat_template=_CHAT_TEMPLATE,
        image_token="<image>",
    )
    torch.manual_seed(0)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=IMAGE_SIDE,
            patch_size=PATCH,
            projection_dim=32,
        ),
        text_config=LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            vocab_size=len(vocab),
            max_position_embeddings=512,
            pad_token_id=vocab["<pad>"],
            bos_token_id=vocab["<s>"],
            eos_token_id=vocab["</s>"],
        ),
        image_token_index=vocab["<image>"],
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        pad_token_id=vocab["<pad>"],
    )
    model = LlavaForConditionalGeneration(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
