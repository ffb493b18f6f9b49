"""Tiny vision-language models with random weights, built in code (no hub), each with its real
processor class and a word-level tokenizer that knows "Yes" and "No": a LLaVA-style model (a
2-layer CLIP vision tower and a 2-layer Llama, with a chat template), Qwen2-VL (a chat
template) and PaliGemma (none, as published). They answer nonsense, but run the real
transformers path (AutoProcessor, AutoModelForImageTextToText, batched forward passes) in
milliseconds on CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

# What the Qwen2-VL and PaliGemma prompts add: INQUIRE's "Q: ... Respond with yes or no." and
# the original query line ("The photos are searched for: ...").
_PROMPT_WORDS = ['"', "picture", "Q", "A", "Respond", "The", "photos", "searched", "for"]
_PROMPT_WORDS += ["frog", "wet", "meadow"]

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


_QWEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _answers_yes_no(model: Any, tokenizer: Any) -> None:
    """Make a random model favour Yes/No as a first token, as a real yes/no VLM does: every
    other token's output row is shrunk, so Yes or No is among the top tokens while p(yes)
    stays the random model's own (the output embedding must not be tied to the input)."""
    import torch

    keep = tokenizer.convert_tokens_to_ids(["Yes", "No", "yes", "no"])
    head = model.get_output_embeddings()
    assert head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    scale = torch.full((head.weight.shape[0], 1), 0.01)
    scale[keep] = 1.0
    with torch.no_grad():
        head.weight.mul_(scale)


def _tokenizer(specials: list[str], **named: str) -> Any:
    """A word-level fast tokenizer over `_WORDS` and `_PROMPT_WORDS` whose `specials` are
    never split."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(dict.fromkeys(specials + _WORDS + _PROMPT_WORDS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.add_special_tokens(specials)
    return PreTrainedTokenizerFast(tokenizer_object=core, **named)


def build_tiny_qwen2_vl(folder: Path) -> Path:
    """Qwen2VLForConditionalGeneration + Qwen2VLProcessor, 1-layer towers, 56-pixel images."""
    import torch
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    specials = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>"]
    specials += ["<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tokenizer = _tokenizer(
        specials, unk_token="<unk>", pad_token="<|endoftext|>", eos_token="<|im_end|>"
    )
    vocab = tokenizer.get_vocab()
    side = 56  # 4 x 4 patches of 14, merged 2 x 2: 4 image tokens
    image_processor = Qwen2VLImageProcessor(
        min_pixels=side * side, max_pixels=side * side, patch_size=14, merge_size=2
    )
    processor = Qwen2VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(
            min_pixels=side * side, max_pixels=side * side, patch_size=14, merge_size=2
        ),
        chat_template=_QWEN_TEMPLATE,
    )
    torch.manual_seed(0)
    config = Qwen2VLConfig(
        text_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "vocab_size": len(vocab),
            "max_position_embeddings": 512,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3]},
            "dtype": "bfloat16",  # as Qwen2-VL is published
            "bos_token_id": vocab["<|endoftext|>"],
            "eos_token_id": vocab["<|im_end|>"],
        },
        vision_config={
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 32,
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
        },
        image_token_id=vocab["<|image_pad|>"],
        video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"],
        vision_end_token_id=vocab["<|vision_end|>"],
        pad_token_id=vocab["<|endoftext|>"],
        eos_token_id=vocab["<|im_end|>"],
    )
    model = Qwen2VLForConditionalGeneration(config).eval()
    _answers_yes_no(model, tokenizer)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


PALI_SIDE, PALI_PATCH = 32, 8  # 16 image tokens


def build_tiny_paligemma(folder: Path) -> Path:
    """PaliGemmaForConditionalGeneration + PaliGemmaProcessor (SigLIP image processor, no chat
    template), a 1-layer SigLIP tower and a 1-layer Gemma."""
    import torch
    from transformers import (
        GemmaConfig,
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessor,
        SiglipVisionConfig,
    )

    # "\n" is a token of its own so the prompt's closing newline shows in the ids.
    specials = ["<unk>", "<pad>", "<bos>", "<eos>", "<image>", "\n"]
    tokenizer = _tokenizer(
        specials, unk_token="<unk>", pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )
    image_processor = SiglipImageProcessor(size={"height": PALI_SIDE, "width": PALI_SIDE})
    image_processor.image_seq_length = (PALI_SIDE // PALI_PATCH) ** 2
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)
    vocab = tokenizer.get_vocab()  # the processor added PaliGemma's <loc>/<seg> tokens
    torch.manual_seed(0)
    config = PaliGemmaConfig(
        vision_config=SiglipVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=PALI_SIDE,
            patch_size=PALI_PATCH,
            projection_dim=32,
        ).to_dict(),
        text_config=GemmaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            vocab_size=len(vocab),
            pad_token_id=vocab["<pad>"],
            bos_token_id=vocab["<bos>"],
            eos_token_id=vocab["<eos>"],
            dtype="bfloat16",  # as PaliGemma is published
            tie_word_embeddings=False,
        ).to_dict(),
        image_token_id=vocab["<image>"],
        projection_dim=32,
        hidden_size=32,
        pad_token_id=vocab["<pad>"],
        tie_word_embeddings=False,
    )
    model = PaliGemmaForConditionalGeneration(config).eval()
    _answers_yes_no(model, tokenizer)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
