"""Screenshot of the Ray dashboard's Actors view of a live run, for docs/dashboard-actors.png.

    a3c-ray train --workers 2 --time-limit 60 --dashboard-port 8299 --no-progress &
    python docs/tools/dashboard_screenshot.py 8299 docs/dashboard-actors.png

Needs Debian's chromium and chromium-driver and `pip install selenium`. The dashboard wants Ray's
auth token: it is set as the cookie the dashboard's own login sets.
"""

import json
import pathlib
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

port, out = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
token = (pathlib.Path.home() / ".ray" / "auth_token").read_text().strip()
for _ in range(120):  # wait until the run's four actors are alive
    try:
        req = urllib.request.Request(
            base + "/api/v0/actors?limit=100", headers={"Authorization": f"Bearer {token}"}
        )
        rows = json.load(urllib.request.urlopen(req, timeout=5))["data"]["result"]["result"]
        if sum(r["state"] == "ALIVE" for r in rows) >= 4:
            break
    except Exception:
        pass
    time.sleep(1)
opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1500,900",
    "--user-data-dir=" + tempfile.mkdtemp(),
]:
    opts.add_argument(a)
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
try:
    d.get(base + "/api/version")
    d.add_cookie({"name": "ray-authentication-token", "value": token, "path": "/"})
    d.get(base + "/#/actors")
    time.sleep(10)
    d.save_screenshot(out)
    print("saved", out)
finally:
    d.quit()
