"""Train a tiny demo vision-language model: a real LLaVA (transformers' LlavaForConditionalGeneration
and LlavaProcessor, a CLIP vision tower and a Llama text model, both a few layers deep) that
answers yes/no questions about the demo's drawn scenes, so the `vlm:` scorer runs for real
offline.

    python tools/train_demo_vlm.py train OUT [--minutes 25] [--scenes 4000] [--threads 1]
    python tools/train_demo_vlm.py evaluate FOLDER [--scenes 300]

Training data: random scenes from the demo's own generator (`engine.demo.scenes`), drawn from
seed streams of their own (never the demo collection's, the CLIP model's or each other's), with
questions made from what was drawn (colours, shapes, colour-shape objects, counts, sizes,
patterned backgrounds, occlusion, beside/above relations) by templates, each answer computed
from the scene's plan by the benchmark's own rules (`judge`'s geometry), balanced 50/50 yes/no
per question type. The benchmark's queries and judgments are never read.

Each example goes through the prompt the scorer builds (`engine.rerank.answering`: the yes/no
instruction as a system turn, the photo and question as the first user turn, earlier questions
and their answers as earlier turns) with the model's own chat template, and the loss is the
cross-entropy of the first answer token ("yes" or "no") over the whole vocabulary, as the
scorer reads p(yes), plus that of the earlier turns' answers; colour questions come first, then
shapes and objects, then every type (a curriculum). The chat template leaves the system turn out: a model this small has no use
for the instruction, the expert context or the query line, and a short prompt trains faster.
`evaluate` loads a saved folder through the real scorer (`engine.rerank.vlm.VlmScorer`) and
reports held-out accuracy per question type, beside what the question text alone gives away.
On this project's shared CPUs the model stayed at chance (docs/BENCHMARKS.md, "A demo VLM"),
so none ships; the tool is kept to train one where a GPU allows tens of thousands of steps.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository's packages come first
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from engine.demo.scenes import (  # noqa: E402
    COLOURS,
    DEMO_CLASSES,
    PATTERNED_BACKGROUNDS,
    SHAPES,
    STREAM_GEOMETRY,
    DemoScene,
    PlacedObject,
    draw_demo_scene,
    image_rng,
    jpeg_bytes,
    pick,
)
from engine.rerank.answering import YES_NO_INSTRUCTION, question_text, spoken_answer, system_text  # noqa: E402
from engine.rerank.base import Answer, Question  # noqa: E402

IMAGE_SIDE = 96  # pixels the model sees (the demo's photos are 160)
PATCH = 24  # 4 x 4 image tokens: few enough that the question finds the shapes early
# Seed purposes of their own: the demo collection is 0, the demo CLIP model's data 1 and 2.
PURPOSE_VLM_TRAIN, PURPOSE_VLM_HELDOUT = 3, 4

QUESTION_TYPES: tuple[str, ...] = (
    "colour",
    "shape",
    "object",
    "count",
    "size",
    "background",
    "occlusion",
    "relation",
)
_NUMBER_WORDS = {1: "one", 2: "two", 3: "three"}

# Word-level vocabulary: everything the templates, the instruction and the chat roles can say.
_SPECIALS = ["<unk>", "<pad>", "<s>", "</s>", "<image>"]
_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'] }} : "
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image> {% else %}{{ part['text'] }} {% endif %}"
    "{% endfor %}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


# ---------------------------------------------------------------------------------------------
# Scenes and what they show


@dataclass(frozen=True)
class Facts:
    """What one drawn scene shows, as the questions need it."""

    objects: tuple[PlacedObject, ...]
    background: str

    def names(self) -> list[str]:
        return [o.name for o in self.objects]

    def colours(self) -> set[str]:
        return {o.demo_class.colour for o in self.objects}

    def shapes(self) -> set[str]:
        return {o.demo_class.shape for o in self.objects}


def random_scene(rng: np.random.Generator) -> DemoScene:
    """One to three shapes of any species, in any of the layouts, sizes and backgrounds the
    demo draws (two objects beside or above each other; counts of one species; mixed trios)."""
    names = [c.common_name for c in DEMO_CLASSES]
    background = pick(rng, PATTERNED_BACKGROUNDS) if rng.uniform() < 0.3 else None
    roll = rng.uniform()
    if roll < 0.45:
        size = pick(rng, ("tiny", "normal", "large", "normal"))
        occluded = bool(rng.uniform() < 0.3)
        return DemoScene((pick(rng, names),), size=size, background=background, occluded=occluded)
    if roll < 0.75:
        first = pick(rng, names)
        second = first if rng.uniform() < 0.2 else pick(rng, names)
        layout = pick(rng, ("beside", "above", "free"))
        occluded = bool(rng.uniform() < 0.15)
        return DemoScene((first, second), layout, background=background, occluded=occluded)
    first = pick(rng, names)
    mixed = rng.uniform() < 0.5
    trio = (first, pick(rng, names), pick(rng, names)) if mixed else (first,) * 3
    return DemoScene(trio, background=background)


def draw_scene(purpose: int, number: int) -> tuple[Image.Image, Facts]:
    """Scene `number` of a purpose's stream, drawn and stored as the demo stores photos."""
    scene = random_scene(image_rng(purpose, 0, 0, number, STREAM_GEOMETRY))
    image, background, objects = draw_demo_scene(image_rng(purpose, 0, 0, number), scene)
    stored = Image.open(io.BytesIO(jpeg_bytes(image))).convert("RGB")
    return stored, Facts(tuple(objects), background)


