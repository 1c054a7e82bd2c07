"""The studio through its HTTP API, as any client of the port can call it (no browser): the model
choice opens only the listed models, the same answer for every other value whether or not the
path exists, and no answer names a server path."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from cli_helpers import save_tiny, served_studio

API = "gradio_api/call/on_generate"


@pytest.fixture
def studio(tmp_path):
    """(base URL, listed run directory) of a studio serving one tiny run under --runs."""
    pytest.importorskip("gradio")
    from remi import REMITokenizer

    run = save_tiny(tmp_path / "runs" / "tiny", REMITokenizer())
    with served_studio(tmp_path / "work", [tmp_path / "runs"]) as url:
        yield url, run


def call(base: str, model: str, seed: int = 0) -> tuple[str, str]:
    """(event, data) of one generate call through the HTTP API: 8 tokens, no prompt."""
    values = [model, None, 1, 8, "tokens", 1.0, 0.9, seed, 1, False, "", "", "file", 0.5, "model", "model", "", "model"]
    body = json.dumps({"data": values}).encode()
    request = urllib.request.Request(base + API, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        event_id = json.load(response)["event_id"]
    with urllib.request.urlopen(f"{base}{API}/{event_id}", timeout=120) as response:
        text = response.read().decode()
    events = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    data = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    return events[-1], data[-1]


def test_only_listed_models_open_and_others_get_one_answer(studio, tmp_path):
    base, run = studio
    event, data = call(base, str(run))
    assert event == "complete" and "generated 1 sample(s)" in data

    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    pointer = tmp_path / "pointer"
    (pointer / "checkpoints").mkdir(parents=True)
    (pointer / "checkpoints" / "latest").symlink_to(secret)
    (pointer / "latest").symlink_to(secret)
    others = [str(tmp_path), str(tmp_path / "nowhere"), "/etc", str(pointer), str(run / "checkpoints"),
              str(run / "checkpoints" / "step_000003"), "tiny"]
    answers = set()
    for value in others:
        event, data = call(base, value)
        assert event in ("error", "complete"), (value, data)
        assert "bash" not in data and "root:" not in data, (value, data)
        shown = data.replace(f"Value: {value} is", "Value: VALUE is")  # gradio's echo of the value sent
        assert str(tmp_path) not in shown.replace(str(run), "LISTED"), (value, data)  # only listed paths
        answers.add((event, shown))
    assert len(answers) == 1, answers  # existing or not, a folder or a file: the same answer


def test_seeds_out_of_range_are_a_message(studio):
    base, run = studio
    event, data = call(base, str(run), seed=2**80)
    assert event == "complete" and "seed must be an integer in 0 .. 2**64 - 1" in data


def test_many_sessions_stay_bounded_and_an_oversized_upload_is_refused(studio, tmp_path):
    """Each API call without a session is a new session: the studio keeps at most MAX_SESSIONS of
    them (their files included); the server itself refuses an upload over the page's limit."""
    import uuid

    from apps.studio import MAX_SESSIONS
    from apps.studio_session import MAX_UPLOAD_BYTES

    base, run = studio
    for _ in range(MAX_SESSIONS + 4):
        event, data = call(base, str(run))
        assert event == "complete", data
    folders = [p for p in (tmp_path / "work").iterdir() if p.is_dir()]
    assert 1 <= len(folders) <= MAX_SESSIONS
    boundary = uuid.uuid4().hex
    payload = b"MThd" + b"\0" * (MAX_UPLOAD_BYTES + 1024)
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.mid\"\r\n"
            f"Content-Type: audio/midi\r\n\r\n").encode() + payload + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(base + "gradio_api/upload", data=body,
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code in (400, 413)
