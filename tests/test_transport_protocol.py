"""One ``Transport`` protocol for both request paths (issue 25): ``open(path, body)`` takes a
:class:`RequestBody` whichever path serves the model, so a transport can be one plain function."""

import json

import openai

import unity_nb as u
from unity_nb.models._transport import RequestBody, Response


class FunctionTransport:
    """A transport made of a function ``handler(path, body_dict) -> reply dict`` (httpx's MockTransport, in small)."""

    def __init__(self, handler):
        self.handler = handler
        self.bodies: list[RequestBody] = []

    async def open(self, path: str, body: RequestBody) -> Response:
        self.bodies.append(body)
        data = json.dumps(self.handler(path, body.data)).encode()

        async def chunks():
            yield data

        async def close():
            pass

        return Response("application/json", chunks(), close, {})

    async def close(self) -> None:
        pass

    def close_now(self) -> None:
        pass


def _reply(path, body):
    said = body["messages"][-1]["content"]
    return {
        "id": "x", "object": "chat.completion", "model": body["model"],
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": f"{path}: {said}"}}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }


async def test_both_paths_hand_their_transport_the_same_kind_of_body():
    fast = u.OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    client = u.OpenAIModel("m", client=openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k"))
    for model in (fast, client):
        transport = FunctionTransport(_reply)
        model._transport = transport  # the seam: any object with the protocol's three methods
        reply = await model.complete(u.ModelRequest(messages=[{"role": "user", "content": "hi"}]))
        assert reply.content == "/chat/completions: hi"
        (body,) = transport.bodies
        assert json.loads(body.encoded()) == body.data and body.data["messages"][-1]["content"] == "hi"
        await model.close()
