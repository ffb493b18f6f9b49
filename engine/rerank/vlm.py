"""A local vision-language model as a scorer (transformers): p from the logits of the first
generated token ("Yes" against "No"), batched, on the GPU when there is one. The model sees the
photo's earlier questions and its own answers as earlier turns of the conversation
(docs/SPEC.md §2.2)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

from engine.errors import BadImageError, BadInputError, ModelLoadError, one_line
from engine.rerank.answering import (
    answer_from,
    check_finite,
    check_lengths,
    check_some_yes_no,
    history_for,
    logsumexp,
    no_template_prompt,
    open_photo,
    question_text,
    spoken_answer,
    system_text,
    unreadable,
    yes_no_variants,
)
from engine.rerank.base import Answer, Photo, Question

if TYPE_CHECKING:
    from engine.progress import CancelToken

log = logging.getLogger(__name__)

# How many of the first token's most likely tokens must hold Yes or No for some photo of a
# batch (INQUIRE reads the top 20 log-probabilities of an endpoint's first token).
TOP_TOKENS = 20


def model_dtype(device: str, config_dtype: str | None, bf16_supported: bool) -> str:
    """The torch dtype name a VLM is loaded in: fp32 on the CPU (and any non-CUDA device);
    on a CUDA GPU bf16 where the model's config asks for it and the GPU supports it (models
    trained in bf16, Qwen2-VL and the Gemma family among them, overflow to NaN in fp16), fp16
    otherwise."""
    if not device.startswith("cuda"):
        return "float32"
    wanted = (config_dtype or "").strip().lower().removeprefix("torch.")
    if wanted in ("bfloat16", "bf16") and bf16_supported:
        return "bfloat16"
    return "float16"


def config_dtype(folder: Path) -> str | None:
    """The dtype a model folder's config.json asks for ("dtype", or the older "torch_dtype";
    the top level first, then the text model's), None when it names none."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for part in (config, config.get("text_config")):
        if isinstance(part, dict):
            for key in ("dtype", "torch_dtype"):
                if isinstance(part.get(key), str):
                    return str(part[key])
    return None


