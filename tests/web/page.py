"""Drive `ralph serve`'s page in headless Chromium (issue 31, Done-when 1) with Playwright.

    python page.py SCENARIO_JSON            # the web view's scenario (or the JSON on stdin)
    python page.py --selftest SCENARIO_JSON # the harness's own check on a static page

Debian's /usr/bin/chromium is launched (Playwright cannot download its own browser here), with a
fresh user data dir and no background networking. Every element is found by its accessible role
and name, as a screen reader finds it (SPEC §16), never by CSS or XPath. Each step reached prints
one JSON line on stdout (`{"step": …}`, flushed), so the caller sees how far it got. On failure the
page's screenshot (`failure.png`) and HTML (`failure.html`) are saved under `artifacts`, and the
driver exits 1 with the reason on stderr and as a last `{"step": "failed", …}` line.

The scenario (JSON object):
  url         the page's URL (for the web view, the one `ralph serve` printed, `#token=` included)
  artifacts   a directory for screenshots and HTML (created)
  deadline_s  seconds for the whole scenario (every wait is bounded by what is left of it)
  chromium    the browser's path (default /usr/bin/chromium)
  web view:   progress (loop whose `done/total` must change), progress_total, stop (loop to
              stop), ask (loop that asks), question, answer, loops (every name the page must show)
  selftest:   region (default "x"): the region whose `Stop REGION` button is clicked
"""

import json
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Failed(Exception):
    """A step did not happen: the reason is the message."""


def step(name, **fields):
    print(json.dumps({"step": name, **fields}), flush=True)


class Clock:
    """What is left of the scenario's deadline, in milliseconds for Playwright."""

    def __init__(self, seconds):
        self.end = time.monotonic() + float(seconds)

    def ms(self):
        left = self.end - time.monotonic()
        if left <= 0:
            raise Failed("the scenario's deadline passed")
        return left * 1000


def region(page, name):
    # exact: a loop named `a` is not `main`, whose name contains an `a`.
    return page.get_by_role("region", name=name, exact=True)


def button(scope, name):
    return scope.get_by_role("button", name=name, exact=True)


def progress_of(page, name, total, clock):
    """The first `done/total` text region `name` shows now (waiting until it shows one)."""
    # No digit on either side, as text may run together ("Progress0/4", "Iteration1/10").
    pattern = re.compile(r"(?<!\d)(\d+)\s*/\s*%d(?!\d)" % total)
    loc = region(page, name)
    while True:
        found = pattern.search(loc.inner_text(timeout=clock.ms()))
        if found:
            return f"{found.group(1)}/{total}"
        page.wait_for_timeout(min(50, clock.ms()))


def no_navigation(page, marker):
    """The page was never reloaded or navigated away: the marker set at the start is there."""
    if page.evaluate("() => window.__ralphMarker") != marker:
        raise Failed("the page was reloaded or navigated (window.__ralphMarker is gone)")


def web_view(page, s, clock):
    page.goto(s["url"], timeout=clock.ms())
    marker = f"marker-{time.monotonic_ns()}"
    page.evaluate("m => { window.__ralphMarker = m; }", marker)
    step("loaded")
    for name in s["loops"]:
        expect(region(page, name)).to_be_visible(timeout=clock.ms())
    step("named", loops=s["loops"])

    a, total = s["progress"], int(s["progress_total"])
    first = progress_of(page, a, total, clock)
    step("progress_first", loop=a, text=first)
    while (now := progress_of(page, a, total, clock)) == first:
        page.wait_for_timeout(50)
    no_navigation(page, marker)
    step("progress_changed", loop=a, before=first, after=now)

    b = s["stop"]
    stop = button(region(page, b), f"Stop {b}")
    expect(stop).to_be_visible(timeout=clock.ms())
    stop.click(timeout=clock.ms())
    step("stop_clicked", loop=b)
    halted = re.compile(r"interrupted|\b130\b")
    expect(region(page, b)).to_contain_text(halted, timeout=clock.ms())
    step("stop_shown", loop=b)

    c = s["ask"]
    # The question, or the loop halted without one (then waiting longer is no use).
    asked = re.compile(re.escape(s["question"]) + "|halted")
    expect(region(page, c)).to_contain_text(asked, timeout=clock.ms())
    if s["question"] not in region(page, c).inner_text(timeout=clock.ms()):
        raise Failed(f"loop {c} halted and its question never showed")
    step("question_shown", loop=c)
    box = region(page, c).get_by_role("textbox", name=f"Answer for {c}", exact=True)
    box.fill(s["answer"], timeout=clock.ms())
    button(region(page, c), f"Send answer for {c}").click(timeout=clock.ms())
    step("answer_sent", loop=c)
    # Answered, the question leaves the page (and the POST has landed before the browser closes).
    try:
        expect(region(page, c)).not_to_contain_text(s["question"], timeout=clock.ms())
    except AssertionError as e:
        said = page.get_by_role("status").all_inner_texts()
        raise Failed(f"the question stayed on the page after the answer; the page said {said}") from e
    step("answer_taken", loop=c, said=page.get_by_role("status").all_inner_texts())
    no_navigation(page, marker)


