"""The chat page at GET / in a real (headless) browser: Debian's chromium and chromedriver drive it
through selenium: type a question into #input, click #send, wait for an `.assistant` message with
text, and save a screenshot (to $TP_SCREENSHOT, else a temp dir; the path is printed).

Run: tests/serve/run_python_tests.sh build/bin/tensorpar tests/serve/test_web_page.py -s
"""
import os
import shutil
import tempfile
import time

import pytest

CHROMIUM = os.environ.get("TP_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TP_CHROMEDRIVER", "/usr/bin/chromedriver")
ANSWER_TIMEOUT = float(os.environ.get("TP_REQUEST_TIMEOUT", "300"))


@pytest.fixture(scope="module")
def browser():
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip(f"no headless browser: {CHROMIUM} and {CHROMEDRIVER} are needed "
                    "(Debian packages chromium and chromium-driver; scripts/setup.sh installs them)")
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager must not try to download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1000,800", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    profile = tempfile.mkdtemp(prefix="tp-chromium-")
    opts.add_argument(f"--user-data-dir={profile}")
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _assistant_texts(drv):
    from selenium.webdriver.common.by import By
    return [e.text for e in drv.find_elements(By.CSS_SELECTOR, "#messages .assistant")]


def test_chat_page_answers(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.url + "/")
    box = browser.find_element(By.ID, "input")
    assert box.tag_name.lower() == "textarea"
    send = browser.find_element(By.ID, "send")
    browser.find_element(By.ID, "messages")
    assert not any(t.strip() for t in _assistant_texts(browser)), "an answer before any question"

    box.send_keys("What is the capital of France?")
    send.click()
    WebDriverWait(browser, ANSWER_TIMEOUT, poll_frequency=0.5).until(
        lambda d: any(t.strip() for t in _assistant_texts(d)))
    # It may still be streaming: wait until the text has not changed for 3 s (bounded).
    last, since, deadline = None, time.monotonic(), time.monotonic() + ANSWER_TIMEOUT
    while time.monotonic() < deadline:
        now = _assistant_texts(browser)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 3:
            break
        time.sleep(0.5)
    answer = [t for t in last if t.strip()][-1]

    path = os.environ.get("TP_SCREENSHOT") or os.path.join(tempfile.mkdtemp(prefix="tp-web-"), "chat.png")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    assert browser.save_screenshot(path), "screenshot failed"
    print(f"\nscreenshot: {path}\nassistant: {answer!r}")
    logs = browser.get_log("browser") if hasattr(browser, "get_log") else []
    errors = [e for e in logs if e.get("level") == "SEVERE" and "favicon" not in e.get("message", "")]
    assert not errors, f"browser console errors: {errors}"
