"""Driving Debian's Chromium with Playwright (no browser can be downloaded here)."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Response, WebError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def log_in(page: Page, base_url: str, username: str, then: str) -> None:
    """Log in through the real form as one of the named actors, landing on `then`."""
    page.goto(f"{base_url}/login/?next={then}")
    page.fill("#id_username", username)
    page.fill("#id_password", f"{username}-password-1")
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{base_url}{then}")


# Chromium logs the violations it blocks; the DOM event also names the ones it only reports.
REPORT_CSP = """document.addEventListener("securitypolicyviolation", (e) => console.error(
  `Content Security Policy violation: ${e.violatedDirective} refused ${e.blockedURI || "inline"}`
  + ` at ${e.sourceFile}:${e.lineNumber}`));"""
ASSETS = {"stylesheet", "script", "image", "font"}
# Chromium logs every 4xx/5xx answer as a console error too; _response judges those.
ANSWERED = "Failed to load resource: the server responded with a status of"


class ConsoleWatch:
    """While open, every context `browser.new_context()` makes is watched, and `problems`
    lists what went wrong in its pages: CSP violations, uncaught errors, console errors,
    an asset or favicon answered 4xx/5xx, and any 5xx answer at all."""

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self.problems: list[str] = []

    def __enter__(self) -> ConsoleWatch:
        new_context = self.browser.new_context

        def watched(*args: Any, **kwargs: Any) -> BrowserContext:
            context = new_context(*args, **kwargs)
            context.add_init_script(REPORT_CSP)
            context.on("console", self._console)
            context.on("weberror", self._error)
            context.on("response", self._response)
            return context

        self.browser.new_context = watched  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.browser.new_context  # the class's own method again

    def _add(self, kind: str, text: str, page: Page | None) -> None:
        self.problems.append(f"{kind}: {text} (on {page.url if page else 'a closed page'})")

    def _console(self, msg: ConsoleMessage) -> None:
        if "Content Security Policy" in msg.text:
            self._add("CSP", msg.text, msg.page)
        elif msg.type == "error" and not msg.text.startswith(ANSWERED):
            self._add("console.error", msg.text, msg.page)

    def _error(self, error: WebError) -> None:
        self._add("uncaught error", error.error.message, error.page)

    def _response(self, response: Response) -> None:
        request, url = response.request, response.url
        asset = request.resource_type in ASSETS or "/static/" in url or "favicon" in url
        if response.status >= 500 or (asset and response.status >= 400):
            self._add(f"HTTP {response.status}", f"{request.method} {url}", response.frame.page)
