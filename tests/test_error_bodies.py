"""Providers' error bodies survive, whole, on both request paths, however their bytes arrive (issue 23).

Each body is one a provider documents (or was seen sending), served by a raw asyncio server on
127.0.0.1 in several framings: the whole body in one write with Content-Length, one byte per write
(the server yields between writes, so the client reads them one by one), two writes split in the
middle of the message, and chunked transfer encoding. The provider's full message must be in the
ModelError, and its HTTP status on ``ModelError.status``.
"""

import asyncio
import json

import pytest

import unity_nb as u
from unity_nb.models import ModelRequest

KEY = "sk-test-123456789"
T = 10.0

OPENAI_400 = (
    400,
    {"error": {"message": "Unsupported value: 'messages[0].role' does not support 'developer' with this model.",
               "type": "invalid_request_error", "param": "messages[0].role", "code": "unsupported_value"}},
    ["Unsupported value: 'messages[0].role' does not support 'developer' with this model."],
)
OPENAI_401 = (
    401,
    {"error": {"message": "Incorrect API key provided: sk-abc***xyz. You can find your API key at "
                          "https://platform.openai.com/account/api-keys.",
               "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}},
    ["Incorrect API key provided: sk-abc***xyz. You can find your API key at "
     "https://platform.openai.com/account/api-keys."],
)
OPENAI_404 = (
    404,
    {"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.",
               "type": "invalid_request_error", "param": None, "code": "model_not_found"}},
    ["The model `gpt-9` does not exist or you do not have access to it."],
)
GROQ_TOOL_USE_FAILED = (
    400,
    {"error": {"message": "Failed to call a function. Please adjust your prompt. See 'failed_generation' for more "
                          "details.", "type": "invalid_request_error", "code": "tool_use_failed",
               "failed_generation": '<function=get_weather>{"city": "Paris", "unit": "celsius"}</function>'}},
    ["Failed to call a function. Please adjust your prompt. See 'failed_generation' for more details.",
     '<function=get_weather>{"city": "Paris", "unit": "celsius"}</function>'],
)
AZURE_CONTENT_FILTER = (
    400,
    {"error": {"message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
                          "management policy. Please modify your prompt and retry. To learn more about our content "
                          "filtering policies please read our documentation: "
                          "https://go.microsoft.com/fwlink/?linkid=2198766",
               "type": None, "param": "prompt", "code": "content_filter", "status": 400,
               "innererror": {"code": "ResponsibleAIPolicyViolation",
                              "content_filter_result": {"hate": {"filtered": True, "severity": "high"}}}}},
    ["The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please "
     "modify your prompt and retry."],
)
AZURE_401 = (
    401,
    {"statusCode": 401, "message": "Unauthorized. Access token is missing, invalid, audience is incorrect "
                                   "(https://cognitiveservices.azure.com), or have expired."},
    ["Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), "
     "or have expired."],
)
DEEPSEEK_402 = (
    402,
    {"error": {"message": "Insufficient Balance", "type": "unknown_error", "param": None,
               "code": "invalid_request_error"}},
    ["Insufficient Balance"],
)
OPENROUTER_UPSTREAM = (
    400,
    {"error": {"code": 400, "message": "Provider returned error",
               "metadata": {"provider_name": "Anthropic",
                            "raw": json.dumps({"type": "error", "error": {
                                "type": "invalid_request_error",
                                "message": "prompt is too long: 215000 tokens > 200000 maximum"}})}}},
    ["Provider returned error", "prompt is too long: 215000 tokens > 200000 maximum", "Anthropic"],
)
PERPLEXITY = (
    400,
    {"error": {"message": "Invalid model 'llama-3-sonar-small-32k-online'. Permitted models can be found in the "
                          "documentation at https://docs.perplexity.ai/guides/model-cards.",
               "type": "invalid_model", "code": 400}},
    ["Invalid model 'llama-3-sonar-small-32k-online'. Permitted models can be found in the documentation at "
     "https://docs.perplexity.ai/guides/model-cards."],
)
OLLAMA = (
    404,
    {"error": 'model "llama3.2" not found, try pulling it first'},
    ['model "llama3.2" not found, try pulling it first'],
)
MISTRAL_401 = (401, {"detail": "Invalid API Key"}, ["Invalid API Key"])
MISTRAL_422 = (
    422,
    {"object": "error", "message": {"detail": [{"type": "missing", "loc": ["body", "messages"],
                                                "msg": "Field required", "input": {"model": "mistral-small"}}]},
     "type": "invalid_request_error", "param": None, "code": None},
    ["body.messages: Field required"],
)
FASTAPI_422 = (
    422,
    {"detail": [{"loc": ["body", "temperature"], "msg": "Input should be less than or equal to 2",
                 "type": "less_than_equal"}]},
    ["body.temperature: Input should be less than or equal to 2"],
)
VLLM_400 = (
    400,
    {"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you requested "
                                   "5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the "
                                   "length of the messages or completion.",
     "type": "BadRequestError", "param": None, "code": 400},
    ["This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the "
     "messages, 1000 in the completion). Please reduce the length of the messages or completion."],
)

BODIES = {
    "openai_400": OPENAI_400, "openai_401": OPENAI_401, "openai_404": OPENAI_404, "groq": GROQ_TOOL_USE_FAILED,
    "azure_filter": AZURE_CONTENT_FILTER, "azure_401": AZURE_401, "deepseek": DEEPSEEK_402,
    "openrouter": OPENROUTER_UPSTREAM, "perplexity": PERPLEXITY, "ollama": OLLAMA, "mistral_401": MISTRAL_401,
    "mistral_422": MISTRAL_422, "fastapi_422": FASTAPI_422, "vllm": VLLM_400,
}
FRAMINGS = ("whole", "one_byte", "split", "chunked")
_REASONS = {400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 404: "Not Found",
            422: "Unprocessable Entity"}


class ErrorServer:
    """Answers every request with ``status`` and ``body`` in ``framing``, on raw asyncio sockets."""

    def __init__(self) -> None:
        self.status = 400
        self.body = b""
        self.framing = "whole"
        self.requests = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    def _writes(self) -> list[bytes]:
        body = self.body
        if self.framing == "one_byte":
            return [body[i : i + 1] for i in range(len(body))]
        if self.framing in ("split", "chunked"):
            middle = body.find(b'"message"')
            middle = (middle + len(body)) // 2 if middle >= 0 else len(body) // 2  # inside the message's words
            return [body[:middle], body[middle:]]
        return [body]

    async def _serve(self, reader, writer):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            self.requests += 1
            headers = [f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Error')}",
                       "Content-Type: application/json", "Connection: close"]
            chunked = self.framing == "chunked"
            headers.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(self.body)}")
            writer.write(("\r\n".join(headers) + "\r\n\r\n").encode())
            await writer.drain()
            for piece in self._writes():
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                await writer.drain()
                await asyncio.sleep(0)  # a yield, not a wait: the client reads this piece on its own
            if chunked:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def error_server():
    async with ErrorServer() as srv:
        yield srv


