"""A provider's Batch API (the OpenAI shape), at an :class:`OpenAIModel`'s base URL, on both of its request paths.

A batch is a JSONL file of ``/v1/chat/completions`` requests, one ``custom_id`` per line, uploaded to
``POST /v1/files`` (purpose ``batch``) and run by ``POST /v1/batches`` (``completion_window`` ``24h``); it is
polled with ``GET /v1/batches/{id}``, cancelled with ``POST /v1/batches/{id}/cancel``, and its results are the
output and error files (``GET /v1/files/{id}/content``), in any order: a line is matched by its ``custom_id``.

The request path is the model's: aiohttp with the client's base URL and auth headers (each request's own, as
``_transport`` does), or, for a client handed in (``OpenAIModel(client=AsyncOpenAI(...))``, ``fast_path=False``),
the client's own ``files`` and ``batches`` methods. A 404 on ``/v1/files`` or ``/v1/batches`` is
:class:`NoBatchAPI`: the provider has no Batch API (never a silent fallback to live calls). Failures worth
retrying (429, 5xx, 408, 409, no response) are retried ``model.max_retries`` times with backoff.

A create is never sent again blind: its ``metadata`` carries a tag of its own (:data:`CREATE_TAG`), and before a
retry after a failure the provider may have acted on (no response, 5xx, 408, 409) the provider's list of batches
(``GET /v1/batches``, newest first) is read for the batch carrying it, which is taken instead (a second create
would start a second batch, billed too). A list that cannot be read, or is read :data:`LIST_PAGES` pages deep without
reaching batches older than the first try, leaves the create not sent again, saying so with its tag.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from typing import Any

from .._errors import ModelError
from .._json import loads
from ._assemble import Assembler, MalformedChunk, ProviderError, ReplyTooLong, error_words
from ._base import ModelRequest, Reply, Usage
from ._prices import Price, price_of
from ._transport import HTTPStatusError, TransportError, env_proxy, error_body_text, follow_redirects

__all__ = ("ENDPOINT", "BatchAPI", "FileTooLarge", "NoBatchAPI", "RowResult", "batch_api_of", "batch_price")

ENDPOINT = "/v1/chat/completions"
WINDOW = "24h"
_RETRY_STATUS = frozenset({408, 409, 429})
_JSON_MOST = 16 * 1024 * 1024
"""The longest JSON answer (a File or Batch object) read: 16 MiB."""
CREATE_TAG = "unity_nb_create"
"""The ``metadata`` key of a create's own tag, by which a create whose answer was lost finds the batch it made."""
LIST_PAGES = 10
"""Pages of 100 batches read, at most, looking for a create's batch."""
_CLOCK_SLACK = 600
"""Seconds a provider's clock may be behind ours: batches created this long before a create's first try are looked
through too."""


class _NotListed(Exception):
    """The provider's list of batches could not tell whether a create made one (unreadable, or too long)."""


class NoBatchAPI(ModelError):
    """The provider answered 404 where the Batch API lives: it has none (run the batch live instead)."""


class FileTooLarge(ModelError):
    """An output or error file passed what a batch of its rows can hold: a line longer than one reply can be, or
    more lines than the batch had rows (a hostile or broken server: a gzip bomb, an endless file). Reading it again
    reads the same: its rows fail, saying so."""


