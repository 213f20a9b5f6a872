"""Ask an OpenAI-compatible chat server (llama.cpp's llama-server) for a schema-bound answer.

The reply must be JSON ``{"source": one of the retrieved doc ids or "none", "answer": str}`` (voice
track; the source comes first, so a model that declines says so in its first few tokens and the call stops there), or, with a `cited_schema`, ``{"answer": str, "citations": [labels or "none"]}`` (Korean track), or, with a
`query_schema`, ``{"query": str}`` (query rewriting, `rag.llm.rewrite`).
llama.cpp can accept a ``json_schema`` and still return unconstrained text with HTTP 200
(llama.cpp issues #19051, #24097, #10732), so every reply is validated here; any fault comes back
as ``LLMReply.error`` (a short reason code) and never as an answer.
"""
from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import requests
from urllib3.exceptions import NewConnectionError

SYSTEM_PROMPT = (
    "You answer phone callers' questions using ONLY the documents below. "
    "Reply with JSON: \"answer\" is one short sentence that answers the question from one document, "
    "\"source\" is the id of that document. If no document answers the question, use source \"none\".\n\n"
)

# Reason codes a failed call can carry (reported as counts in the final metrics).
ERRORS = ("unreachable", "busy", "connection_lost", "timeout", "http_error", "bad_stream", "truncated", "invalid_json",
          "schema_violation", "source_not_in_enum", "citation_not_in_enum")


@dataclass
class LLMReply:
    """One chat call. ``error`` is None only when ``answer``/``source`` passed client validation.
    ``finish_reason`` "declined": the streamed reply began ``{"source": "none"``, and the call was closed there
    (`DECLINED`); ``source`` is "none" and ``answer`` "" (the model said no document answers).
    ``finish_reason`` "chosen": in choose mode the reply's answer had begun one offered sentence only, and the call
    was closed there (`chosen`); ``answer`` is that sentence, ``source`` the reply's, validated as a whole reply is;
    ``raw`` holds what was streamed. A declined or chosen call gets no ``timings`` (the server sends them last).

    first_token_ms / total_ms: wall-clock milliseconds from sending the request; ``timings`` is the
    server's own timing block (llama.cpp) or None.
    """

    answer: str | None = None
    source: str | None = None
    error: str | None = None
    detail: str = ""
    finish_reason: str | None = None
    first_token_ms: float | None = None
    total_ms: float | None = None
    timings: dict | None = None
    raw: str = ""
    citations: list[str] | None = None  # set instead of ``source`` when the schema is a `cited_schema`
    items: list[str] | None = None  # set (and nothing else) when the schema is a `list_schema`
    record: dict[str, str] | None = None  # set (and nothing else) when the schema is a `record_schema`
    token_logprobs: list[tuple[str, float]] | None = None  # ``logprobs=True``: (token, natural-log probability) of
    # each generated token as the server reports it (llama.cpp: the model's own distribution, before the schema's
    # grammar); None when not asked for or the server sent none
    # with a `query_schema`, ``answer`` holds the rewritten query and ``source`` stays None


def answer_schema(doc_ids: Sequence[str], max_len: int, answer_enum: Sequence[str] | None = None) -> dict:
    """JSON schema of a reply: ``source`` is an enum of ``doc_ids`` + "none" (no duplicates);
    ``answer`` is a string of at most ``max_len`` characters, or, when ``answer_enum`` is given,
    one of those strings (the model can then only choose a sentence, never write one). ``source`` is the first
    property (llama.cpp's grammar keeps the schema's order), so the model names its document before it answers and
    a declining reply is recognised after a few tokens (`ask` stops there)."""
    sources = list(dict.fromkeys(list(doc_ids) + ["none"]))
    answer = {"type": "string", "enum": list(answer_enum)} if answer_enum else \
        {"type": "string", "minLength": 1, "maxLength": max_len}
    return {
        "type": "object",
        "properties": {"source": {"type": "string", "enum": sources}, "answer": answer},
        "required": ["source", "answer"],
        "additionalProperties": False,
    }


