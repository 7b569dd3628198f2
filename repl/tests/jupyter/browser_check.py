"""JupyterLab in a real browser with the brain kernel: serves JupyterLab on localhost, opens the
tabular notebook in headless Chromium (driven by Playwright), runs every cell, waits for the
inline plots and saves a screenshot. Too slow and heavy for CI; run it by hand:

    pip install jupyterlab playwright          # and Debian's chromium
    python repl/tests/jupyter/browser_check.py target/release/brain docs/jupyter_lab.png

It fails (exit 1) when a cell shows an error or the plots do not appear.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from playwright.sync_api import sync_playwright

CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(brain, screenshot):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    work = tempfile.mkdtemp()
    prefix = os.path.join(work, "prefix")
    subprocess.run([brain, "kernel", "install", "--prefix", prefix, "--device", "cpu"], check=True)
    root = os.path.join(work, "root")
    os.makedirs(root)
    shutil.copy(os.path.join(repo, "docs/notebooks/tabular.ipynb"), root)
    env = dict(os.environ, JUPYTER_PATH=os.path.join(prefix, "share/jupyter"),
               JUPYTER_CONFIG_DIR=os.path.join(work, "config"), JUPYTER_RUNTIME_DIR=os.path.join(work, "rt"))
    port = free_port()
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.token=brain",
         f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
         "--LabApp.news_url=", "--ServerApp.disable_check_xsrf=True", "--allow-root"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "lab.log"), "w"))
    try:
        url = f"http://127.0.0.1:{port}/lab/tree/tabular.ipynb?token=brain"
        for _ in range(120):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(url, timeout=120_000)
            page.wait_for_selector(".jp-Notebook", timeout=120_000)
            # The kernel named in the notebook's metadata starts by itself.
            page.wait_for_selector("text=brain (Rhai)", timeout=120_000)
            time.sleep(3)
            page.click("text=Run", timeout=30_000)
            page.click("text=Run All Cells", timeout=30_000)
            page.wait_for_function("document.querySelectorAll('.jp-OutputArea-output img').length >= 2",
                                   timeout=180_000)
            errors = page.query_selector_all(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            text = page.inner_text(".jp-Notebook")
            if "RuntimeError" in text or "ParseError" in text:
                raise SystemExit("a cell failed:\n" + text[:3000])
            try:  # JupyterLab's first-run question about news covers the output
                page.locator(".Toastify button", has_text="No").first.click(timeout=3000)
            except Exception:
                pass
            page.query_selector_all(".jp-OutputArea-output img")[0].scroll_into_view_if_needed()
            time.sleep(1)
            page.screenshot(path=screenshot)
            print(f"JupyterLab ran the notebook on brain: 2 plots inline, {len(errors)} stderr outputs; "
                  f"screenshot {screenshot}")
            browser.close()
    finally:
        lab.terminate()
        lab.wait(timeout=30)


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
