"""Helpers the tests share for running coroutines against a broker."""
import asyncio


def run(coro):  # type: ignore[no-untyped-def]
    """Runs coro to its end, failing it after a minute."""
    return asyncio.run(asyncio.wait_for(coro, 60))


async def until(pred, what: str, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    """Polls an admin answer with a deadline (the broker's state is only seen by asking)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