def cited_schema(labels: Sequence[str], max_len: int) -> dict:
    """JSON schema of a reply that cites documents by label (Korean track, ``[문서 n]``).

    ``{"answer": string of 1..max_len characters, "citations": array of 1..len(labels)+1 items, each
    one of ``labels`` + "none"}``. maxItems bounds the array (a small model otherwise repeats labels
    until max_tokens); which combinations make sense (none alone, no repeats) is checked after.
    """
    enum = list(dict.fromkeys(list(labels) + ["none"]))
    return {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "minLength": 1, "maxLength": max_len},
            "citations": {"type": "array", "items": {"type": "string", "enum": enum},
                          "minItems": 1, "maxItems": len(enum)},
        },
        "required": ["answer", "citations"],
        "additionalProperties": False,
    }


def _json_object(content: str, schema: dict) -> tuple[dict | None, str | None, str]:
    """Parse a reply that must be a JSON object with exactly the schema's properties."""
    try:
        obj = json.loads(content)
    except json.JSONDecodeError as e:
        return None, "invalid_json", e.msg
    except RecursionError:  # nesting deeper than Python's recursion limit ("[[[[..."): not an answer either
        return None, "invalid_json", "nested too deeply"
    if not isinstance(obj, dict) or set(obj) != set(schema["properties"]):
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        return None, "schema_violation", f"keys {keys}"
    return obj, None, ""


def validate_cited(content: str, schema: dict) -> tuple[str | None, list[str] | None, str | None, str]:
    """Check a reply against a `cited_schema` on the client side.

    Returns (answer, citations, error code or None, detail); a label outside the enum is
    ``citation_not_in_enum``, anything else malformed is ``invalid_json`` / ``schema_violation``.
    """
    obj, error, detail = _json_object(content, schema)
    if error:
        return None, None, error, detail
    props = schema["properties"]
    answer, citations = obj["answer"], obj["citations"]
    if not isinstance(answer, str) or not answer.strip() or len(answer) > props["answer"]["maxLength"]:
        return None, None, "schema_violation", "answer must be a non-empty string within maxLength"
    c = props["citations"]
    if not isinstance(citations, list) or not all(isinstance(x, str) for x in citations):
        return None, None, "schema_violation", "citations must be a list of strings"
    if not c["minItems"] <= len(citations) <= c.get("maxItems", len(citations)):
        return None, None, "schema_violation", f"{len(citations)} citations"
    bad = [x for x in citations if x not in c["items"]["enum"]]
    if bad:
        return None, None, "citation_not_in_enum", f"citations {bad!r}"
    return answer, citations, None, ""


def query_schema(max_len: int) -> dict:
    """JSON schema of a rewritten search query: ``{"query": string of 1..max_len characters}`` (maxLength keeps a
    small model from looping inside the string until max_tokens)."""
    return {
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1, "maxLength": max_len}},
        "required": ["query"],
        "additionalProperties": False,
    }


def validate_query(content: str, schema: dict) -> tuple[str | None, str | None, str]:
    """Check a reply against a `query_schema`: returns (query, error code or None, detail); an empty or
    over-long string is ``schema_violation``."""
    obj, error, detail = _json_object(content, schema)
    if error:
        return None, error, detail
    query = obj["query"]
    if not isinstance(query, str) or not query.strip() or len(query) > schema["properties"]["query"]["maxLength"]:
        return None, "schema_violation", "query must be a non-empty string within maxLength"
    return query, None, ""


def list_schema(key: str, min_items: int, max_items: int, max_len: int = 200,
                enum: Sequence[str] | None = None) -> dict:
    """JSON schema of a reply that is one list: ``{key: [min_items..max_items strings]}``, each string at most
    ``max_len`` characters, or one of ``enum`` (a judge's verdicts). Raises ValueError for min_items > max_items
    or min_items < 0."""
    if not 0 <= min_items <= max_items:
        raise ValueError(f"need 0 <= min_items <= max_items, got {min_items}, {max_items}")
    item = {"type": "string", "enum": list(enum)} if enum is not None else {
        "type": "string", "minLength": 1, "maxLength": max_len}
    return {"type": "object",
            "properties": {key: {"type": "array", "items": item, "minItems": min_items, "maxItems": max_items}},
            "required": [key], "additionalProperties": False}


