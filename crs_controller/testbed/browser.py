"""A real headless browser for the fleet page's tests and benchmark: Debian's
``chromium`` driven through ``chromedriver`` over plain WebDriver HTTP (the W3C
protocol: a session, navigate, execute a script, take a screenshot), so no client
library is needed."""

from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
STARTUP = 30.0
WINDOW = (1400, 900)


def missing() -> str | None:
    """Why no browser can run here (None: it can): what hack/setup.sh installs."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(path) is None:
            return f"{path} is not installed (Debian's chromium and chromium-driver; hack/setup.sh)"
    return None


class Browser:
    """One WebDriver session of a headless chromium."""

    def __init__(self, client: httpx.Client, session: str) -> None:
        self.client = client
        self.session = session

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = self.client.request(method, f"/session/{self.session}{path}", json=body)
        value = answer.json().get("value")
        if answer.status_code != 200:
            raise RuntimeError(f"WebDriver {path}: {answer.status_code} {value}")
        return value

    def open(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """The value of ``script`` (a function body: ``return …``) in the page."""
        return self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait(self, script: str, *args: Any, timeout: float = 30.0) -> Any:
        """The first truthy value of ``script``, asked again until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.run(script, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page never answered {script!r}: last {value!r}")
            time.sleep(0.1)

    def logs(self) -> list[dict[str, Any]]:
        """The browser console's entries (errors such as a refused inline script)."""
        answer = self.client.post(f"/session/{self.session}/se/log", json={"type": "browser"})
        value: list[dict[str, Any]] = answer.json().get("value") or []
        return value if answer.status_code == 200 else []

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self._call("GET", "/screenshot")))
        return path


@contextmanager
def browser(window: tuple[int, int] = WINDOW) -> Iterator[Browser]:
    """A headless chromium for the length of the block."""
    port = _free_port()
    driver = subprocess.Popen(
        [CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            _until_up(client)
            session = _new_session(client, window)
            try:
                yield Browser(client, session)
            finally:
                client.delete(f"/session/{session}")
    finally:
        driver.terminate()
        driver.wait(10)


def _new_session(client: httpx.Client, window: tuple[int, int]) -> str:
    args = [
        "--headless=new",
        "--no-sandbox",  # run as root in containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={window[0]},{window[1]}",
    ]
    options = {"binary": CHROMIUM, "args": args}
    capabilities = {
        "browserName": "chrome",
        "goog:chromeOptions": options,
        "goog:loggingPrefs": {"browser": "ALL"},
    }
    answer = client.post("/session", json={"capabilities": {"alwaysMatch": capabilities}})
    answer.raise_for_status()
    session: str = answer.json()["value"]["sessionId"]
    return session


def _until_up(client: httpx.Client) -> None:
    deadline = time.monotonic() + STARTUP
    while True:
        try:
            if client.get("/status").json()["value"]["ready"]:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("chromedriver did not start")
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
