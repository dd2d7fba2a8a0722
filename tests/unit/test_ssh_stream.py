"""How dtrun follows a node's output over SSH (runner/engines/ssh/remote.py, stream): a quiet
node that runs for a while costs a look or so a second, not ten (issue 41: ten wakeups a second
for every node of a launch, whatever its length)."""

from __future__ import annotations

import asyncio

from dtrun.engines.ssh import remote


class _QuietNode:
    """A process that prints nothing for ``seconds``, then exits 0 and closes its output."""

    def __init__(self, seconds: float) -> None:
        self.exit_status: int | None = None
        self.exit_signal = None
        self._done = asyncio.Event()
        self._said = False
        asyncio.get_running_loop().call_later(seconds, self._exit)

    def _exit(self) -> None:
        self.exit_status = 0
        self._done.set()

    @property
    def stdout(self) -> _QuietNode:
        return self

    async def readuntil(self, separators: object) -> str:
        """Nothing until the node exits; then one line, then the output's end."""
        await self._done.wait()
        if self._said:
            raise asyncio.IncompleteReadError(b"", None)
        self._said = True
        return "done\n"


def test_a_quiet_running_node_is_looked_at_about_once_a_second(monkeypatch):
    looks = 0
    wait = asyncio.wait

    async def counted(*args, **kwargs):
        nonlocal looks
        looks += 1
        return await wait(*args, **kwargs)

    monkeypatch.setattr(asyncio, "wait", counted)  # what stream calls, counted
    lines: list[str] = []

    async def follow() -> None:
        await remote.stream(_QuietNode(4.0), lines.append)  # type: ignore[arg-type]

    asyncio.run(follow())
    assert lines == ["done\n"]  # with its line end: the sink keeps what the node wrote
    assert looks <= 10, looks  # 0.1, 0.2, 0.4, 0.8, then every second; every 0.1 s was 40