# The truth of each kind of question, from the plan alone (the benchmark judge's geometry).


def _beside(a: PlacedObject, b: PlacedObject) -> bool:
    return abs(a.cx - b.cx) > abs(a.cy - b.cy)


def _above(a: PlacedObject, b: PlacedObject) -> bool:
    return abs(a.cy - b.cy) > abs(a.cx - b.cx) and a.cy < b.cy


def related(facts: Facts, a_name: str, relation: str, b_name: str) -> bool:
    """Whether some `a_name` stands in `relation` ("beside", "above", "below") to some other
    object named `b_name`."""
    for a in facts.objects:
        for b in facts.objects:
            if a is b or a.name != a_name or b.name != b_name:
                continue
            if relation == "beside" and _beside(a, b):
                return True
            if relation == "above" and _above(a, b):
                return True
            if relation == "below" and _above(b, a):
                return True
    return False


def _species_guess(rng: np.random.Generator, facts: Facts) -> str:
    """A species to ask about: one drawn, a swapped binding of drawn colours and shapes, or any."""
    roll = rng.uniform()
    if roll < 0.5:
        return pick(rng, facts.names())
    if roll < 0.75:
        return f"{pick(rng, sorted(facts.colours()))} {pick(rng, sorted(facts.shapes()))}"
    return pick(rng, [c.common_name for c in DEMO_CLASSES])