def validate_list(content: str, schema: dict) -> tuple[list[str] | None, str | None, str]:
    """Check a reply against a `list_schema`: returns (the list, error code or None, detail); a wrong length, a
    non-string, an empty or over-long string or a value outside the enum is ``schema_violation``."""
    obj, error, detail = _json_object(content, schema)
    if error:
        return None, error, detail
    (key, spec), = schema["properties"].items()
    items, item = obj[key], spec["items"]
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        return None, "schema_violation", f"{key} must be a list of strings"
    if not spec["minItems"] <= len(items) <= spec["maxItems"]:
        return None, "schema_violation", f"{len(items)} {key}, expected {spec['minItems']}..{spec['maxItems']}"
    if "enum" in item:
        bad = [x for x in items if x not in item["enum"]]
        if bad:
            return None, "schema_violation", f"{key} {bad!r} not in {item['enum']}"
    elif not all(x.strip() and len(x) <= item["maxLength"] for x in items):
        return None, "schema_violation", f"every {key} entry must be non-empty text within maxLength"
    return items, None, ""


def record_schema(fields: Sequence[str], max_len: int) -> dict:
    """JSON schema of a reply that fills a form: ``{field: string of 0..max_len characters}`` for every one of
    ``fields`` (all required, no others; "" = not stated). Raises ValueError for no fields or a repeated one."""
    if not fields or len(set(fields)) != len(fields):
        raise ValueError(f"a record needs distinct fields, got {list(fields)}")
    return {"type": "object", "title": "record",
            "properties": {f: {"type": "string", "maxLength": max_len} for f in fields},
            "required": list(fields), "additionalProperties": False}


def validate_record(content: str, schema: dict) -> tuple[dict[str, str] | None, str | None, str]:
    """Check a reply against a `record_schema`: returns ({field: value stripped}, error code or None, detail); a
    non-string or over-long value is ``schema_violation``."""
    obj, error, detail = _json_object(content, schema)
    if error:
        return None, error, detail
    for f, spec in schema["properties"].items():
        if not isinstance(obj[f], str) or len(obj[f]) > spec["maxLength"]:
            return None, "schema_violation", f"{f} must be text within maxLength"
    return {f: obj[f].strip() for f in schema["properties"]}, None, ""


MEMORY_PROMPT = ("\n\nEarlier in this call (the caller's words and our answers; use them to understand the question, "
                 "never as a source):\n")


def build_messages(query: str, passages: Sequence[tuple[str, str]], memory: Sequence[str] = ()) -> list[dict]:
    """Chat messages: the system prompt with each passage tagged ``[doc id]``, then (when any) the earlier turns of
    the call tagged ``[memory n]``, n from 1 (`rag.memory.recall.memory_lines`), then the query. Memory is never a
    source: `answer_schema`'s enum holds the documents only. Without memory the messages are exactly those of a
    call without it."""
    docs = "\n".join(f"[{doc}] {text}" for doc, text in passages)
    if memory:
        docs += MEMORY_PROMPT + "\n".join(f"[memory {n}] {line}" for n, line in enumerate(memory, 1))
    return [{"role": "system", "content": SYSTEM_PROMPT + docs}, {"role": "user", "content": query}]


def validate(content: str, schema: dict) -> tuple[str | None, str | None, str | None, str]:
    """Check a reply against ``schema`` (as built by `answer_schema`) on the client side.

    Returns (answer, source, error code or None, detail).
    """
    obj, error, detail = _json_object(content, schema)
    if error:
        return None, None, error, detail
    props = schema["properties"]
    answer, source = obj["answer"], obj["source"]
    if not isinstance(answer, str) or not isinstance(source, str):
        return None, None, "schema_violation", "answer and source must be strings"
    a = props["answer"]
    if "enum" in a and answer not in a["enum"]:
        return None, None, "schema_violation", "answer is not one of the offered sentences"
    if len(answer) > a.get("maxLength", len(answer)) or not answer.strip():
        return None, None, "schema_violation", f"answer length {len(answer)}"
    if source not in props["source"]["enum"]:
        return None, None, "source_not_in_enum", f"source {source!r}"
    return answer, source, None, ""


