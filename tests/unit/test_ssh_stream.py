"""How dtrun follows a node's output over SSH (runner/engines/ssh/remote.py, stream): a quiet
node that runs for a while costs no look at all until it exits (issue 41: a look every second
for every node of a launch, whatever its length), and a script that exits while a process it
left keeps the output open is done shortly after its exit status."""

from __future__ import annotations

import asyncio

from dtrun.engines.ssh import remote


class _QuietNode:
    """A process that prints nothing for ``seconds``, then exits 0 and closes its output (or,
    ``held``, keeps it open: a background child of its script holds it)."""

    def __init__(self, seconds: float, held: bool = False) -> None:
        self.exit_status: int | None = None
        self.exit_signal = None
        self._done = asyncio.Event()
        self._said = False
        self._held = held
        asyncio.get_running_loop().call_later(seconds, self._exit)

    def _exit(self) -> None:
        # as asyncssh's channel does: the status, then the session's callback
        self.exit_status = 0
        self.exit_status_received(0)
        if not self._held:
            self._done.set()

    def exit_status_received(self, status: int) -> None:
        pass  # SSHClientSession's: ignored unless hooked

    def exit_signal_received(self, *_: object) -> None:
        pass

    async def wait_closed(self) -> None:
        await asyncio.Event().wait()  # the channel stays open while the output is held

    @property
    def stdout(self) -> _QuietNode:
        return self

    async def readuntil(self, separators: object, max_separator_len: int = 0) -> str:
        """Nothing until the node exits; then one line, then the output's end."""
        await self._done.wait()
        if self._said:
            raise asyncio.IncompleteReadError(b"", None)
        self._said = True
        return "done\n"


def test_a_quiet_running_node_is_not_looked_at_until_it_exits(monkeypatch):
    looks = 0
    wait = asyncio.wait

    async def counted(*args, **kwargs):
        nonlocal looks
        looks += 1
        return await wait(*args, **kwargs)

    monkeypatch.setattr(asyncio, "wait", counted)  # what stream calls, counted
    lines: list[str] = []

    async def follow() -> None:
        await remote.stream(_QuietNode(3.0), lines.append)  # type: ignore[arg-type]

    asyncio.run(follow())
    assert lines == ["done\n"]  # with its line end: the sink keeps what the node wrote
    assert looks == 1, looks  # one wait for the output's end or the exit; polling made 6


def test_a_script_whose_child_holds_the_output_open_is_done_soon_after_its_exit(monkeypatch):
    monkeypatch.setattr(remote, "DRAIN_S", 0.2)

    async def follow() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await remote.stream(_QuietNode(0.3, held=True), list[str]().append)  # type: ignore[arg-type]
        return loop.time() - started

    took = asyncio.run(asyncio.wait_for(follow(), timeout=10))
    assert 0.5 <= took < 3.0, took  # the exit at 0.3 s, then DRAIN_S for trailing output


class _Channel:
    """What asyncssh's stream session asks of its channel: a receive window, UTF-8."""

    def __init__(self, window: int) -> None:
        self.window = window

    def get_recv_window(self) -> int:
        return self.window

    def get_connection(self) -> None:
        return None

    def get_encoding(self) -> tuple[str, str]:
        return "utf-8", "strict"

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def get_read_datatypes(self) -> set[None]:
        return {None}

    def get_write_datatypes(self) -> set[None]:
        return {None}

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Node:
    """A node's process whose output arrives as ``packets``, read by asyncssh's own reader."""

    def __init__(self, window: int) -> None:
        from asyncssh.stream import SSHReader, SSHStreamSession

        channel = _Channel(window)
        self.session: SSHStreamSession[str] = SSHStreamSession()
        self.session.connection_made(channel)  # type: ignore[arg-type]
        self.stdout = SSHReader(self.session, channel)  # type: ignore[arg-type]
        self.exit_status: int | None = None
        self.exit_signal = None

    def exit_status_received(self, status: int) -> None:
        pass

    def exit_signal_received(self, *_: object) -> None:
        pass

    async def wait_closed(self) -> None:
        pass


def _streamed(packets: list[str], window: int = 1 << 21) -> list[str]:
    async def follow() -> list[str]:
        node, said = _Node(window), list[str]()

        async def send() -> None:
            for packet in packets:
                await asyncio.sleep(0.01)
                node.session.data_received(packet, None)
            await asyncio.sleep(0.01)
            node.session.eof_received()

        sending = asyncio.ensure_future(send())
        await remote.stream(node, said.append)  # type: ignore[arg-type]
        await sending
        return said

    return asyncio.run(follow())


def test_a_crlf_split_between_packets_is_one_line_end():
    # not a progress state "abc\r" and an empty line "\n"
    assert _streamed(["abc\r", "\nxyz\n"]) == ["abc\r\n", "xyz\n"]
    assert _streamed(["a\r", "b\r", "\r\n"]) == ["a\r", "b\r", "\r\n"]
    assert _streamed(["state\r"]) == ["state\r"]  # the output's end: what it held


def test_a_line_longer_than_the_receive_window_does_not_end_the_output():
    said = _streamed(["a" * 100, "b" * 100, "\nafter\n"], window=150)
    assert "".join(said) == "a" * 100 + "b" * 100 + "\nafter\n"
