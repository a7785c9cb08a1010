"""The HTTP layer (Starlette): vLLM's OpenAI-compatible routes over the paced simulation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from servesim.collect.collector import Status
from servesim.errors import SimulationError
from servesim.serve.driver import Pacer
from servesim.serve.metrics import EngineMetrics
from servesim.serve.protocol import ApiError, Limits, ParsedRequest, parse_json, parse_request
from servesim.serve.session import Ended, Event, Session, Tokens
from servesim.serve.tokens import Tokenizer, placeholder, placeholder_text


@dataclass(eq=False)
class Served:
    """What the routes share."""

    pacer: Pacer
    metrics: EngineMetrics
    limits: Limits
    tokenizer: Tokenizer
    on_started: Callable[[], None] | None = None
    on_stopped: Callable[[], None] | None = None
    draining: bool = False


def build_app(served: Served) -> Starlette:
    """The Starlette application; its lifespan runs the pacer."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(served.pacer.run())
        if served.on_started is not None:
            served.on_started()
        try:
            yield
        finally:
            served.draining = True
            served.pacer.stop()
            await task
            if served.on_stopped is not None:
                served.on_stopped()

    async def health(request: Request) -> Response:
        if served.pacer.failure is not None:
            return JSONResponse({"error": served.pacer.failure}, status_code=500)
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        created = int(time.time())
        data = [{"id": name, "object": "model", "created": created, "owned_by": "servesim", "root": served.limits.models[0],
                 "parent": None, "max_model_len": served.limits.max_model_len} for name in served.limits.models]
        return JSONResponse({"object": "list", "data": data})

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(served.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def completions(request: Request) -> Response:
        return await _complete(served, request, chat=False)

    async def chat(request: Request) -> Response:
        return await _complete(served, request, chat=True)

    routes = [Route("/health", health, methods=["GET"]), Route("/v1/models", models, methods=["GET"]),
              Route("/metrics", metrics, methods=["GET"]),
              Route("/v1/completions", completions, methods=["POST"]),
              Route("/v1/chat/completions", chat, methods=["POST"])]
    return Starlette(routes=routes, lifespan=lifespan)


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


async def _complete(served: Served, request: Request, *, chat: bool) -> Response:
    """Validate, send into the simulation, answer (streamed or whole)."""
    try:
        parsed = parse_request(parse_json(await request.body()), chat, served.limits, served.tokenizer)
        if served.draining:
            raise ApiError("the server is shutting down", status=503, kind="ServiceUnavailableError")
        session = served.pacer.submit(parsed)
    except ApiError as exc:
        return _error(exc)
    except SimulationError as exc:
        return _error(ApiError(f"the simulation failed: {exc}", status=500, kind="InternalServerError"))
    reply = _Reply(parsed, session, chat)
    first = await _until_disconnect(request, session.events.get(), served, session)
    if first is None:
        return Response(status_code=499)
    if isinstance(first, Ended) and first.status is not Status.COMPLETED:
        return _error(_ended_error(first))
    if parsed.stream:
        return StreamingResponse(_stream(served, reply, first), media_type="text/event-stream")
    end = await _until_disconnect(request, _collect(reply, first), served, session)
    if end is None:
        return Response(status_code=499)
    assert isinstance(end, Ended)
    if end.status is not Status.COMPLETED:
        return _error(_ended_error(end))
    return JSONResponse(reply.whole())


async def _collect(reply: _Reply, event: Event) -> Ended:
    """Count the tokens of the reply's session from `event` on, until it ends."""
    while not isinstance(event, Ended):
        reply.given += event.count
        event = await reply.session.events.get()
    return event


def _ended_error(event: Ended) -> ApiError:
    if event.status is Status.REJECTED:
        return ApiError(f"the engine rejected the request: {event.reason or 'it cannot be served'}")
    return ApiError(f"the request ended as {event.status.value}: {event.reason or 'no reason given'}",
                    status=500, kind="InternalServerError")


async def _until_disconnect(request: Request, waiting: Any, served: Served, session: Session) -> Event | None:
    """The next event of `session`, or None (and the session hung up) if the client leaves first."""
    event_task = asyncio.ensure_future(waiting)
    gone_task = asyncio.ensure_future(_disconnected(request))
    done, _ = await asyncio.wait({event_task, gone_task}, return_when=asyncio.FIRST_COMPLETED)
    if event_task in done:
        gone_task.cancel()
        return event_task.result()
    event_task.cancel()
    served.pacer.hang_up(session)
    return None


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class _Reply:
    """The OpenAI-shaped pieces of one answer."""

    def __init__(self, parsed: ParsedRequest, session: Session, chat: bool) -> None:
        self.parsed = parsed
        self.session = session
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + session.key
        self.created = int(time.time())
        self.given = 0

    def usage(self) -> dict[str, int]:
        prompt = self.session.prompt_tokens
        return {"prompt_tokens": prompt, "completion_tokens": self.given, "total_tokens": prompt + self.given}

    def whole(self) -> dict[str, Any]:
        text = placeholder_text(0, self.given)
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": "length", "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.parsed.model, "choices": [choice], "usage": self.usage()}

    def chunk(self, choices: list[dict[str, Any]], usage: bool) -> str:
        body: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                                "created": self.created, "model": self.parsed.model, "choices": choices}
        if self.parsed.include_usage:
            body["usage"] = self.usage() if usage else None
        return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"

    def token_chunk(self, index: int, last: bool) -> str:
        finish = "length" if last else None
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": placeholder(index)}, "logprobs": None,
                                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": placeholder(index), "logprobs": None, "finish_reason": finish,
                      "stop_reason": None}
        return self.chunk([choice], self.parsed.continuous_usage)


async def _stream(served: Served, reply: _Reply, first: Event) -> AsyncIterator[str]:
    """The SSE stream: one chunk per token as the simulation emits it, the usage chunk, [DONE].
    A client that leaves (the stream is cancelled) hangs its request up."""
    session = reply.session
    finished = False
    try:
        if reply.chat:
            yield reply.chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                "finish_reason": None}], reply.parsed.continuous_usage)
        event = first
        while isinstance(event, Tokens):
            for _ in range(event.count):
                reply.given += 1
                yield reply.token_chunk(reply.given - 1, reply.given == session.max_tokens)
            event = await session.events.get()
        finished = True
        if event.status is not Status.COMPLETED:
            error = _ended_error(event)
            yield f"data: {json.dumps(error.body())}\n\n"
        elif reply.given < session.max_tokens:  # ended early (the context limit): the finish chunk
            yield reply.chunk([{"index": 0, **({"delta": {}} if reply.chat else {"text": ""}), "logprobs": None,
                                "finish_reason": "length"}], False)
        if reply.parsed.include_usage:
            yield reply.chunk([], True)
        yield "data: [DONE]\n\n"
    finally:
        if not finished:
            served.pacer.hang_up(session)
