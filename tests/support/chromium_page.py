"""Headless Chromium for the tests that look at tidepool's HTML pages (the
replay report, the advisor's page): one browser and one page, driven over
--remote-debugging-pipe with the standard library only, and the problems a
page must not have (console errors, exceptions, network fetches).
"""
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time

SKIP = 77


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def find_chromium():
    """The browser to use, or None (the caller then skips with SKIP)."""
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium and one page, spoken to over the DevTools pipe."""

    def __init__(self, chromium, profile):
        to_browser = os.pipe()
        from_browser = os.pipe()
        # Out of the way of 3 and 4, which the child must see as the pipe.
        self.write_fd = fcntl.fcntl(to_browser[1], fcntl.F_DUPFD_CLOEXEC, 10)
        self.read_fd = fcntl.fcntl(from_browser[0], fcntl.F_DUPFD_CLOEXEC, 10)
        child_in = fcntl.fcntl(to_browser[0], fcntl.F_DUPFD_CLOEXEC, 10)
        child_out = fcntl.fcntl(from_browser[1], fcntl.F_DUPFD_CLOEXEC, 10)
        for fd in to_browser + from_browser:
            os.close(fd)

        def wire():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        os.makedirs(profile, exist_ok=True)
        self.log = open(os.path.join(os.path.dirname(profile), "chromium.log"), "w")
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--disable-gpu", "--no-sandbox", "--remote-debugging-pipe",
             "--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-sync", "--hide-scrollbars", "--mute-audio",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, preexec_fn=wire, close_fds=False)
        os.close(child_in)
        os.close(child_out)
        self.buffer = b""
        self.next_id = 0
        self.events = []
        self.session = None

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                fail("Chromium did not answer in time")
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if ready:
                chunk = os.read(self.read_fd, 1 << 20)
                if not chunk:
                    fail("Chromium closed the DevTools pipe (see chromium.log)")
                self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=True, timeout=20):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    fail("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method, timeout=20):
        deadline = time.monotonic() + timeout
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            e = self._read_message(deadline)
            if e.get("method") == method:
                return e
            self.events.append(e)

    def open_page(self, width, height):
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def load(self, path, timeout=30):
        """Opens the local file `path` in the page and waits until it has loaded."""
        self.call("Page.navigate", {"url": "file://" + path})
        self.wait_event("Page.loadEventFired", timeout=timeout)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            fail("evaluating %r: %s" % (expression[:80], result["exceptionDetails"]))
        return result["result"].get("value")

    def mouse(self, kind, x, y, buttons=0, button="none", clicks=0):
        self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": button, "buttons": buttons,
                                               "clickCount": clicks})

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=5)
        except SystemExit:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def problems_in(events):
    """Console errors, uncaught exceptions, error log entries, network fetches."""
    found = []
    for e in events:
        method = e.get("method")
        params = e.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
            found.append("console.%s: %s" % (params["type"], [a.get("value", a.get("description"))
                                                             for a in params.get("args", [])]))
        elif method == "Runtime.exceptionThrown":
            found.append("exception: %s" % params.get("exceptionDetails", {}).get("exception", {}).get("description"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            found.append("log error: %s" % params["entry"].get("text"))
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:", "about:")):
                found.append("network request: %s" % url)
    return found


