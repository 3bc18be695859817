r"""A minimal coding-agent loop on the OpenAI client, scheduled by TAO.

tao coordinator --config fleet.toml &     # beside your vLLM node(s)
TAO_COORDINATOR=http://127.0.0.1:8700 TAO_TOKEN=… python examples/openai_agent.py

TAO_COORDINATOR is the coordinator's URL and TAO_TOKEN its API token (`[server] token` of its fleet.toml,
docs/coordinator.md); `tao_sdk.session()` reads both. A coordinator started with --insecure-no-auth needs no token.

On a fake node (`tao fake-vllm`, docs/quickstart.md) the model answers filler text, so the loop stops without
running a tool unless the node is scripted to answer with a bash call first (docs/fake-vllm.md, "Scripted
behaviour"):

curl -X PUT http://127.0.0.1:8000/fake/policy \
  -d '{"filler_tokens": 16, "scripts": [{"steps": [{"bash": "ls *.py | wc -l"}, {"text": "Done: the command ran."}]}]}'
"""

import json
import subprocess

import tao_sdk

MODEL = "Qwen/Qwen3-32B"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command and return its output.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]


def main() -> None:
    context = tao_sdk.AgentContext(harness="example-openai")
    with tao_sdk.session(context=context) as session:
        client = session.openai()
        messages = [{"role": "user", "content": "How many Python files are in this directory? Use bash."}]
        for _ in range(10):
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=512)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                print(message.content)
                return
            for call in message.tool_calls:
                command = json.loads(call.function.arguments)["command"]
                with session.tool("bash", command=command, timeout=60):
                    result = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result.stdout + result.stderr})


if __name__ == "__main__":
    main()
