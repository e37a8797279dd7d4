"""Test helper: Debian's headless Chromium, installed where missing, driven over the DevTools
protocol on a pipe (stdlib only), to read what a page shows, shadow DOM included, and what it
requested and logged on the way."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# Without the networking flags Chromium keeps dialling Google's hosts, which this closed
# network refuses; --no-sandbox because tests may run as root.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000")
# All text a page shows: TensorBoard's Polymer dashboards live in shadow roots, which
# `--dump-dom` leaves out, and its profiler plugins in iframes.
_DEEP_TEXT = """(() => {
  const out = [];
  const hidden = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE']);
  const walk = (node) => {
    if (!node || hidden.has(node.nodeName)) return;  // no document yet while a page loads
    if (node.nodeType === Node.TEXT_NODE) out.push(node.textContent);
    if (node.shadowRoot) walk(node.shadowRoot);
    if (node.nodeName === 'IFRAME') {  // plugin pages such as the profilers' (same origin)
      try { if (node.contentDocument) walk(node.contentDocument.documentElement); } catch (e) {}
    }
    for (const child of node.childNodes) walk(child);
  };
  walk(document.documentElement);
  return out.join(' ').replace(/\\s+/g, ' ');
})()"""


def ensure_chromium() -> str | None:
    """Path of Chromium, installing Debian's package first where it is missing; None (with the
    reason printed) when it cannot be had, so the caller can skip."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        return None
    if os.geteuid() != 0:
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "chromium"]):
        if subprocess.run(command, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=900).returncode != 0:
            return None
    return CHROMIUM if os.access(CHROMIUM, os.X_OK) else None


def _above_ten(fd: int) -> int:
    import fcntl
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class HeadlessChromium:
    """`with HeadlessChromium() as browser: browser.open(url); browser.wait_for_text([...])`."""

    def __init__(self, executable: str = CHROMIUM):
        self.executable = executable
        self._profile = tempfile.mkdtemp(prefix="gapscope-chromium-")
        self._process: subprocess.Popen | None = None
        self._next_id = 0
        self._session: str | None = None
        self._buffer = b""
        self.events: list[dict] = []  # protocol events since the last clear_events()

    def __enter__(self) -> "HeadlessChromium":
        # The protocol runs over fds 3 (to the browser) and 4 (from it).
        # Pipe ends moved above 10 first: dup2 onto the same number would keep close-on-exec.
        to_browser_r, self._to_browser = (_above_ten(fd) for fd in os.pipe())
        self._from_browser, from_browser_w = (_above_ten(fd) for fd in os.pipe())

        def wire_fds():
            os.dup2(to_browser_r, 3)  # dup2 copies are inheritable
            os.dup2(from_browser_w, 4)

        self._process = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self._profile}",
             "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # close_fds would shut 3 and 4 after wire_fds ran; Python's own fds are
            # close-on-exec anyway, so nothing else leaks into the browser.
            preexec_fn=wire_fds, close_fds=False, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget",
                                   {"targetId": target, "flatten": True})["sessionId"]
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._process and self._process.poll() is None:
                self._call("Browser.close", session=False, timeout=5)
                self._process.wait(10)
        except (OSError, TimeoutError, subprocess.TimeoutExpired):
            pass
        finally:
            if self._process and self._process.poll() is None:
                self._process.kill()
                self._process.wait()
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self._profile, ignore_errors=True)

    def open(self, url: str) -> None:
        self._call("Page.navigate", {"url": url})

    def watch(self) -> None:
        """Record the page's requests, responses, failures, console calls, uncaught exceptions
        and browser log entries into `events` (frames of the page included)."""
        for domain in ("Network", "Runtime", "Log"):
            self._call(f"{domain}.enable")

    def clear_events(self) -> None:
        self.evaluate("0")  # read what is already in the pipe before forgetting it
        self.events.clear()

    def requests(self) -> dict[str, dict]:
        """Each request since the last clear by id: url, status (None: no response) and the
        failure text of one that failed."""
        seen: dict[str, dict] = {}
        for event in self.events:
            params = event.get("params", {})
            if event.get("method") == "Network.requestWillBeSent":
                seen[params["requestId"]] = {"url": params["request"]["url"], "status": None,
                                             "failed": None}
            elif event.get("method") == "Network.responseReceived" and params["requestId"] in seen:
                seen[params["requestId"]]["status"] = params["response"]["status"]
            elif event.get("method") == "Network.loadingFailed" and params["requestId"] in seen:
                seen[params["requestId"]]["failed"] = params.get("errorText") or "failed"
        return seen

    def errors(self) -> list[dict]:
        """Console errors, uncaught exceptions and browser log errors since the last clear, each
        {"text", "urls"}: the script URLs it came from (its stack, or the failing resource)."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                frames = details.get("stackTrace", {}).get("callFrames", [])
                found.append({"text": details.get("exception", {}).get("description")
                              or details.get("text", ""),
                              "urls": [details.get("url", "")] + [f["url"] for f in frames]})
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                frames = params.get("stackTrace", {}).get("callFrames", [])
                found.append({"text": " ".join(str(a.get("value", a.get("description", "")))
                                               for a in params.get("args", [])),
                              "urls": [f["url"] for f in frames]})
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                entry = params["entry"]
                found.append({"text": entry.get("text", ""), "urls": [entry.get("url", "")]})
        return found

    def text(self) -> str:
        return self.evaluate(_DEEP_TEXT) or ""

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        result = self._call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for_text(self, fragments: list[str], timeout: float = 30.0) -> str:
        """The page's text once it holds every fragment; TimeoutError naming the missing ones."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            missing = [f for f in fragments if f not in text]
            if not missing:
                return text
            if time.monotonic() >= deadline:
                raise TimeoutError(f"after {timeout:.0f} s the page still lacks {missing}; "
                                   f"it shows: {text[:1500]}")
            time.sleep(0.5)

    def screenshot(self, path: Path) -> Path:
        data = self._call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def _call(self, method: str, params: dict | None = None, session: bool = True,
              timeout: float = 30.0) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if "method" in reply:
                self.events.append(reply)
            elif reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self, deadline: float) -> dict:
        import select
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise OSError("Chromium closed the protocol pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)
