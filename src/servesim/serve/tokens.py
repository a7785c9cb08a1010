"""How prompt text becomes token ids, and the placeholder text of generated tokens.

The rule (docs/serve.md): when the `tokenizers` package is installed and the model's
`tokenizer.json` is already in the local Hugging Face cache, that tokenizer is used (nothing is
downloaded); otherwise the estimate: one token per 4 characters (rounded up), each token id a
hash of its 4 characters, so equal texts give equal ids and shared prefixes hit the prefix cache.
Chat messages are rendered in ChatML (`<|im_start|>role\\ncontent<|im_end|>\\n` per message, then
`<|im_start|>assistant\\n`) before they are tokenised.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, Protocol

CHARS_PER_TOKEN = 4
"""The estimate's characters per token (English text runs about 4 characters per token)."""

PLACEHOLDER_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")
"""Generated token i is `" " + PLACEHOLDER_WORDS[i % 8]`: servesim simulates timing, not text."""


class Tokenizer(Protocol):
    description: str

    def encode(self, text: str) -> list[int]:
        """The token ids of `text`."""
        ...


class EstimatedTokenizer:
    """One token per `CHARS_PER_TOKEN` characters; each id a CRC-32 of its characters."""

    description = f"estimate: 1 token per {CHARS_PER_TOKEN} characters (no local tokenizer found)"

    def encode(self, text: str) -> list[int]:
        step = CHARS_PER_TOKEN
        return [zlib.crc32(text[i:i + step].encode()) & 0x7FFFFFFF for i in range(0, len(text), step)]


class HuggingFaceTokenizer:
    """A `tokenizers.Tokenizer` read from a local tokenizer.json."""

    def __init__(self, tokenizer: Any, path: str) -> None:
        self._tokenizer = tokenizer
        self.description = f"tokenizer.json at {path}"

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)


def tokenizer_for(model: str, path: str | None = None) -> Tokenizer:
    """The tokenizer of `model`: the tokenizer.json at `path`, or the one in the local Hugging
    Face cache, when `tokenizers` is installed; else the estimate."""
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        return EstimatedTokenizer()
    if path is None:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "tokenizer.json")
        path = found if isinstance(found, str) else None
    if path is None:
        return EstimatedTokenizer()
    return HuggingFaceTokenizer(HFTokenizer.from_file(path), path)


def render_chat(messages: Sequence[tuple[str, str]]) -> str:
    """(role, content) messages in ChatML, ending with the assistant's turn opened."""
    parts = [f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


def placeholder(index: int) -> str:
    """The text of generated token `index` (0-based)."""
    return " " + PLACEHOLDER_WORDS[index % len(PLACEHOLDER_WORDS)]


def placeholder_text(start: int, count: int) -> str:
    """The text of generated tokens `start` … `start + count - 1`."""
    return "".join(placeholder(i) for i in range(start, start + count))
