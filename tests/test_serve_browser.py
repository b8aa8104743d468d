"""The serve pages in a real browser: `python -m workbench serve` started as a class would start it
(a roster, its tokens file), then headless Chromium (Debian's chromium and chromium-driver, driven
by Selenium) logs in as a student, uploads exercise 2's solution, waits for the verdict the real
judge streams, and reads it and the leaderboard: the serve tests' one real submission through the
real judge (exercise.grade.grade_one; without a GPU its GPU checks are skipped, said so).
WORKBENCH_SERVE_SCREENSHOTS=DIR keeps the two screenshots there (results/serve/ holds the committed ones)."""
from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

for _mod in ("starlette", "uvicorn", "jinja2", "markdown", "python_multipart"):
    pytest.importorskip(_mod, reason='the serve extra is not installed (pip install -e ".[serve]")')
pytest.importorskip("selenium", reason="Selenium is not installed (pip install selenium)")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
DRIVER = shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    pytest.skip("no headless Chromium here (apt-get install chromium chromium-driver; scripts/test.sh does where it "
                "can)", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def server(tmp_path):
    """The server, as `python -m workbench serve --roster` starts it: (base URL, {name: token})."""
    (tmp_path / "class.csv").write_text("name\nada\ngrace\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "serve", "--db", str(tmp_path / "class.sqlite3"),
                             "--port", str(port), "--roster", str(tmp_path / "class.csv")], cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/login", timeout=1)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                time.sleep(0.2)
        tokens = dict(line.strip().split(",") for line in (tmp_path / "class-tokens.csv").read_text().splitlines())
        yield base, tokens
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


@pytest.fixture
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,900"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


@pytest.mark.slow
def test_a_student_submits_in_a_browser_and_reads_the_verdict_and_the_leaderboard(server, browser, tmp_path,
                                                                                   cuda_buildable):
    base, tokens = server
    shots = pathlib.Path(os.environ.get("WORKBENCH_SERVE_SCREENSHOTS") or tmp_path)
    browser.get(base + "/exercises/2")
    assert browser.current_url.endswith("/login")  # no token yet
    browser.find_element(By.NAME, "token").send_keys(tokens["ada"])
    browser.find_element(By.TAG_NAME, "form").submit()
    wait = WebDriverWait(browser, 300, poll_frequency=0.2)  # each navigation: done when the page says so
    wait.until(lambda b: not b.current_url.endswith("/login"))
    browser.get(base + "/exercises/2")
    assert "No passing submission yet." in browser.find_element(By.ID, "leaderboard").text
    mine = tmp_path / "solution.cu"  # the solution, under its own name: the build cache has it
    mine.write_text((REPO / "exercises" / "02_vec4_loads" / "solution.cu").read_text())
    browser.find_element(By.NAME, "file").send_keys(str(mine))
    browser.find_element(By.CSS_SELECTOR, "form[action='/submit'] button").click()
    wait.until(lambda b: "/submissions/" in b.current_url)
    verdict = wait.until(lambda b: b.find_elements(By.ID, "verdict"))[0]  # the page reloads when the verdict comes
    assert verdict.text.startswith("PASS"), verdict.text
    checks = browser.find_element(By.TAG_NAME, "table").text
    assert "SASS rules ok" in checks and "build ok" in checks
    browser.save_screenshot(str(shots / "verdict.png"))
    browser.get(base + "/exercises/2")
    board = browser.find_element(By.ID, "leaderboard").text
    assert "ada" in board and "grace" not in board, board
    browser.save_screenshot(str(shots / "leaderboard.png"))
