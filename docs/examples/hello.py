import os, trio
from collie.crew.sdk import open_collie

async def main():
    socket = os.environ.get("COLLIE_DURABLE_SOCKET") or f"{os.environ['XDG_RUNTIME_DIR']}/hello/app.sock"
    async with open_collie(socket=socket, host_name="hello", caps={"asks": True}) as collie:
        pane = collie.workspace("hello", title="Hello").tab("main", title="Questions").pane("deploy", title="Deploy", harness="hello")
        collie.ready()
        print(f"listening {collie.address}", flush=True)
        options = [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]
        answer = await pane.ask(kind="choice", tool_call_id="deploy-1", item_id="deploy-1", title="Deploy to staging?", options=options)
        print(f"answer: {answer.option_ids[0]}")

trio.run(main)