# Chat-template control tokens: ChatML and its kin ("<|im_start|>", "<|im_end|>", "<|endoftext|>", Llama 3's
# "<|eot_id|>"), Llama 2's "<s>" / "[INST]", Gemma's "<start_of_turn>". llama.cpp's server parses special tokens in
# the prompt its chat template builds, so such text inside a message (a caller's words, a KB passage, a memory line)
# would close the turn it stands in and open another ("<|im_end|><|im_start|>system ..."). `ask` removes them.
CONTROL_TOKENS = re.compile(r"<\|[^<>|\s]{1,64}\|>|</?s>|\[/?INST\]|<(?:start|end)_of_turn>", re.IGNORECASE)


def without_control_tokens(text: str) -> str:
    """``text`` with every `CONTROL_TOKENS` match replaced by a space, in one linear pass: a token that the removal
    would join ("<|im_<|x|>end|>") holds that space, and no control token holds whitespace."""
    return CONTROL_TOKENS.sub(" ", text)


# The start of a streamed `answer_schema` reply whose source is "none": nothing after it can be said.
DECLINED = re.compile(r'\s*\{\s*"source"\s*:\s*"none"')
# A streamed `answer_schema` reply up to its answer string's beginning (the source complete, the answer open).
_ANSWER_BEGUN = re.compile(r'\s*\{\s*"source"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"answer"\s*:\s*("(?:[^"\\]|\\.)*"?)\Z',
                           re.DOTALL)


def chosen(partial: str, schema: dict) -> tuple[str, str] | None:
    """``(source, sentence)`` that a streamed reply to a choose-mode `answer_schema` (``answer`` an enum of offered
    sentences) is bound to become: once the beginning of its answer string fits one offered sentence only (in JSON
    with or without ``\\u`` escapes), a server that keeps to the schema can only spell out the rest, so `ask` stops
    reading there instead of waiting for every token of a sentence it already knows. None while two or more still
    fit, when none fits (the model left the schema: the call reads on and validation judges the whole reply), when
    the reply is not yet at its answer, or for a schema without an answer enum."""
    options = schema["properties"].get("answer", {}).get("enum")
    m = _ANSWER_BEGUN.match(partial) if options else None
    if not m:
        return None
    begun = m.group(2)
    fits = [o for o in options
            if json.dumps(o, ensure_ascii=False).startswith(begun) or json.dumps(o).startswith(begun)]
    if len(fits) != 1:
        return None
    try:
        return json.loads(f'"{m.group(1)}"'), fits[0]
    except ValueError:
        return None


CONNECT_S = 2.0  # longest wait for a TCP connection (loopback or LAN); longer means nobody is listening in time
BUSY_STATUSES = (429, 503)  # llama.cpp: 503 while loading / when it has no free slot; 429: a proxy's rate limit


