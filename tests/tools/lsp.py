"""A minimal Language Server Protocol client over stdio (JSON-RPC 2.0 with Content-Length framing), enough to
open a document and ask a real yaml-language-server for its diagnostics and completions."""

from __future__ import annotations

import json
import select
import subprocess
import time
from pathlib import Path

YAML_SETTINGS = {"yaml": {"validate": True, "completion": True, "hover": True, "schemaStore": {"enable": False}}}


class LanguageServer:
    def __init__(self, command: list[str], root: Path):
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.next_id, self.notifications = 0, []
        self.request(
            "initialize",
            {
                "processId": None,
                "rootUri": root.as_uri(),
                "capabilities": {
                    "workspace": {"configuration": True},
                    "textDocument": {
                        "completion": {"completionItem": {"snippetSupport": False}},
                        "publishDiagnostics": {},
                    },
                },
            },
        )
        self.notify("initialized", {})
        self.notify("workspace/didChangeConfiguration", {"settings": YAML_SETTINGS})

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode("utf-8")
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def _receive(self, timeout_seconds: float) -> dict | None:
        """The next message, or None when none comes within the timeout."""
        if not select.select([self.process.stdout], [], [], timeout_seconds)[0]:
            return None
        length = 0
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the language server exited")
            if line in (b"\r\n", b"\n"):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.process.stdout.read(length))

    def _answer_server_request(self, message: dict) -> None:
        """workspace/configuration asks for our settings; anything else gets null."""
        if message["method"] == "workspace/configuration":
            result = [
                YAML_SETTINGS.get(item.get("section", ""), YAML_SETTINGS["yaml"])
                if item.get("section") != "yaml"
                else YAML_SETTINGS["yaml"]
                for item in message["params"]["items"]
            ]
        else:
            result = None
        self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})

    def _pump_until(self, done, timeout_seconds: float = 60):
        """Read messages (answering the server's requests) until done(message) returns a (found,) tuple."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            message = self._receive(max(0.0, deadline - time.monotonic()))
            if message is None:
                break
            if "method" in message and "id" in message:
                self._answer_server_request(message)
            elif "method" in message:
                self.notifications.append(message)
            found = done(message)
            if found is not None:
                return found[0]
        raise TimeoutError("no answer from the language server")

    def request(self, method: str, params: dict):
        self.next_id += 1
        ident = self.next_id
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        return self._pump_until(
            lambda m: (m.get("result", m.get("error")),) if m.get("id") == ident and "method" not in m else None
        )

    def notify(self, method: str, params: dict) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def open(self, path: Path, text: str, settle_seconds: float = 3.0) -> list[dict]:
        """Open a document; its diagnostics as last published once the server has been quiet for settle_seconds
        (the server may publish an empty list before its schema validation has run)."""
        uri = path.as_uri()
        self.notify(
            "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "yaml", "version": 1, "text": text}}
        )
        published: list[list[dict]] = []
        try:
            while True:
                published.append(
                    self._pump_until(
                        lambda m: (
                            (m["params"]["diagnostics"],)
                            if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri
                            else None
                        ),
                        settle_seconds,
                    )
                )
        except TimeoutError:
            if not published:
                raise
        return published[-1]

    def complete(self, path: Path, line: int, character: int) -> list[str]:
        result = self.request(
            "textDocument/completion",
            {"textDocument": {"uri": path.as_uri()}, "position": {"line": line, "character": character}},
        )
        items = result.get("items", []) if isinstance(result, dict) else (result or [])
        return [item["label"] for item in items]

    def close(self) -> None:
        try:
            self.request("shutdown", {})
            self.notify("exit", {})
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
