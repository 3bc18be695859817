"""A minimal coding-agent loop on the Anthropic client, scheduled by TAO.

TAO_COORDINATOR=http://127.0.0.1:8700 TAO_TOKEN=… python examples/anthropic_agent.py

The coordinator's URL and API token; README.md beside this file says where they come from, and how a fake node
is scripted so that the loop runs its tool branch.
"""

import subprocess

import tao_sdk

MODEL = "Qwen/Qwen3-32B"
BASH = {
    "name": "bash",
    "description": "Run a shell command and return its output.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}


def main() -> None:
    with tao_sdk.session(context=tao_sdk.AgentContext(harness="example-anthropic")) as session:
        client = session.anthropic()
        messages = [{"role": "user", "content": "Which Python version is installed? Use bash."}]
        for _ in range(10):
            reply = client.messages.create(model=MODEL, max_tokens=512, tools=[BASH], messages=messages)
            messages.append({"role": "assistant", "content": reply.content})
            calls = [block for block in reply.content if block.type == "tool_use"]
            if not calls:
                print("".join(block.text for block in reply.content if block.type == "text"))
                return
            results = []
            for call in calls:
                command = call.input["command"]
                with session.tool("bash", command=command, timeout=60):
                    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
                results.append({"type": "tool_result", "tool_use_id": call.id, "content": done.stdout + done.stderr})
            messages.append({"role": "user", "content": results})


if __name__ == "__main__":
    main()
