"""Images as hostile input: formats, orientation, sizes, decompression bombs, URL schemes,
and network fetching (off by default; loopback refused unless allowed; bounded)."""

from __future__ import annotations

import base64
import http.server
import io
import threading
import time
from contextlib import contextmanager

import pytest
from PIL import Image
from tiny_vision import bomb_png, encoded

from vllm_mlx.chat.images import ImageError, ImageLimits, decode, read_image

LIMITS = ImageLimits()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_the_four_formats_decode_to_rgb(fmt):
    decoded = decode(encoded((200, 10, 10), (40, 30), fmt), "p", LIMITS)
    assert decoded.image.mode == "RGB" and decoded.image.size == (40, 30)
    red, green, blue = decoded.image.getpixel((5, 5))
    assert red > 150 and green < 80 and blue < 80


def test_other_formats_are_refused():
    with pytest.raises(ImageError, match="PNG, JPEG, WebP or GIF") as caught:
        decode(encoded((1, 2, 3), (8, 8), "BMP"), "messages.0.content.1", LIMITS)
    assert caught.value.param == "messages.0.content.1"
    with pytest.raises(ImageError):
        decode(b"hello, not an image", "p", LIMITS)


def test_a_gif_is_read_at_its_first_frame():
    frames = [Image.new("RGB", (16, 16), c) for c in ((250, 0, 0), (0, 0, 250))]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=50)
    red, _, blue = decode(buffer.getvalue(), "p", LIMITS).image.getpixel((8, 8))
    assert red > 200 and blue < 50


def test_exif_orientation_is_applied():
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    data = encoded((10, 200, 10), (60, 20), "JPEG", exif=exif.tobytes())
    assert decode(data, "p", LIMITS).image.size == (20, 60)


def test_the_same_pixels_give_the_same_digest():
    png = decode(encoded((9, 9, 9), (8, 8), "PNG"), "p", LIMITS)
    webp = decode(encoded((9, 9, 9), (8, 8), "WEBP", lossless=True), "p", LIMITS)
    other = decode(encoded((9, 9, 10), (8, 8), "PNG"), "p", LIMITS)
    assert png.digest == webp.digest != other.digest


def test_a_decompression_bomb_is_refused_from_its_header():
    data = bomb_png(60_000, 60_000)
    assert len(data) < 200
    started = time.perf_counter()
    with pytest.raises(ImageError, match="--max-image-pixels"):
        decode(data, "p", LIMITS)
    assert time.perf_counter() - started < 1  # refused before any pixel is decoded
    with pytest.raises(ImageError, match="--max-image-pixels"):
        decode(encoded((0, 0, 0), (50, 50), "PNG"), "p", ImageLimits(max_image_pixels=2000))


def test_byte_limits_apply_before_and_after_base64():
    data = encoded((1, 1, 1), (30, 30), "PNG")
    small = ImageLimits(max_image_bytes=len(data) - 1)
    with pytest.raises(ImageError, match="--max-image-bytes"):
        read_image(data=b64(data), url=None, param="p", limits=small)
    with pytest.raises(ImageError, match="--max-image-bytes"):
        read_image(data="A" * 10_000, url=None, param="p", limits=small)
    with pytest.raises(ImageError, match="not valid base64"):
        read_image(data="!!not base64!!", url=None, param="p", limits=LIMITS)
    url = f"data:image/png;base64,{b64(data)}"
    assert read_image(data=None, url=url, param="p", limits=LIMITS).image.size == (30, 30)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "FILE:///etc/hostname",
        "/etc/passwd",
        "ftp://example.org/a.png",
        "gopher://127.0.0.1:25/",
        "data:image/png,not-base64",
        "",
    ],
)
def test_local_and_other_schemes_are_refused(url):
    with pytest.raises(ImageError):
        read_image(data=None, url=url, param="p", limits=LIMITS)


def test_low_detail_scales_an_image_down():
    url = f"data:image/png;base64,{b64(encoded((5, 5, 5), (1200, 600), 'PNG'))}"
    low = read_image(data=None, url=url, param="p", limits=LIMITS, detail="low")
    high = read_image(data=None, url=url, param="p", limits=LIMITS, detail="high")
    assert low.image.size == (512, 256) and high.image.size == (1200, 600)


class _Images(http.server.BaseHTTPRequestHandler):
    png = encoded((0, 0, 255), (20, 10), "PNG")

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/slow.png":
            time.sleep(3)
        if self.path == "/redirect.png":
            self.send_response(302)
            self.send_header("Location", "/a.png")
            self.end_headers()
            return
        body = self.png * 50 if self.path == "/big.png" else self.png
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        if self.path != "/big.png":  # the big one streams without a declared length
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except BrokenPipeError:  # the client gave up first (the timeout case)
            pass

    def log_message(self, *args):
        pass


@contextmanager
def image_host():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_urls_are_fetched_only_when_allowed_and_never_from_loopback_by_default():
    with image_host() as host:
        with pytest.raises(ImageError, match="--allow-image-urls"):
            read_image(data=None, url=f"{host}/a.png", param="p", limits=LIMITS)
        allowed = ImageLimits(allow_image_urls=True)
        with pytest.raises(ImageError, match="loopback, private or reserved"):
            read_image(data=None, url=f"{host}/a.png", param="p", limits=allowed)
        private = ImageLimits(allow_image_urls=True, allow_private_image_urls=True)
        assert read_image(data=None, url=f"{host}/a.png", param="p", limits=private).image.size == (
            20,
            10,
        )
        fetched = read_image(data=None, url=f"{host}/redirect.png", param="p", limits=private)
        assert fetched.image.size == (20, 10)


def test_fetching_is_bounded_in_size_and_time():
    with image_host() as host:
        small = ImageLimits(
            allow_image_urls=True,
            allow_private_image_urls=True,
            max_image_bytes=len(_Images.png) * 10,
            image_url_timeout=0.5,
        )
        with pytest.raises(ImageError, match="--max-image-bytes"):
            read_image(data=None, url=f"{host}/big.png", param="p", limits=small)
        started = time.perf_counter()
        with pytest.raises(ImageError, match="could not fetch"):
            read_image(data=None, url=f"{host}/slow.png", param="p", limits=small)
        assert time.perf_counter() - started < 2.5