def ask(url: str, messages: list[dict], schema: dict, *, max_tokens: int, timeout_s: float,
        temperature: float = 0.0, seed: int = 0, model: str | None = None,
        deadline: float | None = None, logprobs: bool = False) -> LLMReply:
    """POST ``/v1/chat/completions`` (streamed) with ``response_format`` json_schema; validate.

    ``schema``: an `answer_schema` (validated by `validate`, sets answer/source), a `cited_schema`
    (validated by `validate_cited`, sets answer/citations) or a `query_schema` (`validate_query`: the query in
    ``answer``) or a `list_schema` (`validate_list`: the list in ``items``) or a `record_schema` (`validate_record`: the
    fields in ``record``). ``raw`` keeps the streamed text even when validation
    fails. ``logprobs``: also ask for each generated token's log-probability (OpenAI ``logprobs``), kept in
    ``token_logprobs`` (a server that sends none, or malformed ones, leaves it None; the reply is not failed for it).
    Never raises for server faults: they come back as ``LLMReply.error`` in `ERRORS`. Chat-template
    control tokens are removed from every message's content first (`without_control_tokens`).

    The call ends by ``min(now + timeout_s, deadline)`` (``deadline``: a `time.monotonic` instant, the turn's):
    the wait for the response headers is a read timeout of that budget, and from the headers on a watchdog
    shuts the socket down at the end, so a stalled or slow stream cannot outlive it; closing the connection is
    what cancels the request (llama.cpp drops a task whose client is gone). Reasons: ``unreachable`` (no TCP
    connection: refused, or none within `CONNECT_S`; accepted then dropped is ``connection_lost``), ``busy`` (HTTP 429/503: loading or no free slot),
    ``timeout`` (connected, but the answer did not finish in time; also when no time was left to ask).
    """
    reply = LLMReply()
    start = time.perf_counter()
    now = time.monotonic()
    budget = timeout_s if deadline is None else min(timeout_s, deadline - now)
    if budget <= 0:
        reply.error, reply.detail = "timeout", "no time left in the turn's deadline"
        return _done(reply, start)
    end = now + budget
    body = {
        "messages": [{**m, "content": without_control_tokens(m["content"])} for m in messages],
        "temperature": temperature, "seed": seed, "max_tokens": max_tokens,
        "stream": True,
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": schema}},
    }
    if model:
        body["model"] = model
    if logprobs:  # llama.cpp streams a chunk's logprobs only when top_logprobs is at least 1
        body["logprobs"], body["top_logprobs"] = True, 1
    parts: list[str] = []
    token_lps: list[tuple[str, float]] = []
    events = 0  # server-sent ``data:`` lines seen
    may_decline = next(iter(schema["properties"])) == "source"
    picked: tuple[str, str] | None = None  # `chosen`: the offered sentence the reply can only become
    connect_s = min(CONNECT_S, budget)
    responded = False
    watchdog: _Watchdog | None = None
    try:
        with requests.post(url.rstrip("/") + "/v1/chat/completions", json=body, stream=True,
                           timeout=(connect_s, budget)) as r:
            responded = True
            watchdog = _Watchdog(r, end)
            if r.status_code in BUSY_STATUSES:
                reply.error, reply.detail = "busy", f"HTTP {r.status_code}: {r.text[:200]}"
                return _done(reply, start)
            if r.status_code != 200:
                reply.error, reply.detail = "http_error", f"HTTP {r.status_code}: {r.text[:200]}"
                return _done(reply, start)
            for line in r.iter_lines():
                if time.monotonic() > end:
                    break
                if not line.startswith(b"data: "):
                    continue
                data, events = line[6:], events + 1
                if data.strip() == b"[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except (ValueError, RecursionError):  # not JSON, bad UTF-8, or nested past the recursion limit
                    reply.error, reply.detail = "bad_stream", f"chunk is not JSON: {data[:100]!r}"
                    return _done(reply, start)
                choices = chunk.get("choices") if isinstance(chunk, dict) else None
                if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
                    reply.error, reply.detail = "bad_stream", f"malformed chunk {data[:100]!r}"
                    return _done(reply, start)
                if isinstance(chunk.get("timings"), dict):
                    reply.timings = chunk["timings"]
                for choice in choices:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece is not None and not isinstance(piece, str):
                        reply.error, reply.detail = "bad_stream", f"content is {type(piece).__name__}"
                        return _done(reply, start)
                    if piece:
                        if reply.first_token_ms is None:
                            reply.first_token_ms = (time.perf_counter() - start) * 1000
                        parts.append(piece)
                    reply.finish_reason = choice.get("finish_reason") or reply.finish_reason
                    if logprobs:
                        token_lps += _token_logprobs(choice.get("logprobs"))
                text = "".join(parts) if may_decline else ""
                if may_decline and len(parts) <= 16 and DECLINED.match(text):
                    reply.finish_reason = "declined"  # leaving the with-block closes the socket: llama.cpp stops
                    break
                if may_decline and (picked := chosen(text, schema)):
                    reply.finish_reason = "chosen"  # as above: the rest of the sentence is not waited for
                    break
    except requests.ConnectTimeout as e:
        reply.error = "timeout" if connect_s >= budget else "unreachable"
        reply.detail = str(e)[:200]
    except requests.Timeout as e:  # no response headers within the budget (queued behind busy slots, or slow)
        reply.error, reply.detail = "timeout", f"no response within {budget:.2f} s: {str(e)[:150]}"
    except requests.ConnectionError as e:
        # requests reports a read timeout while streaming as a ConnectionError: connected means not unreachable
        if not responded:  # refused / no route: unreachable; accepted, then dropped before answering: lost
            reason = getattr(e.args[0], "reason", None) if e.args else None
            reply.error = "unreachable" if isinstance(reason, NewConnectionError) else "connection_lost"
        elif "timed out" in str(e) or time.monotonic() >= end:
            reply.error = "timeout"
        else:
            reply.error = "connection_lost"
        reply.detail = str(e)[:200]
    except requests.RequestException as e:
        reply.error, reply.detail = "connection_lost", f"bad stream: {str(e)[:200]}"
    finally:
        if watchdog is not None:
            watchdog.cancel()
    reply.raw = "".join(parts)
    reply.token_logprobs = token_lps or None
    if (watchdog is not None and watchdog.fired) or (not reply.error and time.monotonic() > end
                                                     and reply.finish_reason is None):
        reply.error = "timeout"
        reply.detail = f"cancelled at the deadline ({budget:.2f} s budget){'; ' + reply.detail if reply.detail else ''}"
    if reply.error:
        return _done(reply, start)
    if reply.finish_reason == "declined":
        reply.answer, reply.source = "", "none"
        return _done(reply, start)
    if reply.finish_reason == "chosen":
        reply.answer, reply.source, reply.error, reply.detail = validate(
            json.dumps({"source": picked[0], "answer": picked[1]}), schema)
        return _done(reply, start)
    if reply.finish_reason == "length":
        reply.error, reply.detail = "truncated", f"finish_reason length at max_tokens={max_tokens}"
        return _done(reply, start)
    if reply.finish_reason is None and not events:
        reply.error, reply.detail = "bad_stream", "HTTP 200 without server-sent events (not a streaming chat server?)"
        return _done(reply, start)
    if reply.finish_reason is None:
        reply.error, reply.detail = "connection_lost", "stream ended without finish_reason"
        return _done(reply, start)
    if "citations" in schema["properties"]:
        reply.answer, reply.citations, reply.error, reply.detail = validate_cited(reply.raw, schema)
    elif "query" in schema["properties"]:
        reply.answer, reply.error, reply.detail = validate_query(reply.raw, schema)
    elif schema.get("title") == "record":
        reply.record, reply.error, reply.detail = validate_record(reply.raw, schema)
    elif next(iter(schema["properties"].values())).get("type") == "array":
        reply.items, reply.error, reply.detail = validate_list(reply.raw, schema)
    else:
        reply.answer, reply.source, reply.error, reply.detail = validate(reply.raw, schema)
    return _done(reply, start)


