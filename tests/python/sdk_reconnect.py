"""The official Python MCP SDK over Streamable HTTP, through a proxy that drops the
connection of a terminal_wait right after its stream's first event (the priming event,
whose id the SDK keeps). The wait is answered while no connection carries its stream;
the SDK reconnects (GET with Last-Event-ID, after the retry the server set) and must get
the answer.

Usage: sdk_reconnect.py MCP_TERMINAL_BINARY
"""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

LISTENING = "mcp-terminal: listening on "


class DroppingProxy:
    """Relays TCP to the server, and closes the first connection that carried a
    terminal_wait once the server's first event for it came through."""

    def __init__(self, host, port):
        self.upstream = (host, port)
        self.dropped = asyncio.Event()

    async def start(self):
        self.server = await asyncio.start_server(self.connection, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def connection(self, client_reader, client_writer):
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        armed = False

        async def up():
            nonlocal armed
            while data := await client_reader.read(65536):
                if b'"terminal_wait"' in data and not self.dropped.is_set():
                    armed = True
                upstream_writer.write(data)
                await upstream_writer.drain()

        async def down():
            while data := await upstream_reader.read(65536):
                client_writer.write(data)
                await client_writer.drain()
                if armed and b"id: " in data:
                    print("ok: the proxy dropped the terminal_wait stream after its first event")
                    self.dropped.set()
                    break

        tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass  # the client is done: the event loop ends
        finally:
            for task in tasks:
                task.cancel()
            client_writer.close()
            upstream_writer.close()


async def main(binary):
    with tempfile.TemporaryDirectory() as root:
        token_file = os.path.join(root, "token")
        process = subprocess.Popen(
            [binary, "http", "--listen", "127.0.0.1:0", "--token-file", token_file],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        url = None
        proxy = None
        for line in process.stderr:
            if line.startswith(LISTENING):
                url = line[len(LISTENING):].strip()
                break
        threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()
        try:
            if url is None:
                raise AssertionError("mcp-terminal http printed no URL")
            host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
            proxy = DroppingProxy(host, int(port))
            proxy_port = await proxy.start()
            with open(token_file) as f:
                token = f.read().strip()
            client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
            transport = streamable_http_client(f"http://127.0.0.1:{proxy_port}/mcp", http_client=client)
            async with transport as (read, write, *_):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    started = await session.call_tool("terminal_start", {"command_id": "interactive"})
                    sid = started.structured_content["session_id"]
                    wait = asyncio.ensure_future(session.call_tool(
                        "terminal_wait",
                        {"session_id": sid, "pattern": "echo: go", "timeout_ms": 30000},
                    ))
                    await asyncio.wait_for(proxy.dropped.wait(), 30)
                    written = await session.call_tool("terminal_write", {"session_id": sid, "text": "go\n"})
                    assert written.structured_content["ok"] is True, written
                    began = time.monotonic()
                    result = await asyncio.wait_for(wait, 30)
                    outcome = result.structured_content.get("outcome")
                    assert outcome == "matched", json.dumps(result.structured_content)
                    print(f"ok: the answer came after the reconnect, {time.monotonic() - began:.1f} s later")
        finally:
            process.terminate()
            process.wait(30)
            if proxy is not None:
                proxy.server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