def selftest(page, s, clock):
    page.goto(s["url"], timeout=clock.ms())
    step("loaded")
    name = s.get("region", "x")
    scope = region(page, name)
    expect(scope).to_be_visible(timeout=clock.ms())
    step("named", loops=[name])
    button(scope, f"Stop {name}").click(timeout=clock.ms())
    step("stop_clicked", loop=name)
    expect(scope).to_contain_text("stopped", timeout=clock.ms())
    step("stop_shown", loop=name)


def save_failure(page, artifacts):
    """The page as it was when a step failed: a screenshot and its HTML, best effort."""
    saved = []
    try:
        page.screenshot(path=str(artifacts / "failure.png"), full_page=True, timeout=10_000)
        saved.append("failure.png")
    except PlaywrightError as e:
        print(f"page.py: no screenshot: {e}", file=sys.stderr)
    try:
        (artifacts / "failure.html").write_text(page.content(), encoding="utf-8")
        saved.append("failure.html")
    except PlaywrightError as e:
        print(f"page.py: no HTML: {e}", file=sys.stderr)
    return saved


def run(s, scenario):
    artifacts = Path(s["artifacts"])
    artifacts.mkdir(parents=True, exist_ok=True)
    clock = Clock(s.get("deadline_s", 60))
    with tempfile.TemporaryDirectory(prefix="ralph-chromium-") as profile, sync_playwright() as p:
        try:
            context = p.chromium.launch_persistent_context(
                profile,
                executable_path=s.get("chromium", CHROMIUM),
                headless=True,
                args=ARGS,
                timeout=clock.ms(),
            )
        except PlaywrightError as e:
            first = str(e).splitlines()[0] if str(e) else repr(e)
            raise Failed(f"chromium did not start ({s.get('chromium', CHROMIUM)}): {first}") from e
        step("launched")
        page = context.pages[0] if context.pages else context.new_page()
        try:
            scenario(page, s, clock)
            page.screenshot(path=str(artifacts / "done.png"), full_page=True)
            step("done")
        except (Failed, PlaywrightError, AssertionError) as e:
            saved = save_failure(page, artifacts)
            raise Failed(f"{e} (saved {saved} in {artifacts})") from e
        finally:
            context.close()


def main(argv):
    scenario = web_view
    if argv[:1] == ["--selftest"]:
        scenario, argv = selftest, argv[1:]
    text = argv[0] if argv else sys.stdin.read()
    try:
        s = json.loads(text)
        if not isinstance(s, dict) or "url" not in s or "artifacts" not in s:
            raise ValueError("the scenario needs at least `url` and `artifacts`")
    except ValueError as e:
        print(f"page.py: bad scenario: {e}", file=sys.stderr)
        return 2
    try:
        run(s, scenario)
    except (Failed, KeyError, ValueError) as e:
        reason = str(e) if not isinstance(e, KeyError) else f"the scenario has no {e}"
        step("failed", reason=reason)
        print(f"page.py: {reason}", file=sys.stderr)
        return 1
    except Exception as e:  # an unexpected error still says where it happened
        traceback.print_exc()
        step("failed", reason=repr(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