def _propose(
    kind: str, rng: np.random.Generator, facts: Facts, number: int = 0
) -> tuple[str, bool]:
    """One candidate question of `kind` about the scene, with its true answer; `number`: the
    count a count question asks (any when 0)."""
    names = facts.names()
    if kind == "colour":
        c = pick(rng, COLOURS)
        text = pick(rng, (
            "Is there something {c} in this image?", "Is anything {c} in this photo?",
            "Does this image show something {c}?", "Is there a {c} shape in this image?",
        )).format(c=c)  # fmt: skip
        return text, c in facts.colours()
    if kind == "shape":
        s = pick(rng, SHAPES)
        text = pick(rng, (
            "Is there a {s} in this image?", "Does this image show a {s}?",
            "Is there a {s} in this photo?",
        )).format(s=s)  # fmt: skip
        return text, s in facts.shapes()
    if kind == "object":
        x = _species_guess(rng, facts)
        text = pick(rng, (
            "Is there a {x} in this image?", "Does this image show a {x}?",
            "Is there a {x} in this photo?", "Can you see a {x}?",
        )).format(x=x)  # fmt: skip
        return text, x in names
    if kind == "count":
        x = _species_guess(rng, facts)
        n = number or int(rng.integers(1, 4))
        templates: tuple[str, ...]
        if n == 1:
            templates = ("Is there exactly one {x} in this image?", "Does this image show one {x}?")
        else:
            templates = (
                "Are there {n} {x}s in this image?", "Does this image show {n} {x}s?",
                "Are there exactly {n} {x}s?",
            )  # fmt: skip
        return pick(rng, templates).format(n=_NUMBER_WORDS[n], x=x), names.count(x) == n
    if kind == "size":
        x = _species_guess(rng, facts)
        size = pick(rng, ("tiny", "large"))
        text = pick(rng, (
            "Is the {x} {size}?", "Does this image show a {size} {x}?",
            "Is there a {size} {x} in this image?",
        )).format(x=x, size=size)  # fmt: skip
        return text, any(o.name == x and o.size == size for o in facts.objects)
    if kind == "background":
        pattern = pick(rng, PATTERNED_BACKGROUNDS)
        if rng.uniform() < 0.5:
            text = pick(rng, ("Is the background {p}?", "Is the background of this photo {p}?"))
            return text.format(p=pattern), facts.background == pattern
        x = _species_guess(rng, facts)
        text = f"Does this image show a {x} on a {pattern} background?"
        return text, x in names and facts.background == pattern
    if kind == "occlusion":
        x = _species_guess(rng, facts)
        text = pick(rng, (
            "Is the {x} partly hidden behind twigs?",
            "Does this image show a {x} partly hidden behind twigs?",
            "Is the {x} partly hidden?",
        )).format(x=x)  # fmt: skip
        return text, any(o.name == x and o.occluded for o in facts.objects)
    if kind == "relation":
        a, b = _species_guess(rng, facts), _species_guess(rng, facts)
        if rng.uniform() < 0.5 and len(facts.objects) > 1:  # mostly the pairs drawn
            first, second = rng.choice(len(facts.objects), 2, replace=False)
            a, b = facts.objects[int(first)].name, facts.objects[int(second)].name
        relation = pick(rng, ("beside", "above", "below"))
        text = pick(rng, (
            "Does this image show a {a} {r} a {b}?", "Is the {a} {r} the {b}?",
            "Is there a {a} {r} a {b}?",
        )).format(a=a, r=relation, b=b)  # fmt: skip
        return text, related(facts, a, relation, b)
    raise ValueError(f"unknown question type {kind!r}")


def ask(
    kind: str, rng: np.random.Generator, facts: Facts, want: bool, number: int = 0
) -> str | None:
    """A question of `kind` whose true answer is `want` (None when the scene has none)."""
    for _ in range(60):
        text, truth = _propose(kind, rng, facts, number)
        if truth == want:
            return text
    return None


@dataclass(frozen=True)
class Example:
    """One training or test example: a scene, earlier turns, the question and its answer."""

    scene: int
    kind: str
    question: str
    answer: bool
    history: tuple[tuple[str, bool], ...] = ()