class _Lines:
    """A file's lines as its chunks come (LF or CRLF ends one), each at most ``max_line`` bytes, at most
    ``max_lines`` of them (blank ones too): :class:`FileTooLarge` as soon as either is passed, so a hostile body
    holds at most about one line here."""

    __slots__ = ("_count", "_held", "_pending", "max_line", "max_lines", "what")

    def __init__(self, what: str, max_line: int, max_lines: int) -> None:
        self.what, self.max_line, self.max_lines = what, max_line, max_lines
        self._pending: list[bytes] = []
        self._held = self._count = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            self._hold(chunk)
            return []
        if self._pending:
            lines[0] = b"".join([*self._pending, lines[0]])
            self._pending, self._held = [], 0
        last = lines.pop()
        self._count += len(lines)
        if self._count > self.max_lines:
            raise FileTooLarge(f"{self.what} has more than {self.max_lines} lines, the most its batch's rows can "
                               "give: it is not read (a broken or hostile server)")
        if max(map(len, lines)) > self.max_line:
            self._too_long()
        self._hold(last)
        return lines

    def _hold(self, piece: bytes) -> None:
        if piece:
            self._pending.append(piece)
            self._held += len(piece)
            if self._held > self.max_line:
                self._too_long()

    def _too_long(self) -> None:
        raise FileTooLarge(f"{self.what} has a line longer than {self.max_line:,} bytes, more than a reply of "
                           "max_reply_chars can take: it is not read (a broken or hostile server; to accept longer "
                           "replies, raise OpenAIModel(..., max_reply_chars=...))")


class RowResult:
    """One line of a batch's output or error file: its ``custom_id`` and either a ``reply`` or an ``error``."""

    __slots__ = ("custom_id", "error", "expired", "reply")

    def __init__(self, custom_id: str, reply: Reply | None, error: str | None, expired: bool = False) -> None:
        self.custom_id = custom_id
        self.reply = reply
        self.error = error
        self.expired = expired


def batch_price(model: Any) -> tuple[Price | None, str]:
    """What ``model``'s tokens cost through a Batch API, and how that was found: its batch rate where its price
    carries one (``batch_input``, ``batch_output``), else half its live price (the usual discount); ``None``
    when its price is unknown."""
    price = price_of(model)
    if price is None:
        return None, "no price is known"
    b_in, b_out = getattr(price, "batch_input", None), getattr(price, "batch_output", None)
    if b_in is not None and b_out is not None:
        return Price(float(b_in), float(b_out)), "its batch rate"
    return Price(price.input / 2, price.output / 2), "half its live price (no batch rate is known for it)"


def batch_api_of(model: Any) -> BatchAPI | None:
    """The Batch API of ``model`` (an :class:`OpenAIModel`), or ``None`` for a model that is not one."""
    make = getattr(model, "batch_api", None)
    return make() if callable(make) else None


