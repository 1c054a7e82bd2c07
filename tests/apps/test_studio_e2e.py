"""End to end: the studio served on a loopback port, driven by a real headless Chromium (selenium).

Needs Debian's `chromium` and `chromium-driver` (apt-get install chromium chromium-driver); skipped
with the reason when they, selenium or gradio are missing. Upload a MIDI prompt, generate 16 tokens
with the shipped model, wait for the audio player and fetch the WAV it plays, save a screenshot in the
test's tmp dir.
"""

from __future__ import annotations

import shutil
import urllib.request
import pytest

from cli_helpers import served_studio
from training.checkpoint import shipped_default, shipped_models

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
DRIVER = shutil.which("chromedriver")

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                       reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"),
    pytest.mark.skipif(not shipped_default() is not None, reason="no shipped pretrained/ model"),
]


@pytest.fixture
def server(tmp_path):
    pytest.importorskip("gradio")
    with served_studio(tmp_path / "work") as url:
        yield url


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)  # bounded: a stuck page fails the test instead of hanging CI
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def piano_midi(path):
    """Two 4/4 bars of quarter notes (a small upload)."""
    import miditoolkit

    midi = miditoolkit.MidiFile(ticks_per_beat=480)
    piano = miditoolkit.Instrument(program=0, name="Piano")
    piano.notes = [miditoolkit.Note(80, 60 + 2 * (beat % 4), beat * 480, beat * 480 + 450) for beat in range(8)]
    midi.instruments.append(piano)
    midi.dump(str(path))
    return path


def open_with_upload(browser, server, midi_path, prompt_bars: int, tokens: int):
    """Open the page, upload `midi_path`, keep `prompt_bars` bars and ask for `tokens` tokens; returns
    (WebDriverWait, By, expected_conditions)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(server)
    upload = wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#prompt input[type=file]")))
    upload.send_keys(str(midi_path))
    # gradio 6.31 renders the uploaded name as <span>prompt</span> <span>.mid</span>: compare without blanks
    wait.until(lambda page: midi_path.name in "".join(page.find_element(By.CSS_SELECTOR, "#prompt").text.split()))
    bars = wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#prompt_bars input[type=number]")))
    bars.clear()
    bars.send_keys(str(prompt_bars))
    length = wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#length input")))
    length.clear()
    length.send_keys(str(tokens))
    wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#unit input[value='tokens']"))).click()
    return wait, By, ready


def test_upload_generate_and_hear(server, browser, tmp_path):
    wait, By, ready = open_with_upload(browser, server, piano_midi(tmp_path / "prompt.mid"), 1, 16)
    wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#generate"))).click()
    wait.until(ready.text_to_be_present_in_element((By.CSS_SELECTOR, "#status"), "Step 1: generated"))
    assert "+16 tokens" in browser.find_element(By.CSS_SELECTOR, "#status").text
    wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#audio audio")))  # the player
    wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#audio button[aria-label='Play']")))
    link = wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "#audio a[download='sample_1.wav']")))
    with urllib.request.urlopen(link.get_attribute("href"), timeout=30) as response:  # what the player loads
        wav = response.read()
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE" and len(wav) > 44100 * 4
    shot = tmp_path / "studio.png"
    browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:4] == b"\x89PNG"
    assert list((tmp_path / "work").rglob("sample_1.wav"))


def test_continue_after_the_whole_uploaded_song(server, browser, chorale_midi):
    """Ticking "whole song" keeps every bar of the upload: the sample starts with all of it."""
    import re

    wait, By, ready = open_with_upload(browser, server, chorale_midi, 1, 8)
    sizes, previous = [], ""

    def new_status(page):
        text = page.find_element(By.CSS_SELECTOR, "#status").text
        done = text.startswith("Step 1: generated")  # the status alone, not under the progress overlay
        return text if done and text != previous else False

    for whole in (False, True):
        if whole:
            box = wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#whole_song input[type=checkbox]")))
            box.click()
        wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#generate"))).click()
        previous = wait.until(new_status)
        sizes.append(int(re.search(r"sample 1 has (\d+) tokens", previous).group(1)))
    assert sizes[1] > 2 * sizes[0]  # every bar of the chorale is in the prompt, not its first only


def test_chords_typed_in_the_page_are_followed(server, browser, tmp_path):
    """The chord box: the sample's bars open on the chords typed, one per bar."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(server)
    wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#chords textarea"))).send_keys("C Am | F G7")
    wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#generate"))).click()
    wait.until(lambda page: page.find_element(By.CSS_SELECTOR, "#status").text.startswith("Step 1: generated"))
    tokens = next((tmp_path / "work").rglob("sample_1.txt")).read_text().split()
    assert [t for t in tokens if t.startswith("Chord_")][:4] == ["Chord_C_M", "Chord_A_m", "Chord_F_M", "Chord_G_7"]