async def _fail(srv: ErrorServer, fast_path: bool) -> u.ModelError:
    async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, max_retries=0) as m:
        with pytest.raises(u.ModelError) as err:
            await asyncio.wait_for(m.complete(ModelRequest(messages=[{"role": "user", "content": "hi"}])), T)
    return err.value


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
@pytest.mark.parametrize("framing", FRAMINGS)
@pytest.mark.parametrize("provider", list(BODIES))
async def test_the_providers_whole_message_is_in_the_model_error(error_server, provider, framing, fast_path):
    status, body, words = BODIES[provider]
    error_server.status, error_server.body, error_server.framing = status, json.dumps(body).encode(), framing
    err = await _fail(error_server, fast_path)
    for w in words:
        assert w in str(err), (w, str(err))
    assert err.status == status
    assert f"HTTP {status}" in str(err)
    assert str(err).count(f"Error code: {status}") == 1  # not "Error code: 401 - Error code: 401"


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
async def test_an_error_body_past_64_kib_keeps_its_start_and_says_it_was_cut(error_server, fast_path):
    message = "The request is too large for this deployment."
    body = {"error": {"message": message, "type": "invalid_request_error", "padding": "x" * 200_000}}
    error_server.status, error_server.body, error_server.framing = 400, json.dumps(body).encode(), "chunked"
    err = await _fail(error_server, fast_path)
    assert message in str(err) and "cut" in str(err) and "64 KiB" in str(err)
    assert len(str(err)) < 5000
    assert err.status == 400


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
async def test_a_non_json_error_body_is_shown_as_text(error_server, fast_path):
    error_server.status, error_server.framing = 404, "one_byte"
    error_server.body = b"<html><body><h1>404 Not Found</h1><p>nginx: no route to /v1/chat/completions</p></body>"
    err = await _fail(error_server, fast_path)
    assert "nginx: no route to /v1/chat/completions" in str(err)
    assert err.status == 404


async def test_a_model_error_without_an_http_status_has_status_none():
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with u.OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0) as m:
        with pytest.raises(u.ModelError) as err:
            await asyncio.wait_for(m.complete(ModelRequest(messages=[{"role": "user", "content": "hi"}])), T)
    assert err.value.status is None