def folder_identity(folder: Path) -> str:
    """ "sha256-<16 hex>" of a model folder: every file's name and size, and the bytes of
    every file up to 64 MiB and the first and last MiB of larger ones (the weights), so two
    folders holding different models never share a cache entry without hashing gigabytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(folder).as_posix()}\0{size}\0".encode())
        with path.open("rb") as handle:
            if size <= 64 << 20:
                digest.update(handle.read())
            else:
                digest.update(handle.read(1 << 20))
                handle.seek(size - (1 << 20))
                digest.update(handle.read())
    return f"sha256-{digest.hexdigest()[:16]}"


class VlmScorer:
    """A local image-text-to-text model (LLaVA, Idefics, SmolVLM, Qwen2-VL, ... saved as a
    transformers folder with its processor). Each photo is one conversation: the system turn
    holds the yes/no instruction and the expert context, the first user turn holds the photo
    and the first question, earlier questions and the model's answers follow as turns
    (chaining), then the new question. p(yes) comes from the log-softmax of the first generated
    token's logits: the "Yes" variants against the "No" variants of the tokenizer."""

    def __init__(
        self,
        folder: Path,
        *,
        device: str = "auto",
        batch_size: int = 8,
        max_side: int = 768,
    ) -> None:
        try:
            import torch
            import transformers
        except ImportError as error:
            raise ModelLoadError(
                f"the vlm scorer needs transformers ({one_line(error)})"
            ) from error
        from engine.models.floors import require

        # Before 4.56 `dtype=` below is ignored: the model would load in fp32, silently.
        require("transformers", str(getattr(transformers, "__version__", "")), "the vlm scorer")
        folder = Path(folder).expanduser()
        if not folder.is_dir():
            raise BadInputError(f"vlm scorer: {folder} is not a model folder")
        from engine.models.encoders import choose_device

        self.folder = folder
        self.device = choose_device(device)
        self.batch_size = batch_size
        self.max_side = max_side
        self.identity = f"vlm:{folder_identity(folder)}"
        self.seconds_per_call = 0.4 if self.device == "cpu" else 0.05
        try:
            # transformers' Auto classes are untyped (or typed for other uses): go through Any.
            auto: Any = transformers
            self.processor: Any = auto.AutoProcessor.from_pretrained(folder)
            bf16 = self.device.startswith("cuda") and torch.cuda.is_bf16_supported()
            self.dtype = model_dtype(self.device, config_dtype(folder), bf16)
            self.model: Any = auto.AutoModelForImageTextToText.from_pretrained(
                folder, dtype=getattr(torch, self.dtype)
            )
        except (OSError, ValueError, KeyError, RuntimeError) as error:
            raise ModelLoadError(f"vlm scorer: cannot load {folder}: {one_line(error)}") from error
        self.model.to(self.device).eval()
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        # The first answer token is read at the last position: pad on the left so that it is
        # the last position of every prompt in a batch.
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer: Any = tokenizer
        self.yes_ids, self.no_ids = _yes_no_ids(tokenizer)
        if not self.yes_ids or not self.no_ids:
            raise ModelLoadError(f"vlm scorer: the tokenizer of {folder} has no Yes/No token")

    def __repr__(self) -> str:
        return f"VlmScorer({self.identity!r}, device={self.device!r})"

    @property
    def where(self) -> str:
        """How the scorer's errors name it: the model folder, device and dtype."""
        return f"vlm scorer {self.folder} ({self.device}, {self.dtype})"

    def messages(
        self,
        question: Question,
        history: Sequence[tuple[Question, Answer]],
        context: str,
        query: str = "",
    ) -> list[dict[str, Any]]:
        """The conversation for one photo (the photo itself goes in the first user turn); the
        original query, when given, is in the system turn."""
        turns: list[tuple[Question, str | None]] = [(q, spoken_answer(a)) for q, a in history]
        turns.append((question, None))
        out: list[dict[str, Any]] = [
            {"role": "system", "content": [{"type": "text", "text": system_text(context, query)}]}
        ]
        for i, (q, said) in enumerate(turns):
            content: list[dict[str, Any]] = [{"type": "text", "text": question_text(q)}]
            if i == 0:
                content.insert(0, {"type": "image"})
            out.append({"role": "user", "content": content})
            if said is not None:
                out.append({"role": "assistant", "content": [{"type": "text", "text": said}]})
        return out

    def prompt(
        self,
        question: Question,
        history: Sequence[tuple[Question, Answer]],
        context: str,
        query: str = "",
    ) -> str:
        """The prompt text the model reads for one photo (its chat template applied)."""
        if getattr(self.processor, "chat_template", None):
            messages = self.messages(question, history, context, query)
            text: str = self.processor.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return text
        # No chat template (PaliGemma): the image placeholder first, then the question as
        # INQUIRE asks it. PaliGemma's processor expands the placeholder and puts BOS right
        # after the last image token, so the ids read [image tokens][bos]Q: ...\n.
        image_token = getattr(self.processor, "image_token", "<image>")
        return image_token + no_template_prompt(question, history, context, query)

    def score(
        self,
        photos: Sequence[Photo],
        question: Question,
        *,
        history: Sequence[Sequence[tuple[Question, Answer]]] = (),
        context: str = "",
        cancel: CancelToken | None = None,
        query: str = "",
    ) -> list[Answer]:
        """One answer per photo, `batch_size` photos per forward pass; `query`, the original
        search, goes into the prompt when given. Non-finite logits, or no photo whose top
        first tokens hold Yes or No, raise `ScorerError` before any answer is returned (so
        none is cached)."""
        check_lengths(photos, history)
        answers: list[Answer | None] = [None] * len(photos)
        readable: list[tuple[int, Image.Image]] = []
        for i, photo in enumerate(photos):
            try:
                image = open_photo(photo, min_side=self.max_side)
            except BadImageError as error:
                answers[i] = unreadable(error)
                continue
            image.thumbnail((self.max_side, self.max_side))
            readable.append((i, image))
        held: list[bool] = []  # per photo asked: Yes or No among its top first tokens
        began = ""  # the most likely first token of a photo, named when none says yes/no
        for start in range(0, len(readable), self.batch_size):
            if cancel is not None:
                cancel.check()
            chunk = readable[start : start + self.batch_size]
            prompts = [
                self.prompt(question, history_for(history, i), context, query) for i, _ in chunk
            ]
            firsts = self._first_token(prompts, [im for _, im in chunk])
            for (i, _), (l_yes, l_no, in_top, top) in zip(chunk, firsts, strict=True):
                answers[i] = answer_from(l_yes, l_no)
                held.append(in_top)
                began = began or top
        check_some_yes_no(held, self.where, began)
        return [a if a is not None else Answer(0.0) for a in answers]

    def _first_token(
        self, prompts: Sequence[str], images: Sequence[Image.Image]
    ) -> list[tuple[float | None, float | None, bool, str]]:
        """For each prompt: log p("Yes") and log p("No") of the first generated token,
        whether Yes or No is among its `TOP_TOKENS` most likely tokens, and the most likely."""
        import torch

        inputs = self.processor(
            text=list(prompts),
            images=[[image] for image in images],
            padding=True,
            return_tensors="pt",
        ).to(self.device)
        with torch.inference_mode():
            logits = self.model(**inputs).logits[:, -1, :].float()
        logits = logits.cpu()
        # log-sum-exp drops non-finite values: check first, or NaN would read as "no".
        check_finite(logits[:, self.yes_ids + self.no_ids].flatten().tolist(), self.where)
        logprobs = torch.log_softmax(logits, dim=-1)
        tops = torch.topk(logits, min(TOP_TOKENS, logits.shape[-1]), dim=-1).indices.tolist()
        wanted = set(self.yes_ids + self.no_ids)
        out: list[tuple[float | None, float | None, bool, str]] = []
        for row, top in zip(logprobs, tops, strict=True):
            yes = logsumexp([float(row[t]) for t in self.yes_ids])
            no = logsumexp([float(row[t]) for t in self.no_ids])
            first = str(self.tokenizer.convert_ids_to_tokens(int(top[0])) or "")
            out.append((yes, no, bool(wanted.intersection(top)), first))
        return out


def _yes_no_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The single-token ids of "Yes" and "No" as a model may start its answer ("Yes", " Yes",
    "yes", " yes", ...), each id once."""
    found: dict[bool, list[int]] = {True: [], False: []}
    for word in ("Yes", "yes", "YES", "No", "no", "NO"):
        for text in (word, " " + word):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) != 1:
                continue
            kind = yes_no_variants(tokenizer.convert_ids_to_tokens(ids[0]) or "")
            if kind is not None and ids[0] not in found[kind]:
                found[kind].append(int(ids[0]))
    return found[True], found[False]
