"""A minimal coding-agent loop on the OpenAI client, scheduled by TAO.

TAO_COORDINATOR=http://127.0.0.1:8700 TAO_TOKEN=… python examples/openai_agent.py

The coordinator's URL and API token; README.md beside this file says where they come from, and how a fake node
is scripted so that the loop runs its tool branch.
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
