"""The playground takes images: picked, pasted or dropped onto the message box, shown as
thumbnails, sent as image_url parts to a real vision model server, which answers them."""

from __future__ import annotations

import base64

import pytest
from servers import cli_server
from tiny_vision import encoded, tiny_vlm

PNG = encoded((220, 30, 30), (64, 48), "PNG")

# a PNG pasted into (or dropped onto) an element, as the browser delivers it
DELIVER = """([selector, kind, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], "shot.png", { type: "image/png" }));
  const event = kind === "paste"
    ? new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true })
    : new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true });
  document.querySelector(selector).dispatchEvent(event);
}"""


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("ui-vision") / "server.log"
    with cli_server(str(tiny_vlm("qwen2_5_vl")), log_path=log) as base:
        yield base


def test_pasted_dropped_and_picked_images_reach_the_model(tab, vision_server):
    with tab(vision_server) as t:
        t.open()
        t.page.fill("#max_tokens", "4")
        t.page.fill("#temperature", "0")
        data = base64.b64encode(PNG).decode()
        t.page.evaluate(DELIVER, ["#prompt", "paste", data])
        t.page.evaluate(DELIVER, ["#composer", "drop", data])
        t.page.set_input_files(
            "#attach", files=[{"name": "a.png", "mimeType": "image/png", "buffer": PNG}]
        )
        t.page.wait_for_function(
            "() => document.querySelectorAll('[data-part=attachment]').length == 3"
        )
        t.ask("What is in these images?")
        t.wait_done(timeout=120_000)
        reply = t.last_reply()
        assert reply.locator('[data-part="error"]').inner_text() == ""
        assert reply.locator('[data-part="stats"]').inner_text()
        sent = t.bodies[-1]["messages"][-1]["content"]
        images = [p for p in sent if p["type"] == "image_url"]
        assert len(images) == 3
        assert all(p["image_url"]["url"] == f"data:image/png;base64,{data}" for p in images)
        assert sent[-1] == {"type": "text", "text": "What is in these images?"}
        user = t.page.locator('[data-role="user"]').last
        assert user.locator('[data-part="image"]').count() == 3
        assert t.page.locator("[data-part=attachment]").count() == 0
        t.open()  # the conversation, images included, survives a reload
        assert t.page.locator('[data-role="user"] [data-part="image"]').count() == 3