def make_examples(
    rng: np.random.Generator,
    facts: Sequence[Facts],
    count_per_type: int,
    history: bool,
    kinds: Sequence[str] = QUESTION_TYPES,
) -> list[Example]:
    """`count_per_type` examples of each question type, half yes and half no, each on a random
    scene that has such a question; with `history`, half of them after one or two earlier
    questions about the same photo with their true answers (the scorer's chained turns)."""
    out: list[Example] = []
    for kind in kinds:
        for i in range(count_per_type):
            want = i % 2 == 0
            # Each count asked as often with yes as with no, or the number alone would tell
            # (most scenes hold one shape of a kind: "one" would mostly be yes).
            number = 1 + (i // 2) % 3 if kind == "count" else 0
            while True:
                scene = int(rng.integers(len(facts)))
                question = ask(kind, rng, facts[scene], want, number)
                if question is not None:
                    break
            earlier: list[tuple[str, bool]] = []
            if history and rng.uniform() < 0.5:
                for _ in range(int(rng.integers(1, 3))):
                    other = pick(rng, QUESTION_TYPES)
                    said = bool(rng.uniform() < 0.5)
                    text = ask(other, rng, facts[scene], said)
                    if text is not None:
                        earlier.append((text, said))
            out.append(Example(scene, kind, question, want, tuple(earlier)))
    order = rng.permutation(len(out))
    return [out[int(i)] for i in order]


# ---------------------------------------------------------------------------------------------
# The model, its tokenizer and processor


def _words(text: str) -> list[str]:
    """The tokenizer's split: lower case, words and single punctuation marks."""
    return re.findall(r"\w+|[^\w\s]", text.lower())


def vocabulary() -> list[str]:
    """Every word the prompts can hold: the templates' words, every colour, shape, size,
    pattern and number, the scorer's instruction and query line, the chat roles."""
    rng = np.random.default_rng(0)
    corpus = [YES_NO_INSTRUCTION, system_text("", "a query"), "system user assistant yes no"]
    corpus += list(COLOURS) + list(SHAPES) + list(PATTERNED_BACKGROUNDS)
    corpus += ["tiny normal large below beside above one two three", "circles squares triangles"]
    for number in range(400):
        _, facts = plan_only(PURPOSE_VLM_TRAIN, number)
        for kind in QUESTION_TYPES:
            corpus.append(_propose(kind, rng, facts)[0])
    words = sorted({w for text in corpus for w in _words(text)})
    return _SPECIALS + words


def plan_only(purpose: int, number: int) -> tuple[DemoScene, Facts]:
    """A scene's plan without its pixels (for the vocabulary)."""
    scene = random_scene(image_rng(purpose, 0, 0, number, STREAM_GEOMETRY))
    from engine.demo.scenes import _plan_photo  # the plan alone, no drawing

    background, objects = _plan_photo(image_rng(purpose, 0, 0, number), scene)
    return scene, Facts(tuple(objects), background)


def build_processor(words: Sequence[str]) -> Any:
    """LlavaProcessor with a CLIP image processor at IMAGE_SIDE and a lower-casing word-level
    tokenizer (so "Yes" and "yes" are one token, as the scorer reads them)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import CLIPImageProcessor, LlavaProcessor, PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    core.add_special_tokens(_SPECIALS)
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
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # the vision tower's CLS token, dropped by "default"
        chat_template=_CHAT_TEMPLATE,
        image_token="<image>",
    )


MODEL_SIZES: dict[str, int] = {
    "vision_hidden": 128,
    "vision_layers": 3,
    "text_hidden": 128,
    "text_layers": 3,
    "heads": 4,
}


def build_model(vocab: dict[str, int], seed: int = 0) -> Any:
    """A LlavaForConditionalGeneration with a small CLIP vision tower and Llama text model."""
    import torch
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    torch.manual_seed(seed)
    sizes = MODEL_SIZES
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=sizes["vision_hidden"],
            intermediate_size=2 * sizes["vision_hidden"],
            num_hidden_layers=sizes["vision_layers"],
            num_attention_heads=sizes["heads"],
            image_size=IMAGE_SIDE,
            patch_size=PATCH,
            projection_dim=sizes["vision_hidden"],
        ),
        text_config=LlamaConfig(
            hidden_size=sizes["text_hidden"],
            intermediate_size=3 * sizes["text_hidden"],
            num_hidden_layers=sizes["text_layers"],
            num_attention_heads=sizes["heads"],
            num_key_value_heads=sizes["heads"],
            vocab_size=len(vocab),
            max_position_embeddings=512,
            pad_token_id=vocab["<pad>"],
            bos_token_id=vocab["<s>"],
            eos_token_id=vocab["</s>"],
            tie_word_embeddings=False,
        ),
        image_token_index=vocab["<image>"],
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        pad_token_id=vocab["<pad>"],
        tie_word_embeddings=False,
    )
    return LlavaForConditionalGeneration(config)


def prompt_for(processor: Any, example: Example) -> str:
    """The scorer's prompt for an example (as `VlmScorer.messages` builds it: the system turn,
    the photo with the first question, earlier answers as turns), chat template applied."""
    turns: list[tuple[Question, str | None]] = [
        (Question(q), spoken_answer(Answer(1.0 if a else 0.0))) for q, a in example.history
    ]
    turns.append((Question(example.question), None))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": [{"type": "text", "text": system_text("", "")}]}
    ]
    for i, (question, said) in enumerate(turns):
        content: list[dict[str, Any]] = [{"type": "text", "text": question_text(question)}]
        if i == 0:
            content.insert(0, {"type": "image"})
        messages.append({"role": "user", "content": content})
        if said is not None:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": said}]})
    text: str = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return text


# ---------------------------------------------------------------------------------------------
# Training


def render_pool(
    purpose: int, count: int, processor: Any
) -> tuple[Any, list[Facts], list[Image.Image]]:
    """`count` scenes of a purpose: pixel tensors (float16) for the model, facts, images."""
    import torch

    images: list[Image.Image] = []
    facts: list[Facts] = []
    for number in range(count):
        image, fact = draw_scene(purpose, number)
        images.append(image)
        facts.append(fact)
    pixels = []
    for start in range(0, count, 256):
        chunk = processor.image_processor(images=images[start : start + 256], return_tensors="pt")
        pixels.append(chunk["pixel_values"].to(torch.float16))
    return torch.cat(pixels), facts, images


class Batcher:
    """Token ids for examples, with the image placeholder expanded as the processor does."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.tokenizer.padding_side = "left"  # the answer is read at the last position
        self.image_tokens = (IMAGE_SIDE // PATCH) ** 2
        vocab = self.tokenizer.get_vocab()
        self.yes, self.no, self.colon = vocab["yes"], vocab["no"], vocab[":"]

    def texts(self, examples: Sequence[Example]) -> list[str]:
        image = self.processor.image_token
        return [
            prompt_for(self.processor, e).replace(image, image * self.image_tokens, 1)
            for e in examples
        ]

    def encode(self, examples: Sequence[Example], pixels: Any) -> dict[str, Any]:
        import torch

        encoded = self.tokenizer(self.texts(examples), padding=True, return_tensors="pt")
        index = torch.tensor([e.scene for e in examples])
        return {
            "input_ids": encoded["input_ids"],
            "attention_mask": encoded["attention_mask"],
            "pixel_values": pixels[index].float(),
        }

    def earlier_answers(self, ids: Any) -> tuple[Any, Any]:
        """(row, position) of every yes/no answer inside the prompts: an earlier turn's."""
        answer = (ids == self.yes) | (ids == self.no)
        after_role = ids.roll(1, dims=1) == self.colon
        found = (answer & after_role).nonzero()
        return found[:, 0], found[:, 1]

    def targets(self, examples: Sequence[Example]) -> Any:
        import torch

        return torch.tensor([self.yes if e.answer else self.no for e in examples])


def check_against_processor(batcher: Batcher, example: Example, image: Image.Image) -> None:
    """The ids trained on are the ids the processor gives the scorer for the same prompt."""
    ours = batcher.tokenizer(batcher.texts([example]), return_tensors="pt")["input_ids"]
    theirs = batcher.processor(
        text=[prompt_for(batcher.processor, example)], images=[[image]], return_tensors="pt"
    )["input_ids"]
    if ours.tolist() != theirs.tolist():
        raise AssertionError("training ids differ from the processor's")
    unknown = batcher.tokenizer.convert_tokens_to_ids("<unk>")
    if unknown in ours.tolist()[0]:
        raise AssertionError(f"unknown words in {prompt_for(batcher.processor, example)!r}")


def accuracy_by_type(
    examples: Sequence[Example], p_yes: Sequence[float]
) -> dict[str, tuple[float, int]]:
    """(accuracy, examples) per question type and "all", answering yes when p >= 0.5."""
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for example, p in zip(examples, p_yes, strict=True):
        for key in (example.kind, "all"):
            total[key] += 1
            right[key] += int((p >= 0.5) == example.answer)
    return {k: (right[k] / total[k], total[k]) for k in [*QUESTION_TYPES, "all"] if total[k]}


def model_p_yes(
    model: Any, batcher: Batcher, examples: Sequence[Example], pixels: Any
) -> list[float]:
    """p(yes) against p(no) of the first answer token, in batches (training-side check)."""
    import torch

    out: list[float] = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(examples), 64):
            chunk = examples[start : start + 64]
            logits = model(**batcher.encode(chunk, pixels), logits_to_keep=1).logits[:, -1, :]
            pair = torch.log_softmax(logits[:, [batcher.yes, batcher.no]].float(), dim=-1)
            out += pair[:, 0].exp().tolist()
    model.train()
    return out


