"""Headless Chromium for the tests that look at tidepool's HTML pages (the
replay report, the advisor's page): one browser and one page, driven by
Selenium through chromedriver (Debian's python3-selenium and chromium-driver),
and the problems a page must not have (console errors, exceptions, network
fetches). What WebDriver lacks (mouse events at a point, a screenshot taller
than the window, the page's exact viewport) goes to Chromium's DevTools
protocol through chromedriver (`execute_cdp_cmd`).
"""
import base64
import json
import os
import pathlib
import shutil
import sys

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    webdriver = None

SKIP = 77


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def find_chromedriver():
    return os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")


def find_chromium():
    """(the browser to use, None), or (None, why the test must skip with SKIP)."""
    if webdriver is None:
        return None, "no selenium in %s (scripts/setup.sh installs python3-selenium)" % sys.executable
    if not find_chromedriver():
        return None, "no chromedriver on PATH (scripts/setup.sh installs chromium-driver)"
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        return None, "no chromium on PATH (scripts/setup.sh installs it)"
    return chromium, None


class Browser:
    """One headless Chromium and one page, under selenium.webdriver.Chrome.
    `events` holds what the page did: Chromium's console log (console calls,
    uncaught exceptions, the browser's own errors) and its Network events."""

    def __init__(self, chromium, profile):
        self.chromium = chromium
        self.profile = profile
        self.driver = None
        self.width = 0
        self._events = []

    def open_page(self, width, height):
        """Starts the browser with a `width` x `height` window, the page's viewport exactly that size."""
        options = webdriver.ChromeOptions()
        options.binary_location = self.chromium
        for argument in ("--headless=new", "--disable-gpu", "--no-sandbox", "--window-size=%d,%d" % (width, height),
                         "--user-data-dir=" + self.profile, "--no-first-run", "--no-default-browser-check",
                         "--disable-extensions", "--disable-background-networking", "--disable-sync",
                         "--hide-scrollbars", "--mute-audio", "about:blank"):
            options.add_argument(argument)
        options.page_load_strategy = "normal"
        # The browser log: console calls, exceptions, Chromium's errors. The
        # performance log: the page's Network events, so every fetch shows.
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        options.add_experimental_option("perfLoggingPrefs", {"enableNetwork": True, "enablePage": False})
        os.makedirs(self.profile, exist_ok=True)
        log = os.path.join(os.path.dirname(self.profile), "chromedriver.log")
        try:
            self.driver = webdriver.Chrome(service=Service(find_chromedriver(), log_path=log), options=options)
        except WebDriverException as e:
            fail("chromedriver could not start %s: %s (see %s)" % (self.chromium, e.msg, log))
        # Headless Chromium keeps part of the window for its (absent) toolbar;
        # the page gets the whole size, set before anything loads, as the
        # report redraws on resize.
        self.width = width
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        # A fresh profile may first show the new-tab page, with its chrome://
        # requests: the browser's, not the page's. A blank page ends it, and
        # what was logged until then is dropped.
        self.driver.get("about:blank")
        self.driver.get_log("browser")
        self.driver.get_log("performance")

    def load(self, path, timeout=30):
        """Opens the local file `path` in the page and waits until it has
        loaded and its scripts have run (the load event comes after them)."""
        url = pathlib.Path(path).absolute().as_uri()
        self.driver.set_page_load_timeout(timeout)
        try:
            self.driver.get(url)
            WebDriverWait(self.driver, timeout).until(
                lambda d: d.execute_script("return document.readyState") == "complete")
            url = self.driver.current_url
        except WebDriverException as e:
            fail("loading %s: %s" % (url, e.msg))
        # The page's own request must be in the Network events, or no fetch would show either.
        if not any(e.get("method") == "Network.requestWillBeSent" and e["params"]["request"]["url"] == url
                   for e in self.events):
            fail("no Network event for %s: the check for network fetches would see nothing" % url)

    def evaluate(self, expression):
        """The value of the JavaScript `expression` in the page (a promise is awaited)."""
        try:
            return self.driver.execute_script("return (%s);" % expression)
        except WebDriverException as e:
            fail("evaluating %r: %s" % (expression[:80], e.msg))

    def call(self, method, params=None):
        """A DevTools command on the page, through chromedriver."""
        try:
            return self.driver.execute_cdp_cmd(method, params or {})
        except WebDriverException as e:
            fail("%s: %s" % (method, e.msg))

    def mouse(self, kind, x, y, buttons=0, button="none", clicks=0):
        self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": button, "buttons": buttons,
                                               "clickCount": clicks})

    def screenshot(self, path, full_page=False, max_height=None):
        """Saves a PNG of the viewport, or with `full_page` of the whole page
        (its top `max_height` pixels at most) however tall the viewport."""
        params = {"format": "png"}
        if full_page:
            height = self.evaluate("document.documentElement.scrollHeight")
            if max_height:
                height = min(height, max_height)
            params.update({"captureBeyondViewport": True,
                           "clip": {"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1}})
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.call("Page.captureScreenshot", params)["data"]))

    @property
    def events(self):
        """Everything logged since the browser started: the browser log's
        entries as they are ({"level", "source", "message"}), the Network
        events as DevTools sends them ({"method", "params"})."""
        if self.driver:
            self._events += self.driver.get_log("browser")
            self._events += [json.loads(e["message"])["message"] for e in self.driver.get_log("performance")]
        return self._events

    def close(self):
        if self.driver:
            try:
                self.driver.quit()
            except WebDriverException:
                pass
            self.driver = None


def problems_in(events):
    """Console errors, warnings and failed asserts, uncaught exceptions,
    Chromium's error log entries, network fetches."""
    found = []
    for e in events:
        level = e.get("level")
        if level == "SEVERE" or (level == "WARNING" and e.get("source") == "console-api"):
            found.append("%s %s: %s" % (e.get("source"), level.lower(), e.get("message")))
        elif e.get("method") == "Network.requestWillBeSent":
            url = e.get("params", {}).get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:", "about:")):
                found.append("network request: %s" % url)
    return found
