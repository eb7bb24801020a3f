"""A Hugging Face Hub on 127.0.0.1 for tests: serves the repositories a test wrote, as the Hub's resolve endpoint does.

``huggingface_hub`` talks to it through ``HF_ENDPOINT`` exactly as to huggingface.co (HEAD for the metadata:
``X-Repo-Commit``, ``ETag``, ``Content-Length``; GET for the bytes; 404 with ``X-Error-Code`` ``RepoNotFound`` or
``EntryNotFound``), so the tests run the real download, cache, lock and clean-up code. Every request is logged, so a
test can assert that a cached model costs no request at all.

Repositories hold tiny models that vitviz opens today: a timm-layout ViT (``model.safetensors`` + timm's
``config.json`` with ``architecture`` and ``pretrained_cfg``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import torch


class FakeHub:
    """``repos[repo_id][filename] = bytes``; ``requests``: ``(method, repo, filename)`` in order of arrival;
    ``gated``: repositories that answer as a gated one does to a user without access (403, ``GatedRepo``)."""

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.gated: set[str] = set()
        self.requests: list[tuple[str, str, str]] = []
        self.chunk = 1 << 16  # GET bodies are written in chunks of this size
        self.delay = 0.0  # seconds between chunks (a slow connection, for the window's progress dialog)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _resolve(self) -> tuple[int, dict[str, str], bytes]:
                parts = self.path.split("?", 1)[0].lstrip("/").split("/")
                # /<owner>/<name>/resolve/<revision>/<file...>
                if len(parts) < 5 or parts[2] != "resolve":
                    return 404, {"X-Error-Code": "RepoNotFound"}, b"not found"
                repo, filename = "/".join(parts[:2]), "/".join(parts[4:])
                hub.requests.append((self.command, repo, filename))
                if repo in hub.gated:
                    return 403, {"X-Error-Code": "GatedRepo", "X-Error-Message": f"Access to model {repo} is "
                                 "restricted. You must have access to it and be authenticated."}, b"{}"
                files = hub.repos.get(repo)
                if files is None:
                    return 404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"}, b"{}"
                if filename not in files:
                    return 404, {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"}, b"{}"
                data = files[filename]
                commit = hashlib.sha1(repo.encode()).hexdigest()
                return 200, {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}, data

            def _send(self, body: bool) -> None:
                status, headers, data = self._resolve()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    try:
                        for i in range(0, len(data), hub.chunk):
                            self.wfile.write(data[i:i + hub.chunk])
                            self.wfile.flush()
                            if hub.delay:
                                time.sleep(hub.delay)
                    except (BrokenPipeError, ConnectionResetError):  # the client cancelled
                        pass

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                self._send(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self._send(body=True)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:  # a cancelled client: not an error
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, repo: str, files: dict[str, bytes]) -> None:
        self.repos[repo] = dict(files)

    def gets(self, filename: str | None = None) -> list[tuple[str, str]]:
        """``(repo, file)`` of every GET (a download), optionally of one file name only."""
        return [(r, f) for m, r, f in self.requests if m == "GET" and (filename is None or f == filename)]

    def start(self) -> "FakeHub":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def timm_repo(*, depth: int = 2, num_classes: int = 5, img_size: int = 32, embed_dim: int = 192,
              architecture: str = "vit_tiny_patch16_224", seed: int = 0) -> tuple[dict[str, bytes], torch.nn.Module]:
    """The files of a timm hub repository for a tiny random ViT built with timm (``pretrained=False``), and the
    timm model itself (the reference): ``config.json`` as timm's ``push_to_hub`` writes it, ``model.safetensors``."""
    import timm
    from safetensors.torch import save

    torch.manual_seed(seed)
    ref = timm.create_model(architecture, pretrained=False, depth=depth, num_classes=num_classes, img_size=img_size,
                            embed_dim=embed_dim).eval()
    weights = save({k: v.contiguous() for k, v in ref.state_dict().items()})
    config = {"architecture": architecture, "num_classes": num_classes, "num_features": embed_dim,
              "pretrained_cfg": {"tag": "test", "input_size": [3, img_size, img_size], "mean": [0.5, 0.5, 0.5],
                                 "std": [0.5, 0.5, 0.5], "crop_pct": 0.9, "interpolation": "bicubic",
                                 "num_classes": num_classes}}
    return {"config.json": json.dumps(config).encode(), "model.safetensors": weights}, ref


def big_file(n_bytes: int) -> bytes:
    """Deterministic filler bytes (for a download that takes several chunks)."""
    return (hashlib.sha256(b"x").digest() * (n_bytes // 32 + 1))[:n_bytes]


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    """A running :class:`FakeHub`, with ``HF_ENDPOINT`` pointing at it, an empty Hub cache in ``tmp_path`` and
    offline mode off; chunked downloads (64 kB) so that progress and cancel happen mid-file."""
    from huggingface_hub import constants

    hub = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1 << 16)
    try:
        yield hub
    finally:
        hub.stop()
