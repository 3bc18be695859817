"""Several agents at once in one process, with the async clients: each is its own TAO session.

TAO_COORDINATOR=http://127.0.0.1:8700 TAO_TOKEN=… python examples/async_agents.py

The coordinator's URL and API token; README.md beside this file says where they come from.
"""

import asyncio

import tao_sdk

MODEL = "Qwen/Qwen3-32B"


async def agent(name: str, task: str) -> str:
    async with tao_sdk.session(context=tao_sdk.AgentContext(harness="example-async", workflow_id=name)) as session:
        client = session.async_openai()
        messages = [{"role": "user", "content": task}]
        for step in range(3):
            reply = await client.chat.completions.create(model=MODEL, messages=messages, max_tokens=256)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            async with session.tool("think", sleep=1.0):  # stand-in for a real tool taking about a second
                await asyncio.sleep(1.0)
            messages.append({"role": "user", "content": f"Step {step + 1} done. Continue."})
        return f"{name}: {len(messages)} messages"


async def main() -> None:
    tasks = [agent(f"agent-{k}", f"Plan a refactoring of module {k}.") for k in range(4)]
    for line in await asyncio.gather(*tasks):
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
