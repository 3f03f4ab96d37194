"""--max-queue and --max-num-seqs hold in --replay mode too."""

from __future__ import annotations

import threading

import httpx
from servers import cli_server

LONG = "word " * 3000


def _post_many(base: str, count: int) -> list[int]:
    statuses: list[int] = []
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000}

    def one() -> None:
        statuses.append(
            httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300).status_code
        )

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return statuses


def test_replay_honours_max_queue_and_max_num_seqs(tmp_path):
    replay = tmp_path / "long.txt"
    replay.write_text(LONG)
    args = ("--replay", str(replay), "--max-num-seqs", "1", "--max-queue", "1")
    with cli_server(*args, log_path=tmp_path / "server.log") as base:
        seen: list[tuple[int, int]] = []  # (running, waiting) while the requests are out
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                health = httpx.get(f"{base}/health", timeout=30).json()
                seen.append((health["running"], health["queue_depth"]))

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            statuses = _post_many(base, 6)
        finally:
            done.set()
            watcher.join(timeout=60)
    # one runs, one waits, the rest are refused: with the defaults (8 running, 256 waiting)
    # all six would run at once and none would be refused
    assert max(running for running, _ in seen) == 1, seen
    assert max(waiting for _, waiting in seen) <= 1, seen
    assert statuses.count(429) >= 1, statuses
    assert statuses.count(200) >= 2, statuses
    assert set(statuses) <= {200, 429}
