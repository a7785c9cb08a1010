"""Validating OpenAI-style requests: a request body becomes a `ParsedRequest`, or an
`ApiError` that the HTTP layer answers with status 400 and an OpenAI-style JSON error."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from servesim.serve.tokens import Tokenizer, render_chat


class ApiError(Exception):
    """A request the server refuses: HTTP `status` with an OpenAI-style error body."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.kind = kind

    def body(self) -> dict[str, Any]:
        """{"error": {message, type, param, code}}, as vLLM and OpenAI answer."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


@dataclass(frozen=True, slots=True)
class Limits:
    """What the served engine accepts."""

    models: tuple[str, ...]
    """The model names a request may ask for (the first is the config's model)."""
    max_model_len: int | None
    """Prompt plus output tokens a request may have (None: no context limit)."""
    default_max_tokens: int
    """Output tokens of a request that does not say `max_tokens`."""


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A valid completion or chat request, as the simulation takes it."""

    chat: bool
    model: str
    token_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or ApiError."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object (got {type(body).__name__})")
    return body


def parse_request(body: dict[str, Any], chat: bool, limits: Limits, tokenizer: Tokenizer) -> ParsedRequest:
    """Validate a /v1/completions (`chat` False) or /v1/chat/completions body."""
    model = body.get("model", limits.models[0])
    if not isinstance(model, str) or model not in limits.models:
        raise ApiError(f"The model `{model}` does not exist; this server serves {', '.join(limits.models)}",
                       "model", kind="NotFoundError")
    ids = _chat_ids(body, tokenizer) if chat else _prompt_ids(body, tokenizer)
    if not ids:
        raise ApiError("the prompt is empty: it must have at least one token", "messages" if chat else "prompt")
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _integer(body, key, limits.default_max_tokens, 1)
    min_tokens = _integer(body, "min_tokens", 0, 0)
    if min_tokens > max_tokens:
        raise ApiError(f"min_tokens ({min_tokens}) must be less than or equal to max_tokens ({max_tokens})",
                       "min_tokens")
    if limits.max_model_len is not None and len(ids) + max_tokens > limits.max_model_len:
        raise ApiError(f"This model's maximum context length is {limits.max_model_len} tokens. However, you "
                       f"requested {len(ids) + max_tokens} tokens ({len(ids)} in the "
                       f"{'messages' if chat else 'prompt'}, {max_tokens} in the completion). Please reduce "
                       f"the length of the {'messages' if chat else 'prompt'} or completion.", key)
    for name in ("ignore_eos", "stream"):
        if not isinstance(body.get(name, False), bool):
            raise ApiError(f"{name} must be a boolean (got {body[name]!r})", name)
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise ApiError(f"n must be 1: servesim serve generates one choice per request (got {n!r})", "n")
    stream = bool(body.get("stream", False))
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError("stream_options must be an object", "stream_options")
    options = options or {}
    if options and not stream:
        raise ApiError("stream_options can only be given when stream is true", "stream_options")
    return ParsedRequest(chat, model, ids, max_tokens, stream, bool(options.get("include_usage", False)),
                         bool(options.get("continuous_usage_stats", False)))


def _integer(body: dict[str, Any], key: str, default: int, least: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(f"{key} must be an integer (got {value!r})", key)
    if value < least:
        raise ApiError(f"{key} must be at least {least}, got {value}.", key)
    return value


def _prompt_ids(body: dict[str, Any], tokenizer: Tokenizer) -> list[int]:
    """The token ids of a completion's `prompt`: a text, token ids, or a list of one of those."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    if isinstance(prompt, list):
        if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            return list(prompt)
        if all(isinstance(t, (str, list)) for t in prompt):
            raise ApiError("batched prompts are not supported: send one prompt per request", "prompt")
        raise ApiError("prompt token ids must be non-negative integers", "prompt")
    if prompt is None:
        raise ApiError("prompt is required", "prompt")
    raise ApiError(f"prompt must be a string or a list of token ids (got {type(prompt).__name__})", "prompt")


def _chat_ids(body: dict[str, Any], tokenizer: Tokenizer) -> list[int]:
    """The token ids of a chat's `messages`, rendered in ChatML."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list", "messages")
    rendered: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(f"messages[{i}] must be an object with a role", "messages")
        rendered.append((message["role"], _content(message.get("content"), i)))
    return tokenizer.encode(render_chat(rendered))


def _content(content: Any, i: int) -> str:
    """A message's content as text (a string, or a list of text parts)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(f"messages[{i}].content: only text parts are supported", "messages")
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(f"messages[{i}].content must be a string or a list of text parts", "messages")