def train(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    words = vocabulary()
    processor = build_processor(words)
    vocab = processor.tokenizer.get_vocab()
    batcher = Batcher(processor)
    model = build_model(vocab, args.seed)
    params = sum(p.numel() for p in model.parameters())
    log(f"vocabulary {len(words)} words, model {params / 1e6:.2f} M parameters")
    train_pixels, train_facts, train_images = render_pool(PURPOSE_VLM_TRAIN, args.scenes, processor)
    test_pixels, test_facts, _ = render_pool(PURPOSE_VLM_HELDOUT, args.test_scenes, processor)
    log(f"{args.scenes} training and {args.test_scenes} held-out scenes drawn in "
        f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    rng = np.random.default_rng(args.seed)
    test = make_examples(np.random.default_rng(10_000 + args.seed), test_facts, 100, history=False)
    probe = make_examples(rng, train_facts, 4, history=True)
    check_against_processor(batcher, probe[0], train_images[probe[0].scene])

    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    budget = args.minutes * 60
    train_start = time.perf_counter()
    step, best, best_state, history = 0, -1.0, None, []
    pool: list[Example] = []
    model.train()
    while step < args.steps and time.perf_counter() - train_start < budget:
        if len(pool) < args.batch:
            # A curriculum: colours first, then shapes and objects, then every type (from
            # scratch, a model asked everything at once never learns to look at the photo).
            kinds = QUESTION_TYPES[: 1 if step < args.curriculum else 3]
            if step >= 2 * args.curriculum:
                kinds = QUESTION_TYPES
            pool = make_examples(rng, train_facts, 2000 // len(kinds), history=True, kinds=kinds)
        batch, pool = pool[: args.batch], pool[args.batch :]
        # Warm-up, then cosine decay over whichever ends first: the steps or the minutes.
        done = max(step / args.steps, (time.perf_counter() - train_start) / budget)
        lr = args.lr * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))
        for group in optimiser.param_groups:
            group["lr"] = lr
        inputs = batcher.encode(batch, train_pixels)
        logits = model(**inputs).logits.float()
        loss = torch.nn.functional.cross_entropy(logits[:, -1, :], batcher.targets(batch))
        # The earlier turns' answers are true answers about the same photo: learnt from too.
        rows, places = batcher.earlier_answers(inputs["input_ids"])
        if len(rows):
            earlier = logits[rows, places - 1, :]
            loss = loss + torch.nn.functional.cross_entropy(
                earlier, inputs["input_ids"][rows, places]
            )
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        step += 1
        if step % args.every == 0:
            scores = accuracy_by_type(test, model_p_yes(model, batcher, test, test_pixels))
            history.append({"step": step, "loss": round(loss.item(), 4), **{
                k: round(v[0], 3) for k, v in scores.items()}})  # fmt: skip
            log(f"step {step} loss {loss.item():.3f} lr {lr:.5f} held-out "
                + " ".join(f"{k} {v[0]:.2f}" for k, v in scores.items()))  # fmt: skip
            if scores["all"][0] > best:
                best = scores["all"][0]
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    seconds = time.perf_counter() - train_start
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    note = {
        "what": "tiny LLaVA trained by tools/train_demo_vlm.py on random demo scenes",
        "image_side": IMAGE_SIDE,
        "patch": PATCH,
        "model": MODEL_SIZES,
        "parameters": params,
        "vocabulary": len(words),
        "training_scenes": args.scenes,
        "batch": args.batch,
        "learning_rate": args.lr,
        "steps": step,
        "seconds": round(seconds),
        "threads": args.threads,
        "seed": args.seed,
        "best_held_out_accuracy": round(best, 4),
        "held_out_log": history,
    }
    (out / "training.json").write_text(json.dumps(note, indent=1) + "\n", encoding="utf-8")
    log(f"saved {out} after {step} steps in {seconds:.0f} s (best held-out accuracy {best:.3f})")
    return 0


# ---------------------------------------------------------------------------------------------
# Evaluation through the scorer


def evaluate(args: argparse.Namespace) -> int:
    """Held-out accuracy per question type, every answer read by `VlmScorer` from JPEG files."""
    import torch

    from engine.rerank.base import Photo
    from engine.rerank.vlm import VlmScorer

    torch.set_num_threads(args.threads)
    scorer = VlmScorer(Path(args.folder), device="cpu", batch_size=16)
    facts: list[Facts] = []
    with tempfile.TemporaryDirectory() as scratch:
        photos: list[Photo] = []
        for number in range(args.scenes):
            image, fact = draw_scene(PURPOSE_VLM_HELDOUT, number)
            path = Path(scratch) / f"{number}.jpg"
            image.save(path, quality=95)
            photos.append(Photo(number, path, f"held-out-{number}"))
            facts.append(fact)
        examples = make_examples(np.random.default_rng(20_000), facts, args.per_type, history=False)
        by_question: dict[str, list[int]] = defaultdict(list)
        for i, example in enumerate(examples):
            by_question[example.question].append(i)
        p_yes = [0.0] * len(examples)
        started = time.perf_counter()
        for text, indices in by_question.items():
            answers = scorer.score([photos[examples[i].scene] for i in indices], Question(text))
            for i, answer in zip(indices, answers, strict=True):
                p_yes[i] = answer.p_yes
        seconds = time.perf_counter() - started
    scores = accuracy_by_type(examples, p_yes)
    blind = accuracy_by_type(examples, text_only_answers(examples))
    print(f"held-out accuracy through VlmScorer ({len(examples)} questions on {args.scenes} "
          f"scenes, {seconds:.1f} s); text only: the answer most often right for the same "
          "question text in training, without the photo")  # fmt: skip
    print("| question type | examples | accuracy | text only |")
    print("| --- | ---: | ---: | ---: |")
    for kind, (accuracy, count) in scores.items():
        print(f"| {kind} | {count} | {accuracy:.3f} | {blind[kind][0]:.3f} |")
    return 0


def text_only_answers(examples: Sequence[Example], scenes: int = 4000) -> list[float]:
    """p(yes) a model blind to the photo could reach: for each question text, the share of
    yes among training examples with that text (0.5 for a text never seen). It measures how
    much the question alone gives away."""
    facts = [plan_only(PURPOSE_VLM_TRAIN, number)[1] for number in range(scenes)]
    seen: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for example in make_examples(np.random.default_rng(30_000), facts, 5000, history=False):
        seen[example.question][int(example.answer)] += 1
    out: list[float] = []
    for example in examples:
        no, yes = seen.get(example.question, [0, 0])
        out.append(0.5 if yes == no else float(yes > no))
    return out


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("train", help="train and save a model folder")
    t.add_argument("out", type=Path)
    t.add_argument("--minutes", type=float, default=25.0)
    t.add_argument("--steps", type=int, default=4000)
    t.add_argument("--scenes", type=int, default=4000)
    t.add_argument("--test-scenes", type=int, default=300)
    t.add_argument("--batch", type=int, default=48)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--curriculum", type=int, default=300, help="steps of each easy stage")
    t.add_argument("--every", type=int, default=200, help="held-out check every N steps")
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--seed", type=int, default=0)
    e = commands.add_parser("evaluate", help="held-out accuracy through the vlm scorer")
    e.add_argument("folder", type=Path)
    e.add_argument("--scenes", type=int, default=300)
    e.add_argument("--per-type", type=int, default=200)
    e.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = train if args.command == "train" else evaluate
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