def _token_logprobs(block: object) -> list[tuple[str, float]]:
    """``[(token, logprob), ...]`` of one streamed choice's ``logprobs`` block (OpenAI's ``{"content": [{"token",
    "logprob"}, ...]}``); entries that are not that shape are left out."""
    content = block.get("content") if isinstance(block, dict) else None
    if not isinstance(content, list):
        return []
    return [(e["token"], float(e["logprob"])) for e in content
            if isinstance(e, dict) and isinstance(e.get("token"), str) and isinstance(e.get("logprob"), (int, float)) and math.isfinite(e["logprob"])]


class _Watchdog:
    """Shuts a streamed response's socket down at ``end`` (`time.monotonic`): a reader blocked in recv wakes up
    with an error or end of stream, and the server sees its client gone. ``fired``: it did."""

    def __init__(self, response: requests.Response, end: float):
        self.response, self.fired = response, False
        self.timer = threading.Timer(max(0.0, end - time.monotonic()), self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = getattr(getattr(self.response.raw, "connection", None), "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            else:
                self.response.close()
        except OSError:
            pass

    def cancel(self) -> None:
        self.timer.cancel()


def _done(reply: LLMReply, start: float) -> LLMReply:
    reply.total_ms = (time.perf_counter() - start) * 1000
    if reply.error:
        reply.answer = reply.source = reply.citations = None
    return reply


def reachable(url: str, timeout_s: float = 2.0) -> str | None:
    """None when an HTTP server answers at ``url`` (GET /v1/models, any status), else why not, in a few words
    (the exception's name: ConnectionError, ReadTimeout...)."""
    try:
        requests.get(url.rstrip("/") + "/v1/models", timeout=timeout_s)
    except requests.RequestException as e:
        return type(e).__name__
    return None
