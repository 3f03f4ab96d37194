"""Images a client sent, read as hostile input: bounded bytes, bounded pixels (checked from
the header, before anything is decoded), four formats, EXIF orientation applied, the first
frame of an animation, no local files, and network URLs only when the operator allows them
(``--allow-image-urls``: size and time limits, no loopback or private targets unless
``--allow-private-image-urls``).

Everything here blocks (decoding, fetching): the server calls it off the event loop, from the
request's preparation."""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import ipaddress
import socket
import warnings
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from PIL import Image, ImageOps

FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}
_REDIRECTS = 3


@dataclass(frozen=True)
class ImageLimits:
    """What one request's images may cost, and where they may come from (one field per
    ``serve`` flag, named as the flag is; docs/vision.md)."""

    max_image_bytes: int = 10 * 2**20  # one image's encoded size
    max_image_pixels: int = 40_000_000  # one image's width x height (a decompression bomb's)
    max_images: int = 16  # images in one request
    max_image_tokens: int = 16_384  # the image tokens of one prompt
    allow_image_urls: bool = False  # fetch http(s) image URLs
    allow_private_image_urls: bool = False  # ... including loopback and private addresses
    image_url_timeout: float = 10.0  # seconds for one fetch


class ImageError(ValueError):
    """An image the server refuses (the HTTP layer answers 400 with ``param``)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class DecodedImage:
    image: Image.Image  # RGB, upright
    digest: str  # sha256 of the pixels and their size: the prefix cache's key for them


LOW_DETAIL_SIDE = 512  # OpenAI's detail "low": the image at most 512 pixels a side


def read_image(
    *,
    data: str | None,
    url: str | None,
    param: str,
    limits: ImageLimits,
    detail: str | None = None,
) -> DecodedImage:
    """The image given as base64 ``data`` or a ``url`` (``data:``, or http(s) when allowed),
    decoded within ``limits``; ``ImageError`` naming ``param`` otherwise. ``detail="low"``
    scales it down to at most ``LOW_DETAIL_SIDE`` a side (fewer image tokens)."""
    decoded = decode(_bytes_of(data, url, param, limits), param, limits)
    if detail != "low" or max(decoded.image.size) <= LOW_DETAIL_SIDE:
        return decoded
    small = decoded.image.copy()
    small.thumbnail((LOW_DETAIL_SIDE, LOW_DETAIL_SIDE))
    return _digested(small)


def _bytes_of(data: str | None, url: str | None, param: str, limits: ImageLimits) -> bytes:
    if data is not None:
        return _base64(data, param, limits)
    url = (url or "").strip()
    if not url:
        raise ImageError("the image has neither data nor a URL", param)
    scheme = urlsplit(url[:16]).scheme.lower() if ":" in url[:16] else ""
    if scheme == "data":
        header, _, payload = url.partition(",")
        if not header.endswith(";base64"):
            raise ImageError("a data URL image must be base64 (data:image/png;base64,...)", param)
        return _base64(payload, param, limits)
    if scheme in ("http", "https"):
        if not limits.allow_image_urls:
            raise ImageError(
                "this server does not fetch image URLs (the operator can allow it with "
                "--allow-image-urls); send the image as base64 data",
                param,
            )
        return fetch(url, param, limits)
    raise ImageError(
        f"image URLs with scheme {scheme or 'none'!r} are not accepted (data: and, when "
        "allowed, http(s) only)",
        param,
    )


def _base64(text: str, param: str, limits: ImageLimits) -> bytes:
    if len(text) > (limits.max_image_bytes * 4) // 3 + 4:
        raise ImageError(_too_big(limits), param)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image data is not valid base64", param) from None
    if len(data) > limits.max_image_bytes:
        raise ImageError(_too_big(limits), param)
    return data


def _too_big(limits: ImageLimits) -> str:
    return f"the image is larger than {limits.max_image_bytes} bytes (--max-image-bytes)"


def decode(data: bytes, param: str, limits: ImageLimits) -> DecodedImage:
    """Decode PNG, JPEG, WebP or GIF (its first frame) after checking the pixel count the
    header declares; apply EXIF orientation; RGB."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=list(FORMATS))
            width, height = image.size
            if width <= 0 or height <= 0 or width * height > limits.max_image_pixels:
                raise ImageError(
                    f"the image is {width}x{height} pixels; this server accepts at most "
                    f"{limits.max_image_pixels} (--max-image-pixels)",
                    param,
                )
            image.seek(0)
            image.load()
            upright = ImageOps.exif_transpose(image) or image
            rgb = upright.convert("RGB")
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageError(
            f"the image has more than {limits.max_image_pixels} pixels (--max-image-pixels)", param
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise ImageError(
            f"the image could not be decoded as PNG, JPEG, WebP or GIF: {error}", param
        ) from None
    return _digested(rgb)


def _digested(rgb: Image.Image) -> DecodedImage:
    digest = hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode() + rgb.tobytes()).hexdigest()
    return DecodedImage(rgb, digest)


def fetch(url: str, param: str, limits: ImageLimits) -> bytes:
    """GET an image URL within the size and time limits, following a few redirects, each
    target checked (no loopback, private or link-local address unless allowed)."""
    try:
        with httpx.Client(timeout=limits.image_url_timeout, follow_redirects=False) as client:
            for _ in range(_REDIRECTS + 1):
                _check_target(url, param, limits)
                with client.stream("GET", url) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = str(response.url.join(response.headers["location"]))
                        continue
                    if response.status_code != 200:
                        raise ImageError(
                            f"fetching the image answered HTTP {response.status_code}", param
                        )
                    return _bounded_body(response, param, limits)
    except httpx.HTTPError as error:
        raise ImageError(f"could not fetch the image: {type(error).__name__}", param) from None
    raise ImageError("fetching the image redirected too many times", param)


def _bounded_body(response: httpx.Response, param: str, limits: ImageLimits) -> bytes:
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_image_bytes:
        raise ImageError(_too_big(limits), param)
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limits.max_image_bytes:
            raise ImageError(_too_big(limits), param)
    return bytes(body)


def _check_target(url: str, param: str, limits: ImageLimits) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImageError("image URLs must be http(s) with a host", param)
    if limits.allow_private_image_urls:
        return
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise ImageError(f"the image host {parts.hostname!r} does not resolve", param) from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global or address.is_multicast:
            raise ImageError(
                f"the image host {parts.hostname!r} is a loopback, private or reserved "
                "address; this server does not fetch from those (--allow-private-image-urls)",
                param,
            )
