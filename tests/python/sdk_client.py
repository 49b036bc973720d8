"""Drive mcp-terminal with the official Python MCP SDK, through both of its connection paths,
over stdio and over Streamable HTTP (`mcp-terminal http` with its bearer token).

Usage: python3 sdk_client.py PATH_TO_MCP_TERMINAL [stdio|http]

1. `ClientSession.initialize()`: the classic `initialize` handshake.
2. `mcp.Client` (mode "auto"): probes `server/discover` first (protocol 2026-07-28), falling
   back to `initialize`.
Each path lists the tools, starts the `stream` demo profile, reads its output to completion,
waits on it, lists sessions, renders the `pty-tui` screen, and checks the structured results
(which the SDK validates against each tool's output schema). Prints one line per check; exits non-zero on failure.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

import httpx2
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

REFERENCE_TOOLS = {
    "terminal_start",
    "terminal_read",
    "terminal_write",
    "terminal_status",
    "terminal_terminate",
}
EXPECTED_STDOUT = "".join(f"stdout line {i}\n" for i in range(1, 6))


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"ok: {what}")


def structured(result):
    content = result.structured_content
    check(content is not None, "a tool result carries structuredContent")
    check(json.loads(result.content[0].text) == content, "the text content is the same JSON")
    return content


async def exercise(call_tool, list_tools, label):
    tools = await list_tools()
    names = {t.name for t in tools.tools}
    check(REFERENCE_TOOLS <= names, f"{label}: the five reference tools are listed")
    for tool in tools.tools:
        check(tool.input_schema.get("additionalProperties") is False, f"{label}: {tool.name} input schema is strict")
        check(tool.output_schema is not None, f"{label}: {tool.name} has an output schema")

    started = structured(await call_tool("terminal_start", {"command_id": "stream"}))
    check(started["ok"] is True and started["status"] in ("RUNNING", "EXITED"), f"{label}: stream started")
    sid, cursor, stdout = started["session_id"], 0, ""
    for _ in range(200):
        page = structured(
            await call_tool("terminal_read", {"session_id": sid, "cursor": cursor, "max_bytes": 16, "wait_ms": 500})
        )
        stdout += "".join(r["text"] for r in page["records"] if r["stream"] == "stdout")
        cursor = page["next_cursor"]
        if page["output_complete"] and not page["has_more"]:
            break
    check(stdout == EXPECTED_STDOUT, f"{label}: stdout read to completion by cursor")
    status = structured(await call_tool("terminal_status", {"session_id": sid}))
    check(status["status"] == "EXITED" and status["exit_code"] == 0, f"{label}: exit code 0")

    waited = structured(
        await call_tool("terminal_wait", {"session_id": sid, "pattern": r"stderr line (\d)", "stream": "stderr"})
    )
    check(waited["outcome"] == "matched" and waited["match"]["groups"] == ["1"], f"{label}: terminal_wait matched")
    listed = structured(await call_tool("terminal_list", {}))
    check(any(s["session_id"] == sid for s in listed["sessions"]), f"{label}: terminal_list lists it")
    tui = structured(await call_tool("terminal_start", {"command_id": "pty-tui"}))
    structured(await call_tool("terminal_wait", {"session_id": tui["session_id"], "pattern": "counter: 0", "strip_ansi": True}))
    screen = structured(await call_tool("terminal_screen", {"session_id": tui["session_id"]}))
    check(screen["lines"][0] == "pty-tui 24x80" and screen["alternate_screen"], f"{label}: terminal_screen renders pty-tui")
    ended = structured(await call_tool("terminal_terminate", {"session_id": tui["session_id"]}))
    check(ended["status"] == "TERMINATED", f"{label}: terminal_terminate ends it")

    bad = await call_tool("terminal_read", {"session_id": sid, "cursor": True})
    check(bad.is_error is True, f"{label}: a boolean cursor is a tool error")
    check(structured(bad)["error"]["code"] == "INVALID_ARGUMENT", f"{label}: ... with code INVALID_ARGUMENT")


async def with_client_session(transport):
    async with transport as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.server_info.name == "mcp-terminal", "ClientSession.initialize(): server is mcp-terminal")
            print(f"info: negotiated protocol {init.protocol_version}")
            await exercise(session.call_tool, session.list_tools, "ClientSession")


async def with_high_level_client(transport):
    async with Client(transport) as client:
        check(client.server_info.name == "mcp-terminal", "mcp.Client: server is mcp-terminal")
        print(f"info: negotiated protocol {client.protocol_version}")
        await exercise(client.call_tool, client.list_tools, "mcp.Client")


class HttpServer:
    """`mcp-terminal http` on a free loopback port, with its token file in `root`."""

    LISTENING = "mcp-terminal: listening on "

    def __init__(self, binary, root):
        self.token_file = os.path.join(root, "token")
        self.process = subprocess.Popen(
            [binary, "http", "--listen", "127.0.0.1:0", "--token-file", self.token_file],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr = []
        listening = threading.Event()

        def pump():
            for line in self.process.stderr:
                self.stderr.append(line)
                if line.startswith(self.LISTENING):
                    self.url = line[len(self.LISTENING):].strip()
                    listening.set()
            listening.set()

        threading.Thread(target=pump, daemon=True).start()
        listening.wait(60)
        if getattr(self, "url", None) is None:
            raise AssertionError(f"mcp-terminal http printed no URL: {''.join(self.stderr)}")
        print(f"ok: mcp-terminal http listens on {self.url}")
        with open(self.token_file) as f:
            self.token = f.read().strip()

    def transport(self):
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        return streamable_http_client(self.url, http_client=client)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(30)
        check(code == 0, "mcp-terminal http exits 0 on SIGTERM")
        check(all(self.token not in line for line in self.stderr), "the token is on no stderr line")


async def main(binary, transport):
    with tempfile.TemporaryDirectory() as root:
        if transport == "stdio":
            params = StdioServerParameters(command=binary, args=["stdio"], cwd=root)
            await with_client_session(stdio_client(params))
            await with_high_level_client(params)
            return
        server = HttpServer(binary, root)
        try:
            await with_client_session(server.transport())
            await with_high_level_client(server.transport())
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "stdio"))