def test_infill_rewrites_the_typed_bars_of_the_upload(server, browser, chorale_midi, tmp_path):
    """The Infill button with a bar range: the sample keeps the upload's other bars token for token."""
    if "pop909_infill" not in shipped_models():
        pytest.skip("no shipped pop909_infill model")
    from remi import REMITokenizer

    wait, By, ready = open_with_upload(browser, server, chorale_midi, 1, 8)
    wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#infill_bars textarea"))).send_keys("2-3")
    wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, "#infill"))).click()
    wait.until(lambda page: page.find_element(By.CSS_SELECTOR, "#status").text.startswith("Step 1: rewrote bars 2-3"))
    tokens = next((tmp_path / "work").rglob("sample_1.txt")).read_text().split()
    tokenizer = REMITokenizer()
    song = tokenizer.tokens_to_strings(tokenizer.encode(chorale_midi))
    starts = tokenizer.bar_starts(tokenizer.encode(chorale_midi))
    assert tokens[:starts[1]] == song[:starts[1]] and tokens[-(len(song) - starts[3]):] == song[starts[3]:]


def test_every_other_control_reaches_the_request(server, browser, tmp_path):
    """Model, form, restatement, nucleus, end, render, seed, samples, temperature, top-p, the sample
    choice, Continue, Undo and the hold limit (refused for a piano model, with generate.py's message)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120)
    browser.get(server)

    def element(css):
        return wait.until(ready.element_to_be_clickable((By.CSS_SELECTOR, css)))

    def type_into(css, value):
        box = element(css)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(str(value))

    def status_starts(text):
        wait.until(lambda page: page.find_element(By.CSS_SELECTOR, "#status").text.startswith(text))
        return browser.find_element(By.CSS_SELECTOR, "#status").text

    choice = next(name for name in ("pop909_whole (shipped)", "pop909 (shipped)") if name[:-10] in shipped_models())
    type_into("#model input", choice)
    element("#model input").send_keys(Keys.ENTER)
    wait.until(lambda page: page.find_element(By.CSS_SELECTOR, "#model input").get_attribute("value") == choice)
    type_into("#form textarea", "A2 B1 A2")
    type_into("#restate input[type=number]", 1)
    for radio in ("#nucleus input[value='type']", "#end input[value='write all']", "#render input[value='tokens']"):
        element(radio).click()
    type_into("#seed input", 3)
    type_into("#samples input[type=number]", 2)
    type_into("#temperature input[type=number]", 0.9)
    type_into("#top_p input[type=number]", 0.8)
    element("#generate").click()
    assert "generated 2 sample(s)" in status_starts("Step 1: generated")
    takes = sorted((tmp_path / "work").rglob("take_001/sample_*.txt"))
    assert len(takes) == 2
    for take in takes:  # the form's 5 bars, cut after the last
        assert take.read_text().split().count("Bar_None") == 5
    element("#sample input[value='2']").click()
    wait.until(lambda page: "sample_2" in page.find_element(By.CSS_SELECTOR, "#downloads").text)
    type_into("#length input", 1)
    element("#continue").click()
    status_starts("Step 2: continued")
    element("#undo").click()
    status_starts("undone: back to step 1")
    type_into("#hold_bars textarea", 2)
    element("#generate").click()
    assert "a hold limit applies to groove models" in status_starts("Error: a hold limit")