class BatchAPI:
    """The Batch API at ``model``'s base URL (see the module's docstring)."""

    def __init__(self, model: Any, *, client_path: bool) -> None:
        self.model = model
        self.client = model.client
        self.client_path = client_path
        """True: through the client's ``files`` and ``batches``; False: aiohttp."""
        self.base_url = str(self.client.base_url).rstrip("/")

    def __repr__(self) -> str:
        return f"<batch API at {self.base_url} ({'client' if self.client_path else 'aiohttp'})>"

    # -- what is sent ---------------------------------------------------------------------------

    def body(self, request: ModelRequest) -> dict:
        """The request a live call would send, not streamed (a batch's results are whole replies)."""
        body = dict(self.model._body(request))
        body.pop("stream", None)
        body.pop("stream_options", None)
        return body

    def line(self, custom_id: str, request: ModelRequest) -> bytes:
        """One line of a batch's input file."""
        row = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": self.body(request)}
        return json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

    # -- the endpoints ----------------------------------------------------------------------------

    async def upload(self, data: bytes, filename: str = "unity_nb_batch.jsonl") -> str:
        """Upload a batch's input file; its id."""
        if self.client_path:
            found = await self._call("/files", lambda: self.client.files.create(
                file=(filename, data, "application/jsonl"), purpose="batch"))
            return str(found.id)
        import aiohttp

        def form() -> Any:
            f = aiohttp.FormData()
            f.add_field("purpose", "batch")
            f.add_field("file", data, filename=filename, content_type="application/jsonl")
            return f

        found = await self._http("POST", "/files", form=form)
        return str(found["id"])

    async def create(self, file_id: str, metadata: dict[str, str] | None = None) -> dict:
        """Run the file ``file_id`` as a batch; the Batch object."""
        tag = uuid.uuid4().hex
        args: dict[str, Any] = {"input_file_id": file_id, "endpoint": ENDPOINT, "completion_window": WINDOW,
                                "metadata": {**(metadata or {}), CREATE_TAG: tag}}
        since = time.time() - _CLOCK_SLACK

        async def made() -> dict | None:  # before a retry: the batch an earlier try made, if it did
            try:
                return await self._tagged(tag, since)
            except _NotListed as err:
                raise ModelError(self.model._scrub(
                    f"a create of a batch (of the file {file_id}) at the Batch API at {self.base_url} failed where "
                    f"it may have made one (no answer, or a server error), and whether it did cannot be told: {err}. "
                    "The create is not sent again (that could start a second batch, billed too): a batch it made "
                    f"carries metadata {CREATE_TAG}={tag}")) from None

        if self.client_path:
            return _plain(await self._call("/batches", lambda: self.client.batches.create(**args), made))
        return self._batch(await self._http("POST", "/batches", json_body=args, made=made), "/batches")

    async def _tagged(self, tag: str, since: float) -> dict | None:
        """The batch whose ``metadata`` carries ``tag`` in the provider's list, newest first, read until batches
        created before ``since``; ``None`` if there is none; :class:`_NotListed` if the list cannot tell."""
        after: str | None = None
        for _page in range(LIST_PAGES):
            try:
                if self.client_path:
                    page = await self._call("/batches (list)", lambda cursor=after: self.client.batches.list(
                        limit=100, **({"after": cursor} if cursor else {})))
                    found = {"data": [_plain(b) for b in page.data], "has_more": page.has_more}
                else:
                    found = await self._http("GET", "/batches?limit=100" + (f"&after={after}" if after else ""))
            except ModelError as err:
                raise _NotListed(f"its list of batches could not be read ({err})") from None
            data = found.get("data") if isinstance(found, dict) else None
            if not isinstance(data, list):
                raise _NotListed(f"its list of batches is not a list: {json.dumps(found)[:200]}")
            batches = [b for b in data if isinstance(b, dict) and isinstance(b.get("id"), str)]
            for b in batches:
                meta = b.get("metadata")
                if isinstance(meta, dict) and meta.get(CREATE_TAG) == tag:
                    return b
            created = [b.get("created_at") for b in batches]
            if not found.get("has_more") or not batches or any(
                    isinstance(c, int | float) and c < since for c in created):
                return None
            after = batches[-1]["id"]
        raise _NotListed(f"{LIST_PAGES} pages of its list of batches were read without reaching those made before "
                         "the create")

    async def get(self, batch_id: str) -> dict:
        if self.client_path:
            return _plain(await self._call(f"/batches/{batch_id}", lambda: self.client.batches.retrieve(batch_id)))
        return self._batch(await self._http("GET", f"/batches/{batch_id}"), f"/batches/{batch_id}")

    async def cancel(self, batch_id: str) -> dict:
        if self.client_path:
            return _plain(await self._call(f"/batches/{batch_id}/cancel", lambda: self.client.batches.cancel(batch_id)))
        return self._batch(await self._http("POST", f"/batches/{batch_id}/cancel"), f"/batches/{batch_id}/cancel")

    def _batch(self, found: Any, path: str) -> dict:
        """A Batch object as answered (a JSON object with its ``id``), else a ModelError saying what came."""
        if isinstance(found, dict) and isinstance(found.get("id"), str):
            return found
        raise ModelError(f"the Batch API at {self.base_url} answered {path} with JSON that is not a Batch object: "
                         f"{json.dumps(found)[:200]} (a broken server)")

    async def file_results(self, file_id: str, rows: int) -> list[RowResult]:
        """The lines of an output or error file of a batch of ``rows`` rows, each a reply or an error, by
        ``custom_id``, read as the file comes: a line is at most what a reply of ``max_reply_chars`` takes (each
        character escaped, and the rest of the line), and there are at most two lines a row (the provider may
        answer one twice) and 16 more; :class:`FileTooLarge` past either, whatever the server sends."""
        what, max_line, max_lines = f"the file {file_id}", 6 * self.model.max_reply_chars + 65536, 2 * rows + 16
        read: list[RowResult] = []

        def attempt() -> Any:  # each attempt reads the file from its start
            reader = _Lines(what, max_line, max_lines)
            read.clear()
            state = [reader]

            def feed(piece: bytes) -> None:
                take(state[0].feed(piece))

            return feed

        def take(lines: list[bytes]) -> None:
            for raw in lines:
                if not raw.strip():
                    continue
                try:
                    line = loads(raw)
                    custom_id = str(line["custom_id"])
                except (ValueError, KeyError, TypeError):
                    continue  # not a line of ours: no row can be matched to it
                read.append(self.result(custom_id, line))

        path = f"/files/{file_id}/content"
        if self.client_path:
            async def chunks() -> Any:
                feed = attempt()
                async with self.client.files.with_streaming_response.content(file_id) as resp:
                    async for piece in resp.iter_bytes():
                        feed(piece)
                return feed

            feed = await self._call(path, chunks)
        else:
            feed = await self._http("GET", path, each=attempt)
        feed(b"\n")  # a last line the file ended without a line end
        return read

    # -- reading results ---------------------------------------------------------------------------

    def result(self, custom_id: str, line: dict) -> RowResult:
        error, response = line.get("error"), line.get("response")
        if isinstance(error, dict) and error:
            code = error.get("code")
            words = error.get("message") or json.dumps(error)[:500]
            return RowResult(custom_id, None, f"{words}" + (f" ({code})" if code else ""), code == "batch_expired")
        if not isinstance(response, dict):
            return RowResult(custom_id, None, f"the provider gave no response for it: {json.dumps(line)[:300]}")
        status, body = response.get("status_code"), response.get("body")
        if status != 200:
            words = error_words(body) if body is not None else None
            return RowResult(custom_id, None, f"HTTP {status}: {words or json.dumps(body)[:500]}")
        asm = Assembler(self.model.name, max_chars=self.model.max_reply_chars)
        try:
            asm.add(body)
        except ProviderError as err:
            return RowResult(custom_id, None, str(err))
        except ReplyTooLong as err:  # this row's alone: every other row of the file is still read
            return RowResult(custom_id, None, (
                f"the reply is longer than max_reply_chars={self.model.max_reply_chars} ({err}); to accept longer "
                "replies, raise the limit: OpenAIModel(..., max_reply_chars=...)"))
        except MalformedChunk as err:
            return RowResult(custom_id, None, f"the response is not a Chat Completions reply: {err}")
        if not asm.said_anything():
            return RowResult(custom_id, None, f"the response holds no reply: {json.dumps(body)[:300]}")
        reply = asm.reply()
        if asm.usage is None:
            said = len(reply.content or "") + sum(len(c.arguments) for c in reply.tool_calls)
            reply.usage = Usage(0, -(-said // 4), estimated=True)
        return RowResult(custom_id, reply, None)

    # -- the two request paths ------------------------------------------------------------------------

    def _no_api(self, path: str, err: Any) -> NoBatchAPI:
        return NoBatchAPI(
            f"the provider at {self.base_url} has no Batch API (HTTP 404 on {path}: {err}); via='batch' needs a "
            "provider that implements the OpenAI Batch API (/v1/files and /v1/batches). Run it live instead "
            "(leave out via='batch' / --via batch).", status=404, fails_every_call=True)

    async def _retrying(self, path: str, attempt_once: Any, made: Any = None) -> Any:
        """``attempt_once()`` retried; ``made``: for a request that makes something, what an earlier try made (or
        ``None``), asked before each retry after a failure the provider may have acted on, and at the last."""
        attempt = 0
        while True:
            try:
                return await attempt_once()
            except (HTTPStatusError, TransportError) as err:
                status = getattr(err, "status_code", None)
                if status == 404 and path in ("/files", "/batches"):
                    raise self._no_api(path, err) from None
                retryable = status is None or status in _RETRY_STATUS or status >= 500
                if made is not None and retryable and status != 429:  # it may have been made: never made twice
                    earlier = await made()
                    if earlier is not None:
                        return earlier
                if not retryable or attempt >= self.model.max_retries:
                    what = f"HTTP {status}" if status else "no response"
                    raise ModelError(self.model._scrub(
                        f"the Batch API at {self.base_url} failed ({what}) on {path} after {attempt + 1} "
                        f"attempt(s): {err}"), status=status) from None
                delay = min(self.model.max_backoff, self.model.backoff * 2**attempt) * random.uniform(0.5, 1.0)
                attempt += 1
                await asyncio.sleep(delay)

    async def _call(self, path: str, make: Any, made: Any = None) -> Any:
        """A call through the client's own methods (its errors as ours)."""
        import openai

        async def once() -> Any:
            try:
                return await make()
            except openai.APIStatusError as err:
                try:
                    data: bytes | str = err.response.content
                except Exception:  # noqa: BLE001 - a body not read: the client's summary
                    data = getattr(err, "message", None) or str(err)
                raise HTTPStatusError(err.status_code, err.response.headers, data[:65536], self.base_url) from None
            except (openai.APIConnectionError, openai.APITimeoutError) as err:
                raise TransportError(f"no response from {self.base_url}: {err.__cause__ or err}") from None

        return await self._retrying(path, once, made)

    async def _http(self, method: str, path: str, *, json_body: Any = None, form: Any = None,
                    each: Any = None, made: Any = None) -> Any:
        """A request's JSON answer (at most :data:`_JSON_MOST` bytes); with ``each``, its body handed piece by piece
        as it comes to what ``each()`` gives, made anew for each attempt, and that returned."""
        import aiohttp

        headers = {k: v for k, v in self.client.default_headers.items()
                   if isinstance(v, str) and k.lower() not in ("content-type", "accept")}
        headers.update(self.client.auth_headers)
        url = self.base_url + path
        proxy = env_proxy(url)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.model.timeout)

        def payload() -> dict:
            return {"json": json_body, "data": form() if form is not None else None}

        async def once() -> Any:
            try:  # a session a request: a batch makes few requests, and none is left open between polls
                async with aiohttp.ClientSession(timeout=timeout) as session:
                    resp = await session.request(method, url, headers=headers, proxy=proxy, allow_redirects=False,
                                                 **payload())
                    try:  # redirects are followed within the base URL's origin only (as the chat requests' are)
                        resp, refused = await follow_redirects(session, resp, method, headers=headers, proxy=proxy,
                                                               payload=payload)
                        if resp.status >= 300:
                            raise HTTPStatusError(resp.status, resp.headers, await _head(resp, 65536), str(resp.url),
                                                  refused=refused)
                        if each is not None:
                            feed = each()
                            async for piece in resp.content.iter_any():
                                feed(piece)
                            return feed
                        data = await _head(resp, _JSON_MOST + 1)  # one byte more: a longer body is said
                    finally:
                        resp.release()
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                raise TransportError(f"no response from {url}: {type(err).__name__}: {err}") from None
            if len(data) > _JSON_MOST:
                raise ModelError(f"the Batch API at {url} answered with a body longer than {_JSON_MOST:,} bytes, "
                                 "more than a file or batch object takes: it is not read (a broken or hostile server)")
            try:
                return loads(data)
            except ValueError:
                raise ModelError(f"the Batch API at {url} answered with a body that is not JSON: "
                                 f"{error_body_text(data)[:200]}") from None

        return await self._retrying(path, once, made)


async def _head(resp: Any, most: int) -> bytes:
    """The first ``most`` bytes of a response's body, at most (an error's: the rest is not read)."""
    pieces, size = [], 0
    async for piece in resp.content.iter_any():
        pieces.append(piece)
        size += len(piece)
        if size >= most:
            break
    return b"".join(pieces)[:most]


def _plain(obj: Any) -> dict:
    """An openai object as the JSON it was read from."""
    dump = getattr(obj, "model_dump", None)
    return dump(mode="json") if callable(dump) else dict(obj)
