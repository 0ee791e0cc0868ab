"""The page of `kvplan serve` in a real headless browser (Debian's chromium through its chromedriver, driven by
Selenium), used as a person uses it: pick GPUs, type a model, choose the task, press Plan; then read the ranked
table, the launch line and its copy button, the explanation, and the memory-against-context chart, and check each
against the API's answer. KVPLAN_SCREENSHOT=path saves a picture of the page (README's docs/img/serve.png)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import get

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("kvplan-skip: no chromium/chromedriver on PATH (scripts/setup.sh installs Debian's chromium and "
                "chromium-driver)", allow_module_level=True)

os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch a browser or driver: Debian's are used
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1900",
                "--disable-gpu", "--no-first-run"):
        options.add_argument(arg)
    # the system's driver, named: Selenium Manager would otherwise try to download one
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER or ""))
    try:
        yield driver
    finally:
        driver.quit()


def state(driver: Any) -> str:
    return str(driver.find_element(By.TAG_NAME, "body").get_attribute("data-state") or "")


def open_page(driver: Any, server: str) -> None:
    driver.get(server + "/")
    WebDriverWait(driver, 30).until(lambda d: state(d) == "ready")


def fill_and_plan(driver: Any, gpus: list[str], model: str, task: str, engine: str = "llama.cpp") -> None:
    driver.find_element(By.CSS_SELECTOR, "#gpus input.gpu").send_keys(gpus[0])
    for gpu in gpus[1:]:
        driver.find_element(By.ID, "add-gpu").click()
        driver.find_elements(By.CSS_SELECTOR, "#gpus input.gpu")[-1].send_keys(gpu)
    driver.find_element(By.ID, "model").send_keys(model)
    Select(driver.find_element(By.ID, "task")).select_by_value(task)
    Select(driver.find_element(By.ID, "engine")).select_by_value(engine)
    driver.find_element(By.ID, "submit").click()
    WebDriverWait(driver, 60).until(lambda d: state(d) in ("done", "error"))


def api_plan(server: str, params: list[tuple[str, str]]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(get(server, "/plan", params).body)
    return result


def test_plan_table_launch_line_explanation_and_chart(server: str, browser: Any) -> None:
    open_page(browser, server)
    assert browser.find_elements(By.CSS_SELECTOR, "#gpu-list option")  # the catalog loaded into the pickers
    assert browser.find_elements(By.CSS_SELECTOR, "#model-list option[value='qwen2.5-coder-32b-instruct']")
    fill_and_plan(browser, ["rtx3090", "rtx3090"], "qwen2.5-coder-32b", "agentic")
    assert state(browser) == "done", browser.find_element(By.ID, "status").text
    params = [("gpu", "rtx3090"), ("gpu", "rtx3090"), ("model", "qwen2.5-coder-32b"), ("task", "agentic"),
              ("engine", "llama.cpp")]
    plan = api_plan(server, params)

    rows = browser.find_elements(By.CSS_SELECTOR, "#options tbody tr")
    assert len(rows) == len(plan["options"]) >= 2
    for row, option in zip(rows, plan["options"]):
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        assert cells[:6] == [str(option["rank"]), option["weights"], str(option["ctx_size"]), option["cache_type_k"],
                             option["cache_type_v"], option["flash_attn"]]
        assert cells[9] == f"{option['memory']['total_bytes'] / 2**30:.2f}"
    recommended = next(o for o in plan["options"] if o["rank"] == plan["recommended"])
    assert browser.find_element(By.CSS_SELECTOR, "tr.recommended td").text == str(plan["recommended"])

    assert browser.find_element(By.ID, "launch-line").text == recommended["launch"]["llama-server"]
    browser.find_element(By.ID, "copy").click()
    WebDriverWait(browser, 5).until(lambda d: d.find_element(By.ID, "copy").text == "Copied")

    explained = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#explanation li")]
    assert explained == plan["explanation"] and any(line.startswith("Evidence:") for line in explained)

    check_chart(browser, server, plan, params, recommended["weights"])
    if os.environ.get("KVPLAN_SCREENSHOT"):
        browser.save_screenshot(os.environ["KVPLAN_SCREENSHOT"])


def check_chart(browser: Any, server: str, plan: dict[str, Any], params: list[tuple[str, str]], weights: str) -> None:
    """One series per K/V pair of the table (at most four); each point is the API's plan of that pinned context,
    and lies above the budget line exactly when it needs more than the budget; the ringed point is the pair's
    largest fitting context."""
    pairs: list[tuple[str, str]] = []
    for o in plan["options"]:
        if (o["cache_type_k"], o["cache_type_v"]) not in pairs:
            pairs.append((o["cache_type_k"], o["cache_type_v"]))
    series = browser.find_elements(By.CSS_SELECTOR, "#memory-chart g.series")
    assert [(s.get_attribute("data-k"), s.get_attribute("data-v")) for s in series] == pairs[:4]
    budget_line = browser.find_element(By.CSS_SELECTOR, "#memory-chart line.budget")
    budget = int(budget_line.get_attribute("data-bytes") or 0)
    assert budget == plan["pools"][0]["budget_bytes"]
    budget_y = float(budget_line.get_attribute("y1") or 0)
    flash = {(o["cache_type_k"], o["cache_type_v"]): o["flash_attn"] for o in reversed(plan["options"])}
    for s, (k, v) in zip(series, pairs):
        points = s.find_elements(By.CSS_SELECTOR, "circle.point")
        assert len(points) == 8
        xs = [float(p.get_attribute("cx") or 0) for p in points]
        assert xs == sorted(xs)
        for p in points[::3]:  # a few, each against the API: the chart draws what /plan says
            ctx, drawn = int(p.get_attribute("data-ctx") or 0), int(p.get_attribute("data-bytes") or 0)
            pinned = api_plan(server, [*params, ("weights", weights), ("cache-type-k", k), ("cache-type-v", v),
                                       ("flash-attn", flash[(k, v)]), ("ctx-size", str(ctx)), ("n-gpu-layers", "all")])
            assert drawn == pinned["options"][0]["pools"][0]["allocations_high_bytes"]
        for p in points:
            above = float(p.get_attribute("cy") or 0) < budget_y
            assert above == (int(p.get_attribute("data-bytes") or 0) > budget)
        ring = s.find_elements(By.CSS_SELECTOR, "circle.max")
        if ring:
            assert int(ring[0].get_attribute("data-bytes") or 0) <= budget
            assert s.get_attribute("data-max-ctx") == ring[0].get_attribute("data-ctx")


def test_another_engine(server: str, browser: Any) -> None:
    """vLLM: its own launch line, and a chart drawn without llama.cpp's flags (which vLLM plans refuse)."""
    open_page(browser, server)
    fill_and_plan(browser, ["h100-sxm"], "qwen3-32b", "coding", engine="vllm")
    assert state(browser) == "done", browser.find_element(By.ID, "status").text
    plan = api_plan(server, [("gpu", "h100-sxm"), ("model", "qwen3-32b"), ("task", "coding"), ("engine", "vllm")])
    recommended = next(o for o in plan["options"] if o["rank"] == plan["recommended"])
    assert browser.find_element(By.ID, "launch-line").text == recommended["launch"]["vllm"]
    series = browser.find_elements(By.CSS_SELECTOR, "#memory-chart g.series")
    assert series and all(len(s.find_elements(By.CSS_SELECTOR, "circle.point")) == 8 for s in series)


def test_a_bad_model_shows_the_error(server: str, browser: Any) -> None:
    open_page(browser, server)
    fill_and_plan(browser, ["24GB"], "qwen9-8b", "general")
    assert state(browser) == "error"
    error = json.loads(get(server, "/plan", [("gpu", "24GB"), ("model", "qwen9-8b"), ("task", "general"),
                                             ("engine", "llama.cpp")]).body)["error"]
    assert browser.find_element(By.ID, "status").text == error["message"]
    assert not browser.find_element(By.ID, "results").is_displayed()
